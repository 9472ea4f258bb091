"""``Queue``: the producer's and the worker's view of one echomq queue."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterable
from typing import Any

from redis.exceptions import RedisError, ResponseError

from echomq.engine.calls import (
    DEFAULT_BATCH_LIMIT,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_MS,
    ZSETS,
    Ack,
    Call,
    Item,
    Job,
    JobOutcome,
    Outcome,
    Payload,
    QueueCalls,
    Release,
    Retry,
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
from echomq.engine.executors import executor_for
from echomq.engine.once import lost_reply
from echomq.engine.wire import Wire
from echomq.queue.bounds import HOUSEKEEPING_STEP, more_due
from echomq.queue.lanes import LaneControls, lane_depths_of
from echomq.queue.parking import WATCH_ROLE, watch_commands
from echomq.queue.registry import REGISTRY_KEY
from echomq.queue.waiting import next_block_s, wait_slice_s

__all__ = ["DEFAULT_LEASE_MS", "Ack", "Job", "JobOutcome", "Outcome", "Queue", "Release", "Retry",
           "Verdict", "warn_if_evicting"]

log = logging.getLogger("echomq")


def warn_if_evicting(conn: Any) -> str | None:
    """Warns (EvictionPolicyWarning, and the ``echomq`` log) when the server's maxmemory-policy
    may evict keys: a queue's jobs would then vanish under memory pressure. Returns that policy;
    None when it cannot evict or the server does not say (CONFIG denied by ACL, or renamed)."""
    try:
        policy = evicting_policy(conn.config_get("maxmemory-policy"))
    except twins(RedisError):
        return None
    if policy is not None:
        log.warning(eviction_message(policy))
        warnings.warn(eviction_message(policy), EvictionPolicyWarning, stacklevel=3)
    return policy


class Queue(LaneControls):
    """One queue on a Valkey server, run by scripts (``wire=5``) or the trafikey module (``6``).

    ``conn`` is a ``redis.Redis`` or ``redis.cluster.RedisCluster``. Every time-dependent call
    takes ``now`` (ms); None lets the server's clock decide.
    """

    def __init__(self, conn: Any, name: str, *, wire: int = Wire.SCRIPTS,
                 retention_ms: int = DEFAULT_RETENTION_MS,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, check_policy: bool = True) -> None:
        self.conn = conn
        self.name = name
        self.calls = QueueCalls(name, retention_ms=retention_ms, max_attempts=max_attempts)
        self.executor = executor_for(wire)
        self._registered = False
        if check_policy:
            warn_if_evicting(conn)

    @property
    def wire(self) -> int:
        return self.executor.wire

    @property
    def base(self) -> str:
        return self.calls.base

    @property
    def retention_ms(self) -> int:
        return self.calls.retention_ms

    @property
    def max_attempts(self) -> int:
        return self.calls.max_attempts

    def key(self, role: str, job_id: str | None = None, lane: str | None = None) -> str:
        """The key of ``role`` (pending, active, delayed, dead, wake, ring; ``job`` with a job
        id; ``lane`` with a group) of this queue."""
        return self.calls.key(role, job_id, lane)

    def _send(self, call: Call, *, watch: bool = False) -> Any:
        """Run ``call``; with ``watch``, the queue's watch tokens follow it in the same flush
        (``echomq.queue.parking``)."""
        if not watch:
            return self.executor.call(self.conn, *call)
        return self.executor.call_many(self.conn, [call],
                                       then=watch_commands(self.key(WATCH_ROLE)))[0]

    # producer -------------------------------------------------------------------------------

    def enqueue(self, job_id: str, payload: Payload, *, lane: str | None = None,
                delay_ms: int = 0, at_ms: int | None = None,
                now: int | None = None) -> Verdict:
        """Admit a job once: ENQUEUED, or DUPLICATE when its row exists. KindError on a bad id;
        TypeError, before anything is sent, for a payload that is not str or bytes-like.

        With ``lane``, the job joins its group's lane and is served by ``claim_lane`` in turn
        with the other groups (scripts only: a ``wire=6`` queue raises Wire6Unsupported).

        With ``delay_ms`` or ``at_ms`` (an absolute time in ms on the server's clock), the job
        waits in the delayed set until the later of now + ``delay_ms`` and ``at_ms``; promote
        then moves it to pending (a lane job to its lane)."""
        call = self.calls.enqueue(job_id, payload, lane, now, delay_ms, at_ms)
        started = time.monotonic()
        try:
            verdict = Verdict.of(self._send(call))
        except lost_reply():
            verdict = self._after_lost_reply(call, started)
        self._register()
        return verdict

    def _after_lost_reply(self, call: Call, started: float) -> Verdict:
        """An admission whose reply was lost: ENQUEUED if it went through (docs/PROTOCOL.md,
        Replays), else sent once more."""
        verdict = self._lost_admission(call, started)
        if verdict is not None:
            return verdict
        verdict = Verdict.of(self._send(call))
        if verdict is Verdict.DUPLICATE:  # the first one arrived after all
            return self._lost_admission(call, started) or verdict
        return verdict

    def _lost_admission(self, call: Call, started: float) -> Verdict | None:
        with self.conn.pipeline(transaction=False) as pipe:
            for command in admission_reads(call):
                pipe.execute_command(*command)
            replies = pipe.execute()
        return lost_admission(call, replies, time.monotonic() - started)

    def enqueue_many(self, items: Iterable[Item], *, now: int | None = None) -> list[Verdict]:
        """Admit many jobs in one wire flush; a verdict per item, in order. Items are
        ``(id, payload)`` or ``(id, payload, lane)``; every one is checked before anything is
        sent."""
        replies = self.executor.call_many(self.conn, self.calls.enqueue_many(items, now))
        self._register()
        return [Verdict.of(reply) for reply in replies]

    def _register(self) -> None:
        """Enter this queue in the server's registry of queues after its first admission (once
        per Queue), so operators' tools list it without scanning the keyspace. A user whose ACL
        denies the registry key still produces: the queue is then found by ``stats --rescan``."""
        if self._registered:
            return
        self._registered = True
        try:
            self.conn.sadd(REGISTRY_KEY, self.name)
        except twins(ResponseError) as exc:
            log.debug("queue %s not entered in %s: %s", self.name, REGISTRY_KEY, exc)

    # worker ---------------------------------------------------------------------------------

    def claim(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None,
              claim_id: str | None = None) -> Job | None:
        """Lease the oldest pending job for ``lease_ms``, or None when there is none.

        ``claim_id`` (1 to 200 bytes of ``[A-Za-z0-9._:-]``, unique to this call, e.g.
        ``echomq.engine.calls.new_claim_id()``): the lease is recorded under it for ``lease_ms``, so
        the same call sent again after its reply was lost answers the lease still held rather
        than lease another job and count another attempt."""
        return job_of(self._send(self.calls.claim(lease_ms, now, claim_id)))

    def claim_lane(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None,
                   watch: bool = False, claim_id: str | None = None) -> Job | None:
        """Lease the head job of the next lane in turn (the ring rotates one step per claim),
        or None when every lane is empty. Scripts only (``wire=6`` raises Wire6Unsupported).
        ``watch``: the queue's watch tokens go out in the claim's flush, after it.
        ``claim_id``: as for ``claim``."""
        call = self.calls.claim_lane(lease_ms, now, claim_id)
        return job_of(self._send(call, watch=watch))

    def ack(self, job: Job, *, retention_ms: int | None = None,
            result: Payload | None = None) -> Verdict:
        """Complete ``job``'s lease. The row stays as a tombstone for ``retention_ms`` so a
        re-enqueue of the id is still a duplicate; with ``result`` (at most MAX_RESULT_BYTES,
        ArgumentError before sending otherwise) the tombstone keeps it, in the same step.
        StaleLease if the lease is not current."""
        return fenced(job, self._send(self.calls.ack(job, retention_ms, result)))

    def retry(self, job: Job, *, delay_ms: int = 1_000, error: Payload = "",
              max_attempts: int | None = None, now: int | None = None) -> Verdict:
        """Record ``error`` and run ``job`` again after ``delay_ms``: RETRYING, or DEAD when its
        attempts are used up. StaleLease if the lease is not current."""
        return fenced(job, self._send(self.calls.retry(job, delay_ms, error, max_attempts, now)))

    def extend(self, job: Job, *, lease_ms: int = DEFAULT_LEASE_MS,
               now: int | None = None) -> Verdict:
        """Push ``job``'s lease deadline to now + ``lease_ms``. StaleLease if not current."""
        return fenced(job, self._send(self.calls.extend(job, lease_ms, now)))

    # batches --------------------------------------------------------------------------------

    def settle(self, outcomes: Iterable[Outcome], *, claim: int = 0,
               lease_ms: int = DEFAULT_LEASE_MS, retention_ms: int | None = None,
               now: int | None = None,
               claim_id: str | None = None) -> tuple[list[Verdict], list[Job]]:
        """A worker's round in one round trip: settle each outcome (``Ack(job)``,
        ``Retry(job, delay_ms, error, max_attempts)`` or ``Release(job)``) in order, then lease
        up to ``claim`` jobs for ``lease_ms``, atomically. Returns a verdict per outcome — STALE
        for a lease that is not current (not raised, so the others stand) — and the jobs leased,
        oldest first. Every outcome is checked before anything is sent. ``claim_id``: the
        leases are recorded under it, as for ``claim``: sent again, the call answers them."""
        call = self.calls.settle(outcomes, claim, lease_ms, retention_ms, now, claim_id=claim_id)
        return settled(self._send(call))

    def settle_leased(self, outcomes: Iterable[Outcome], claim: int, lease_ms: int,
                      retention_ms: int | None, now: int | None, *,
                      watch: bool = False,
                      claim_id: str | None = None) -> tuple[list[Verdict], list[Job]]:
        """``settle`` for a consumer's own round: the outcomes' jobs came from this queue's
        claims, so their ids and fences are not checked again. ``watch``: the queue's watch
        tokens go out in the same flush, after the call (``echomq.queue.parking``)."""
        call = self.calls.settle(outcomes, claim, lease_ms, retention_ms, now, leased=True,
                                 claim_id=claim_id)
        return settled(self._send(call, watch=watch))

    def claim_many(self, count: int, lease_ms: int = DEFAULT_LEASE_MS, *,
                   now: int | None = None, claim_id: str | None = None) -> list[Job]:
        """Lease up to ``count`` (>= 1) pending jobs, oldest first, in one round trip
        (``claim_id``: as for ``claim``)."""
        return settled(self._send(self.calls.claim_many(count, lease_ms, now, claim_id)))[1]

    def extend_many(self, jobs: Iterable[Job], *, lease_ms: int = DEFAULT_LEASE_MS,
                    now: int | None = None) -> list[Verdict]:
        """Push each job's lease deadline to now + ``lease_ms`` in one round trip: EXTENDED or
        STALE per job, in order (not raised)."""
        return [Verdict.of(reply) for reply in self._send(self.calls.extend_many(jobs, lease_ms,
                                                                                  now))]

    # housekeeping ---------------------------------------------------------------------------

    def recover(self, *, now: int | None = None, limit: int = DEFAULT_BATCH_LIMIT,
                max_attempts: int | None = None) -> int:
        """Return expired leases (at most ``limit``) to where they came from; a job whose
        attempts are used up (``max_attempts``, None: the queue's) goes dead instead, its worker
        lost at its last attempt. How many leases were taken, back to run or dead."""
        return int(self._send(self.calls.recover(now, limit, max_attempts)))

    def promote(self, *, now: int | None = None, limit: int = DEFAULT_BATCH_LIMIT) -> int:
        """Move delayed jobs that are due (at most ``limit``) back to run; how many moved."""
        return int(self._send(self.calls.promote(now, limit)))

    # parking --------------------------------------------------------------------------------

    def next_due(self) -> int | None:
        """The earliest time (ms) at which a delayed job falls due, a lease expires or a lane's
        rate window opens, if any."""
        with self.conn.pipeline(transaction=False) as pipe:
            pipe.zrange(self.key("delayed"), 0, 0, withscores=True)
            pipe.zrange(self.key("active"), 0, 0, withscores=True)
            pipe.zrange(self.key("throttled"), 0, 0, withscores=True)
            return earliest(pipe.execute())

    def park(self, timeout_s: float) -> bool:
        """Block on the wake key for at most ``timeout_s`` (> 0); True when a token woke us."""
        return self.conn.blpop([self.key("wake")], timeout=timeout_s) is not None

    # outcomes -------------------------------------------------------------------------------

    def outcome(self, job_id: str) -> JobOutcome:
        """Where ``job_id`` stands now, in one round trip: its state, the result its ack kept,
        its last error and its attempts (``state`` "unknown" when it has no row)."""
        with self.conn.pipeline(transaction=False) as pipe:
            for command in self.calls.outcome_reads(job_id):
                pipe.execute_command(*command)
            return outcome_of(pipe.execute(raise_on_error=False))

    def wait(self, job_id: str, timeout_s: float) -> JobOutcome:
        """Block until ``job_id`` is done or dead, or ``timeout_s`` passes (``math.inf``: as long
        as it takes); its outcome then.

        Never a polling loop: the transitions that end a job — an ack keeping a result, a retry
        or a recover sending it dead — leave a token in its ended key, and this blocks on that
        key (BLMOVE onto itself, so every waiter wakes). An ack without a result leaves none:
        such a job is seen done when the timeout passes. Each blocking call ends before the
        connection's socket timeout (``echomq.queue.waiting``), so any ``timeout_s`` works on any
        client."""
        deadline = time.monotonic() + timeout_s
        slice_s = wait_slice_s(self.conn)
        ended = self.key("ended", job_id)
        while True:
            outcome = self.outcome(job_id)
            block_s = next_block_s(deadline, slice_s)
            if outcome.ended or block_s is None:
                return outcome
            if self.conn.blmove(ended, ended, block_s, "LEFT", "RIGHT") is None:
                continue  # the slice ran out: the loop reads the outcome again
            outcome = self.outcome(job_id)
            if outcome.ended:
                return outcome
            # A token of an earlier life of the id (its row deleted behind the queue's back):
            # it tells this one nothing, so it goes, and the wait goes on.
            self.conn.delete(ended)

    # inspection -----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """How many jobs are pending, active, delayed and dead, and how many wait in lanes."""
        with self.conn.pipeline(transaction=False) as pipe:
            for role in ZSETS:
                pipe.zcard(self.key(role))
            pipe.lrange(self.key("ring"), 0, -1)
            pipe.hkeys(self.key("parked"))
            *sizes, groups, parked = pipe.execute()
        counts = dict(zip(ZSETS, map(int, sizes), strict=True))
        counts["lanes"] = sum(self.lane_depths(groups, parked).values())
        return counts

    def lane_depths(self, groups: Iterable[Any] | None = None,
                    parked: Iterable[Any] | None = None) -> dict[str, int]:
        """How many jobs wait in each non-empty lane: the ring's groups in serving order, then
        the parked ones (at a limit, over their rate, or paused)."""
        if groups is None or parked is None:
            groups = self.conn.lrange(self.key("ring"), 0, -1)
            parked = self.conn.hkeys(self.key("parked"))
        return lane_depths_of(self.conn, lambda group: self.key("lane", lane=group), groups,
                              parked)


def recover_due(queue: Any, *, now: int | None = None,
                max_attempts: int | None = None) -> tuple[int, int]:
    """Recover ``queue``'s expired leases, then promote its due jobs, each in steps of at most
    HOUSEKEEPING_STEP (every call short) until a step leaves none due: (recovered, promoted)."""
    recovered = promoted = 0
    while True:
        step = queue.recover(now=now, limit=HOUSEKEEPING_STEP, max_attempts=max_attempts)
        recovered += step
        if not more_due(step):
            break
    while True:
        step = queue.promote(now=now, limit=HOUSEKEEPING_STEP)
        promoted += step
        if not more_due(step):
            break
    return recovered, promoted
