"""The asyncio client: ``echomq.aio.Queue`` on ``redis.asyncio``, with the same names, calls and
semantics as ``echomq.Queue`` — both send what ``echomq.calls`` builds."""

from __future__ import annotations

import asyncio
import inspect
import logging
import warnings
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from redis.exceptions import NoScriptError, RedisError, ResponseError

from echomq.calls import (
    DEFAULT_BATCH_LIMIT,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_MS,
    ZSETS,
    Arg,
    Call,
    Item,
    Job,
    Outcome,
    QueueCalls,
    Verdict,
    earliest,
    evicting_policy,
    eviction_message,
    fenced,
    job_of,
    settled,
    text,
)
from echomq.consumer import error_text, log_failure, park_window, refuse_unsupported
from echomq.errors import EvictionPolicyWarning, StaleLease, Wire6Unsupported
from echomq.executors import raise_mapped
from echomq.scripts import script_for
from echomq.transitions import Transition

__all__ = ["AsyncExecutor", "Consumer", "Job", "Queue", "Verdict", "async_executor_for"]

log = logging.getLogger("echomq")


class AsyncExecutor(ABC):
    """Runs transitions on a ``redis.asyncio`` client (``Redis``, ``RedisCluster``)."""

    wire: int

    async def call(self, client: Any, transition: Transition, keys: Sequence[str],
                   args: Sequence[Arg]) -> Any:
        try:
            return await self._send(client, transition, keys, args)
        except ResponseError as exc:
            raise_mapped(exc)

    async def call_many(self, client: Any, calls: Sequence[Call]) -> list[Any]:
        """Runs many calls in one pipeline flush; a reply each (see Executor.call_many)."""
        for transition in {call[0] for call in calls}:
            await self.prepare(client, transition)
        async with client.pipeline(transaction=False) as pipe:
            for transition, keys, args in calls:
                self._queue(pipe, transition, keys, args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        return [await self._settle(client, call, reply)
                for call, reply in zip(calls, replies, strict=True)]

    async def _settle(self, client: Any, call: Call, reply: Any) -> Any:
        if isinstance(reply, NoScriptError):
            return await self.call(client, *call)
        if isinstance(reply, ResponseError):
            raise_mapped(reply)
        if isinstance(reply, Exception):  # a connection or cluster error in place of a reply
            raise reply
        return reply

    @abstractmethod
    async def prepare(self, client: Any, transition: Transition) -> None: ...

    @abstractmethod
    async def _send(self, client: Any, transition: Transition, keys: Sequence[str],
                    args: Sequence[Arg]) -> Any: ...

    @abstractmethod
    def _queue(self, pipe: Any, transition: Transition, keys: Sequence[str],
               args: Sequence[Arg]) -> None: ...


class AsyncScriptExecutor(AsyncExecutor):
    """wire=5: ``EVALSHA``, the script loaded again on ``NOSCRIPT``."""

    wire = 5

    async def prepare(self, client: Any, transition: Transition) -> None:
        await client.script_load(script_for(transition).source)

    async def _send(self, client: Any, transition: Transition, keys: Sequence[str],
                    args: Sequence[Arg]) -> Any:
        script = script_for(transition)
        try:
            return await client.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(script.source)
            return await client.evalsha(script.sha, len(keys), *keys, *args)

    def _queue(self, pipe: Any, transition: Transition, keys: Sequence[str],
               args: Sequence[Arg]) -> None:
        pipe.evalsha(script_for(transition).sha, len(keys), *keys, *args)


class AsyncNativeExecutor(AsyncExecutor):
    """wire=6: the trafikey module's ``EMQ.*`` command; script-only transitions are refused."""

    wire = 6

    async def prepare(self, client: Any, transition: Transition) -> None:
        if transition.native is None:
            raise Wire6Unsupported(transition.public_name)

    async def _send(self, client: Any, transition: Transition, keys: Sequence[str],
                    args: Sequence[Arg]) -> Any:
        await self.prepare(client, transition)
        return await client.execute_command(transition.native, len(keys), *keys, *args)

    def _queue(self, pipe: Any, transition: Transition, keys: Sequence[str],
               args: Sequence[Arg]) -> None:
        pipe.execute_command(transition.native, len(keys), *keys, *args)


_EXECUTORS: dict[int, AsyncExecutor] = {5: AsyncScriptExecutor(), 6: AsyncNativeExecutor()}


def async_executor_for(wire: int) -> AsyncExecutor:
    """The asyncio executor of ``wire`` (5: scripts, 6: native)."""
    try:
        return _EXECUTORS[wire]
    except KeyError:
        raise ValueError(f"wire must be 5 (scripts) or 6 (native), not {wire!r}") from None


async def warn_if_evicting(conn: Any) -> str | None:
    """As ``echomq.queue.warn_if_evicting``, on an asyncio client."""
    try:
        policy = evicting_policy(await conn.config_get("maxmemory-policy"))
    except RedisError:
        return None
    if policy is not None:
        log.warning(eviction_message(policy))
        warnings.warn(eviction_message(policy), EvictionPolicyWarning, stacklevel=3)
    return policy


class Queue:
    """One queue on a Valkey server, for asyncio code; see ``echomq.Queue``. Creating it does no
    I/O: ``await queue.check_policy()`` warns about an evicting server."""

    def __init__(self, conn: Any, name: str, *, wire: int = 5,
                 retention_ms: int = DEFAULT_RETENTION_MS,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self.conn = conn
        self.name = name
        self.calls = QueueCalls(name, retention_ms=retention_ms, max_attempts=max_attempts)
        self.executor = async_executor_for(wire)

    @property
    def wire(self) -> int:
        return self.executor.wire

    def key(self, role: str, job_id: str | None = None, lane: str | None = None) -> str:
        return self.calls.key(role, job_id, lane)

    async def check_policy(self) -> str | None:
        return await warn_if_evicting(self.conn)

    async def _send(self, call: Call) -> Any:
        return await self.executor.call(self.conn, *call)

    async def enqueue(self, job_id: str, payload: bytes | str, *, lane: str | None = None,
                      now: int | None = None) -> Verdict:
        return Verdict.of(await self._send(self.calls.enqueue(job_id, payload, lane, now)))

    async def enqueue_many(self, items: Iterable[Item], *,
                           now: int | None = None) -> list[Verdict]:
        replies = await self.executor.call_many(self.conn, self.calls.enqueue_many(items, now))
        return [Verdict.of(reply) for reply in replies]

    async def claim(self, lease_ms: int = DEFAULT_LEASE_MS, *,
                    now: int | None = None) -> Job | None:
        return job_of(await self._send(self.calls.claim(lease_ms, now)))

    async def claim_lane(self, lease_ms: int = DEFAULT_LEASE_MS, *,
                         now: int | None = None) -> Job | None:
        return job_of(await self._send(self.calls.claim_lane(lease_ms, now)))

    async def ack(self, job: Job, *, retention_ms: int | None = None) -> Verdict:
        return fenced(job, await self._send(self.calls.ack(job, retention_ms)))

    async def retry(self, job: Job, *, delay_ms: int = 1_000, error: str | bytes = "",
                    max_attempts: int | None = None, now: int | None = None) -> Verdict:
        call = self.calls.retry(job, delay_ms, error, max_attempts, now)
        return fenced(job, await self._send(call))

    async def extend(self, job: Job, *, lease_ms: int = DEFAULT_LEASE_MS,
                     now: int | None = None) -> Verdict:
        return fenced(job, await self._send(self.calls.extend(job, lease_ms, now)))

    async def settle(self, outcomes: Iterable[Outcome], *, claim: int = 0,
                     lease_ms: int = DEFAULT_LEASE_MS, retention_ms: int | None = None,
                     now: int | None = None) -> tuple[list[Verdict], list[Job]]:
        """As ``echomq.Queue.settle``: outcomes settled in order, then up to ``claim`` leases."""
        call = self.calls.settle(outcomes, claim, lease_ms, retention_ms, now)
        return settled(await self._send(call))

    async def claim_many(self, count: int, lease_ms: int = DEFAULT_LEASE_MS, *,
                         now: int | None = None) -> list[Job]:
        return settled(await self._send(self.calls.claim_many(count, lease_ms, now)))[1]

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
            return earliest(await pipe.execute())

    async def park(self, timeout_s: float) -> bool:
        return await self.conn.blpop([self.key("wake")], timeout=timeout_s) is not None

    async def counts(self) -> dict[str, int]:
        async with self.conn.pipeline(transaction=False) as pipe:
            for role in ZSETS:
                pipe.zcard(self.key(role))
            pipe.lrange(self.key("ring"), 0, -1)
            *sizes, groups = await pipe.execute()
        counts = dict(zip(ZSETS, map(int, sizes), strict=True))
        counts["lanes"] = sum((await self.lane_depths(groups)).values())
        return counts

    async def lane_depths(self, groups: Iterable[Any] | None = None) -> dict[str, int]:
        if groups is None:
            groups = await self.conn.lrange(self.key("ring"), 0, -1)
        names = [text(group) for group in groups]
        async with self.conn.pipeline(transaction=False) as pipe:
            for group in names:
                pipe.llen(self.key("lane", lane=group))
            depths = await pipe.execute()
        return dict(zip(names, map(int, depths), strict=True))


AsyncHandler = Callable[[Job], Awaitable[object] | object]


class Consumer:
    """The consumer loop for asyncio code; see ``echomq.Consumer``. ``handler`` may be a
    coroutine function (awaited) or a plain function (run in a worker thread). Each beat is
    recover → promote → drain → park, parking on ``BLPOP`` of the wake key."""

    def __init__(self, queue: Queue, handler: AsyncHandler, *, lanes: bool = False,
                 lease_ms: int = DEFAULT_LEASE_MS, retry_delay_ms: int = 1_000,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, park_cap_ms: int = 5_000,
                 park_floor_ms: int = 10, heartbeat: bool = True,
                 retention_ms: int | None = None, clock: Callable[[], int] | None = None) -> None:
        refuse_unsupported(queue.wire, lanes)
        self.queue = queue
        self.handler = handler
        self.lanes = lanes
        self.lease_ms = lease_ms
        self.retry_delay_ms = retry_delay_ms
        self.max_attempts = max_attempts
        self.park_cap_ms = park_cap_ms
        self.park_floor_ms = min(park_floor_ms, park_cap_ms)
        self.heartbeat = heartbeat
        self.retention_ms = retention_ms
        self.clock = clock
        self._stopping = asyncio.Event()
        self._parking: asyncio.Task[bool] | None = None

    async def run(self) -> None:
        """Beat until ``stop()``."""
        log.info("async consumer started: queue %s, wire %d", self.queue.name, self.queue.wire)
        while not self._stopping.is_set():
            await self.beat()
        log.info("async consumer stopped: queue %s", self.queue.name)

    def stop(self) -> None:
        """Stop claiming; a parked consumer returns at once, a running job finishes first."""
        self._stopping.set()
        if self._parking is not None:
            self._parking.cancel()

    async def beat(self, *, park: bool = True) -> int:
        await self.queue.recover(now=self._now())
        await self.queue.promote(now=self._now())
        handled = await self.drain()
        if park and not self._stopping.is_set():
            await self.park()
        return handled

    async def drain(self) -> int:
        handled = 0
        while not self._stopping.is_set():
            job = await self._claim()
            if job is None:
                break
            await self.process(job)
            handled += 1
        return handled

    async def park(self) -> bool:
        """Block on the wake key until a token, the next due time, the cap, or ``stop()``."""
        self._parking = asyncio.ensure_future(self.queue.park(await self.park_timeout_ms() / 1000))
        try:
            return await self._parking
        except asyncio.CancelledError:
            if not self._stopping.is_set():
                raise
            return False
        finally:
            self._parking = None

    async def park_timeout_ms(self) -> int:
        due = await self.queue.next_due()
        if due is None:
            return self.park_cap_ms
        now = self.clock() if self.clock is not None else await self._server_ms()
        return park_window(due, now, self.park_floor_ms, self.park_cap_ms)

    async def process(self, job: Job) -> None:
        """Run the handler on ``job`` under its lease, then ack it, or retry it on failure."""
        beating = asyncio.ensure_future(self._beat_lease(job)) if self.heartbeat else None
        try:
            failure = await self._run_handler(job)
        finally:
            if beating is not None:
                beating.cancel()
                await asyncio.gather(beating, return_exceptions=True)
        try:
            if failure is None:
                await self.queue.ack(job, retention_ms=self.retention_ms)
                return
            verdict = await self.queue.retry(job, delay_ms=self.retry_delay_ms,
                                             error=error_text(failure),
                                             max_attempts=self.max_attempts, now=self._now())
            log_failure(job, verdict, failure, self.retry_delay_ms)
        except StaleLease:
            log.warning("stale lease: %s attempt %d finished after its lease was lost", job.id,
                        job.attempt)

    async def _run_handler(self, job: Job) -> Exception | None:
        try:
            result = (self.handler(job) if inspect.iscoroutinefunction(self.handler)
                      else await asyncio.to_thread(self.handler, job))
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            return exc
        return None

    async def _beat_lease(self, job: Job) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            try:
                await self.queue.extend(job, lease_ms=self.lease_ms, now=self._now())
            except StaleLease:
                log.warning("stale lease: %s attempt %d lost its lease while running", job.id,
                            job.attempt)
                return

    async def _claim(self) -> Job | None:
        if self.lanes:
            job = await self.queue.claim_lane(self.lease_ms, now=self._now())
            if job is not None:
                return job
        return await self.queue.claim(self.lease_ms, now=self._now())

    async def _server_ms(self) -> int:
        seconds, micros = await self.queue.conn.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def _now(self) -> int | None:
        return self.clock() if self.clock is not None else None
