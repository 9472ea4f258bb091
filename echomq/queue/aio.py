"""The asyncio Queue: ``echomq.aio.Queue`` on ``redis.asyncio`` or ``valkey.asyncio``, with the
same names, calls and semantics as ``echomq.Queue`` — both send what ``echomq.engine.calls``
builds."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterable
from typing import Any

from redis.exceptions import RedisError, ResponseError

from echomq.engine.async_executors import async_executor_for
from echomq.engine.calls import (
    DEFAULT_BATCH_LIMIT,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_MS,
    ZSETS,
    Call,
    Item,
    Job,
    JobOutcome,
    Outcome,
    QueueCalls,
    Verdict,
    admission_reads,
    earliest,
    evicting_policy,
    eviction_message,
    fenced,
    job_of,
    lost_admission,
    outcome_of,
    settled,
)
from echomq.engine.clients import twins
from echomq.engine.errors import EvictionPolicyWarning
from echomq.engine.once import lost_reply
from echomq.engine.wire import Wire
from echomq.queue.lanes import AsyncLaneControls, lane_groups, shown_depths
from echomq.queue.parking import (
    WATCH_ROLE,
    watch_commands,
)
from echomq.queue.registry import REGISTRY_KEY
from echomq.queue.waiting import next_block_s, wait_slice_s

log = logging.getLogger("echomq")


async def warn_if_evicting(conn: Any) -> str | None:
    """As ``echomq.queue.blocking.warn_if_evicting``, on an asyncio client."""
    try:
        policy = evicting_policy(await conn.config_get("maxmemory-policy"))
    except twins(RedisError):
        return None
    if policy is not None:
        log.warning(eviction_message(policy))
        warnings.warn(eviction_message(policy), EvictionPolicyWarning, stacklevel=3)
    return policy


class Queue(AsyncLaneControls):
    """One queue on a Valkey server, for asyncio code; see ``echomq.Queue``. Creating it does no
    I/O: ``await queue.check_policy()`` warns about an evicting server."""

    def __init__(self, conn: Any, name: str, *, wire: int = Wire.SCRIPTS,
                 retention_ms: int = DEFAULT_RETENTION_MS,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self.conn = conn
        self.name = name
        self.calls = QueueCalls(name, retention_ms=retention_ms, max_attempts=max_attempts)
        self.executor = async_executor_for(wire)
        self._registered = False

    @property
    def wire(self) -> int:
        return self.executor.wire

    def key(self, role: str, job_id: str | None = None, lane: str | None = None) -> str:
        return self.calls.key(role, job_id, lane)

    async def check_policy(self) -> str | None:
        return await warn_if_evicting(self.conn)

    async def _send(self, call: Call, *, watch: bool = False) -> Any:
        """As ``echomq.Queue._send``: with ``watch``, the watch tokens follow in the flush."""
        if not watch:
            return await self.executor.call(self.conn, *call)
        watch_key = self.key(WATCH_ROLE)
        return (await self.executor.call_many(self.conn, [call],
                                              then=watch_commands(watch_key)))[0]

    async def enqueue(self, job_id: str, payload: bytes | str, *, lane: str | None = None,
                      delay_ms: int = 0, at_ms: int | None = None,
                      now: int | None = None) -> Verdict:
        """As ``echomq.Queue.enqueue``: at once, or delayed with ``delay_ms`` / ``at_ms``."""
        call = self.calls.enqueue(job_id, payload, lane, now, delay_ms, at_ms)
        started = time.monotonic()
        try:
            verdict = Verdict.of(await self._send(call))
        except lost_reply():
            verdict = await self._after_lost_reply(call, started)
        await self._register()
        return verdict

    async def _after_lost_reply(self, call: Call, started: float) -> Verdict:
        """As ``echomq.Queue._after_lost_reply``."""
        verdict = await self._lost_admission(call, started)
        if verdict is not None:
            return verdict
        verdict = Verdict.of(await self._send(call))
        if verdict is Verdict.DUPLICATE:
            return await self._lost_admission(call, started) or verdict
        return verdict

    async def _lost_admission(self, call: Call, started: float) -> Verdict | None:
        async with self.conn.pipeline(transaction=False) as pipe:
            for command in admission_reads(call):
                pipe.execute_command(*command)
            replies = await pipe.execute()
        return lost_admission(call, replies, time.monotonic() - started)

    async def enqueue_many(self, items: Iterable[Item], *,
                           now: int | None = None) -> list[Verdict]:
        replies = await self.executor.call_many(self.conn, self.calls.enqueue_many(items, now))
        await self._register()
        return [Verdict.of(reply) for reply in replies]

    async def _register(self) -> None:
        """As ``echomq.Queue._register``: the registry of queues learns this one, once."""
        if self._registered:
            return
        self._registered = True
        try:
            await self.conn.sadd(REGISTRY_KEY, self.name)
        except twins(ResponseError) as exc:
            log.debug("queue %s not entered in %s: %s", self.name, REGISTRY_KEY, exc)

    async def claim(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None,
                    claim_id: str | None = None) -> Job | None:
        """As ``echomq.Queue.claim``."""
        return job_of(await self._send(self.calls.claim(lease_ms, now, claim_id)))

    async def claim_lane(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None,
                         watch: bool = False, claim_id: str | None = None) -> Job | None:
        call = self.calls.claim_lane(lease_ms, now, claim_id)
        return job_of(await self._send(call, watch=watch))

    async def ack(self, job: Job, *, retention_ms: int | None = None,
                  result: bytes | str | None = None) -> Verdict:
        """As ``echomq.Queue.ack``: with ``result``, the tombstone keeps it."""
        return fenced(job, await self._send(self.calls.ack(job, retention_ms, result)))

    async def retry(self, job: Job, *, delay_ms: int = 1_000, error: str | bytes = "",
                    max_attempts: int | None = None, now: int | None = None) -> Verdict:
        call = self.calls.retry(job, delay_ms, error, max_attempts, now)
        return fenced(job, await self._send(call))

    async def extend(self, job: Job, *, lease_ms: int = DEFAULT_LEASE_MS,
                     now: int | None = None) -> Verdict:
        return fenced(job, await self._send(self.calls.extend(job, lease_ms, now)))

    async def settle(self, outcomes: Iterable[Outcome], *, claim: int = 0,
                     lease_ms: int = DEFAULT_LEASE_MS, retention_ms: int | None = None,
                     now: int | None = None,
                     claim_id: str | None = None) -> tuple[list[Verdict], list[Job]]:
        """As ``echomq.Queue.settle``: outcomes settled in order, then up to ``claim`` leases."""
        call = self.calls.settle(outcomes, claim, lease_ms, retention_ms, now, claim_id=claim_id)
        return settled(await self._send(call))

    async def settle_leased(self, outcomes: Iterable[Outcome], claim: int, lease_ms: int,
                            retention_ms: int | None, now: int | None, *,
                            watch: bool = False,
                            claim_id: str | None = None) -> tuple[list[Verdict], list[Job]]:
        """As ``echomq.Queue.settle_leased``."""
        call = self.calls.settle(outcomes, claim, lease_ms, retention_ms, now, leased=True,
                                 claim_id=claim_id)
        return settled(await self._send(call, watch=watch))

    async def claim_many(self, count: int, lease_ms: int = DEFAULT_LEASE_MS, *,
                         now: int | None = None, claim_id: str | None = None) -> list[Job]:
        call = self.calls.claim_many(count, lease_ms, now, claim_id)
        return settled(await self._send(call))[1]

    async def extend_many(self, jobs: Iterable[Job], *, lease_ms: int = DEFAULT_LEASE_MS,
                          now: int | None = None) -> list[Verdict]:
        replies = await self._send(self.calls.extend_many(jobs, lease_ms, now))
        return [Verdict.of(reply) for reply in replies]

    async def recover(self, *, now: int | None = None, limit: int = DEFAULT_BATCH_LIMIT,
                      max_attempts: int | None = None) -> int:
        """As ``echomq.Queue.recover``: expired leases back to run, or dead when spent."""
        return int(await self._send(self.calls.recover(now, limit, max_attempts)))

    async def promote(self, *, now: int | None = None, limit: int = DEFAULT_BATCH_LIMIT) -> int:
        return int(await self._send(self.calls.promote(now, limit)))

    async def next_due(self) -> int | None:
        async with self.conn.pipeline(transaction=False) as pipe:
            pipe.zrange(self.key("delayed"), 0, 0, withscores=True)
            pipe.zrange(self.key("active"), 0, 0, withscores=True)
            pipe.zrange(self.key("throttled"), 0, 0, withscores=True)
            return earliest(await pipe.execute())

    async def park(self, timeout_s: float) -> bool:
        return await self.conn.blpop([self.key("wake")], timeout=timeout_s) is not None

    async def outcome(self, job_id: str) -> JobOutcome:
        """As ``echomq.Queue.outcome``: where ``job_id`` stands now, in one round trip."""
        async with self.conn.pipeline(transaction=False) as pipe:
            for command in self.calls.outcome_reads(job_id):
                pipe.execute_command(*command)
            return outcome_of(await pipe.execute(raise_on_error=False))

    async def wait(self, job_id: str, timeout_s: float) -> JobOutcome:
        """As ``echomq.Queue.wait``: block (on the job's ended key, never polling, in slices under
        the socket timeout) until the job is done or dead, or ``timeout_s`` passes; its outcome
        then."""
        deadline = time.monotonic() + timeout_s
        slice_s = wait_slice_s(self.conn)
        ended = self.key("ended", job_id)
        while True:
            outcome = await self.outcome(job_id)
            block_s = next_block_s(deadline, slice_s)
            if outcome.ended or block_s is None:
                return outcome
            if await self.conn.blmove(ended, ended, block_s, "LEFT", "RIGHT") is None:
                continue  # the slice ran out: the loop reads the outcome again
            outcome = await self.outcome(job_id)
            if outcome.ended:
                return outcome
            await self.conn.delete(ended)  # a token of an earlier life of the id

    async def counts(self) -> dict[str, int]:
        async with self.conn.pipeline(transaction=False) as pipe:
            for role in ZSETS:
                pipe.zcard(self.key(role))
            pipe.lrange(self.key("ring"), 0, -1)
            pipe.hkeys(self.key("parked"))
            *sizes, groups, parked = await pipe.execute()
        counts = dict(zip(ZSETS, map(int, sizes), strict=True))
        counts["lanes"] = sum((await self.lane_depths(groups, parked)).values())
        return counts

    async def lane_depths(self, groups: Iterable[Any] | None = None,
                          parked: Iterable[Any] | None = None) -> dict[str, int]:
        """As ``echomq.Queue.lane_depths``: the ring's lanes, then the parked ones."""
        if groups is None or parked is None:
            groups = await self.conn.lrange(self.key("ring"), 0, -1)
            parked = await self.conn.hkeys(self.key("parked"))
        names = lane_groups(groups, parked)
        async with self.conn.pipeline(transaction=False) as pipe:
            for group in names:
                pipe.llen(self.key("lane", lane=group))
            return shown_depths(names, await pipe.execute(), groups)
