"""``Queue``: the producer's and the worker's view of one echomq queue."""

from __future__ import annotations

import enum
import logging
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from echomq import transitions as t
from echomq.errors import EvictionPolicyWarning, StaleLease
from echomq.executors import Arg, executor_for
from echomq.native import checked_id, checked_int, checked_lane, checked_now

DEFAULT_LEASE_MS = 30_000
DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_BATCH_LIMIT = 1000

log = logging.getLogger("echomq")


class Verdict(enum.Enum):
    """What a transition did, as the server words it."""

    ENQUEUED = "ENQUEUED"
    DUPLICATE = "DUPLICATE"
    ACKED = "ACKED"
    STALE = "STALE"
    RETRYING = "RETRYING"
    DEAD = "DEAD"
    EXTENDED = "EXTENDED"

    @classmethod
    def of(cls, reply: Any) -> Verdict:
        return cls(reply.decode() if isinstance(reply, bytes) else str(reply))


@dataclass(frozen=True)
class Job:
    """A leased job: run it, then ack, retry or extend it by this (id, attempt) lease."""

    id: str
    payload: bytes
    attempt: int
    lane: str | None = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _payload(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def warn_if_evicting(conn: Any) -> str | None:
    """Warns (EvictionPolicyWarning, and the ``echomq`` log) when the server's maxmemory-policy
    may evict keys: a queue's jobs would then vanish under memory pressure. Returns the policy,
    or None when the server does not say (CONFIG denied by ACL, or renamed)."""
    try:
        reply = conn.config_get("maxmemory-policy")
    except RedisError:
        return None
    policies = reply.values() if isinstance(reply, dict) else []
    for policy in {_text(value) for value in policies}:
        if policy != "noeviction":
            message = (f"maxmemory-policy is {policy!r}: the server may evict queue keys and "
                       "lose jobs; echomq needs 'noeviction'")
            log.warning(message)
            warnings.warn(message, EvictionPolicyWarning, stacklevel=3)
            return policy
    return "noeviction" if policies else None


class Queue:
    """One queue on a Valkey server, run by scripts (``wire=5``) or the trafikey module (``6``).

    ``conn`` is a ``redis.Redis`` or ``redis.cluster.RedisCluster``. Every time-dependent call
    takes ``now`` (ms); None lets the server's clock decide.
    """

    def __init__(self, conn: Any, name: str, *, wire: int = 5,
                 retention_ms: int = DEFAULT_RETENTION_MS,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, check_policy: bool = True) -> None:
        self.conn = conn
        self.name = name
        self.base = t.queue_base(name)
        self.executor = executor_for(wire)
        self.retention_ms = retention_ms
        self.max_attempts = max_attempts
        if check_policy:
            warn_if_evicting(conn)

    @property
    def wire(self) -> int:
        return self.executor.wire

    def key(self, role: str, job_id: str | None = None, lane: str | None = None) -> str:
        """The key of ``role`` (pending, active, delayed, dead, wake, ring; ``job`` with a job
        id; ``lane`` with a group) of this queue."""
        return t.key_of(self.base, role, job_id, lane)

    def _run(self, transition: t.Transition, job_id: str | None, args: Sequence[Arg],
             lane: str | None = None) -> Any:
        keys = t.keys_for(self.base, transition, job_id, lane)
        return self.executor.call(self.conn, transition, keys, args)

    # producer -------------------------------------------------------------------------------

    def enqueue(self, job_id: str, payload: bytes | str, *, lane: str | None = None,
                now: int | None = None) -> Verdict:
        """Admit a job once: ENQUEUED, or DUPLICATE when its row exists. KindError on a bad id.

        With ``lane``, the job joins its group's lane and is served by ``claim_lane`` in turn
        with the other groups (scripts only: a ``wire=6`` queue raises Wire6Unsupported)."""
        transition, keys, args = self._admission(job_id, payload, lane, checked_now(now))
        return Verdict.of(self.executor.call(self.conn, transition, keys, args))

    def _admission(self, job_id: str, payload: bytes | str, lane: str | None,
                   stamp: str) -> tuple[t.Transition, list[str], tuple[Arg, ...]]:
        checked_id(job_id)
        if lane is None:
            return t.ENQUEUE, t.keys_for(self.base, t.ENQUEUE, job_id), (
                job_id, _payload(payload), stamp)
        keys = t.keys_for(self.base, t.LANE_ENQUEUE, job_id, checked_lane(lane))
        return t.LANE_ENQUEUE, keys, (job_id, _payload(payload), lane, stamp)

    def enqueue_many(self, items: Iterable[tuple[str, bytes | str] | tuple[str, bytes | str,
                                                                          str | None]], *,
                     now: int | None = None) -> list[Verdict]:
        """Admit many jobs in one wire flush; a verdict per item, in order. Items are
        ``(id, payload)`` or ``(id, payload, lane)``; every one is checked before anything is
        sent."""
        stamp = checked_now(now)
        calls = [self._admission(item[0], item[1], item[2] if len(item) > 2 else None, stamp)
                 for item in items]
        replies = self.executor.call_many(self.conn, [(tr, keys, args) for tr, keys, args in calls])
        return [Verdict.of(reply) for reply in replies]

    # worker ---------------------------------------------------------------------------------

    def claim(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None) -> Job | None:
        """Lease the oldest pending job for ``lease_ms``, or None when there is none."""
        args = (checked_int("lease_ms", lease_ms, 1), checked_now(now))
        reply = self._run(t.CLAIM, None, args)
        if reply is None:
            return None
        job_id, payload, attempt = reply
        return Job(_text(job_id), _payload(payload), int(attempt))

    def claim_lane(self, lease_ms: int = DEFAULT_LEASE_MS, *,
                   now: int | None = None) -> Job | None:
        """Lease the head job of the next lane in turn (the ring rotates one step per claim),
        or None when every lane is empty. Scripts only (``wire=6`` raises Wire6Unsupported)."""
        args = (checked_int("lease_ms", lease_ms, 1), checked_now(now))
        reply = self._run(t.LANE_CLAIM, None, args)
        if reply is None:
            return None
        job_id, payload, attempt, group = reply
        return Job(_text(job_id), _payload(payload), int(attempt), _text(group))

    def ack(self, job: Job, *, retention_ms: int | None = None) -> Verdict:
        """Complete ``job``'s lease. The row stays as a tombstone for ``retention_ms`` so a
        re-enqueue of the id is still a duplicate. StaleLease if the lease is not current."""
        keep = self.retention_ms if retention_ms is None else retention_ms
        args = (checked_id(job.id), checked_int("attempt", job.attempt, 1),
                checked_int("retention_ms", keep, 0))
        return self._fenced(job, self._run(t.ACK, job.id, args))

    def retry(self, job: Job, *, delay_ms: int = 1_000, error: str | bytes = "",
              max_attempts: int | None = None, now: int | None = None) -> Verdict:
        """Record ``error`` and run ``job`` again after ``delay_ms``: RETRYING, or DEAD when its
        attempts are used up. StaleLease if the lease is not current."""
        limit = self.max_attempts if max_attempts is None else max_attempts
        args = (checked_id(job.id), checked_int("attempt", job.attempt, 1),
                checked_int("delay_ms", delay_ms, 0), checked_int("max_attempts", limit, 1),
                _payload(error), checked_now(now))
        return self._fenced(job, self._run(t.RETRY, job.id, args))

    def extend(self, job: Job, *, lease_ms: int = DEFAULT_LEASE_MS,
               now: int | None = None) -> Verdict:
        """Push ``job``'s lease deadline to now + ``lease_ms``. StaleLease if not current."""
        args = (checked_id(job.id), checked_int("attempt", job.attempt, 1),
                checked_int("lease_ms", lease_ms, 1), checked_now(now))
        return self._fenced(job, self._run(t.EXTEND, job.id, args))

    @staticmethod
    def _fenced(job: Job, reply: Any) -> Verdict:
        verdict = Verdict.of(reply)
        if verdict is Verdict.STALE:
            raise StaleLease(job.id, job.attempt)
        return verdict

    # housekeeping ---------------------------------------------------------------------------

    def recover(self, *, now: int | None = None, limit: int = DEFAULT_BATCH_LIMIT) -> int:
        """Return expired leases (at most ``limit``) to where they came from; how many moved."""
        args = (checked_now(now), checked_int("limit", limit, 1))
        return int(self._run(t.RECOVER, None, args))

    def promote(self, *, now: int | None = None, limit: int = DEFAULT_BATCH_LIMIT) -> int:
        """Move delayed jobs that are due (at most ``limit``) back to run; how many moved."""
        args = (checked_now(now), checked_int("limit", limit, 1))
        return int(self._run(t.PROMOTE, None, args))

    # parking --------------------------------------------------------------------------------

    def next_due(self) -> int | None:
        """The earliest time (ms) at which a delayed job falls due or a lease expires, if any."""
        with self.conn.pipeline(transaction=False) as pipe:
            pipe.zrange(self.key("delayed"), 0, 0, withscores=True)
            pipe.zrange(self.key("active"), 0, 0, withscores=True)
            heads = pipe.execute()
        times = [int(head[0][1]) for head in heads if head]
        return min(times) if times else None

    def park(self, timeout_s: float) -> bool:
        """Block on the wake key for at most ``timeout_s`` (> 0); True when a token woke us."""
        return self.conn.blpop([self.key("wake")], timeout=timeout_s) is not None

    # inspection -----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """How many jobs are pending, active, delayed and dead, and how many wait in lanes."""
        with self.conn.pipeline(transaction=False) as pipe:
            for role in ("pending", "active", "delayed", "dead"):
                pipe.zcard(self.key(role))
            pipe.lrange(self.key("ring"), 0, -1)
            *sizes, groups = pipe.execute()
        counts = dict(zip(("pending", "active", "delayed", "dead"), map(int, sizes), strict=True))
        counts["lanes"] = sum(self.lane_depths(groups).values())
        return counts

    def lane_depths(self, groups: Iterable[Any] | None = None) -> dict[str, int]:
        """How many jobs wait in each non-empty lane (the ring's groups, in serving order)."""
        names = [_text(g) for g in (groups if groups is not None
                                    else self.conn.lrange(self.key("ring"), 0, -1))]
        with self.conn.pipeline(transaction=False) as pipe:
            for group in names:
                pipe.llen(self.key("lane", lane=group))
            depths = pipe.execute()
        return dict(zip(names, map(int, depths), strict=True))
