"""Expiry: the claim walk of pending (claim, settle's claim part) and the jobs on it whose
deadline the call's now meets, ended dead as ``expired`` with their end hook (docs/PROTOCOL.md,
"Expiry"), written independently of include/claims.lua and its C twin."""

from __future__ import annotations

from dataclasses import dataclass, field

from echomq.conformance.model.join import Join, Joins, Step
from echomq.conformance.model.replies import E_TYPE, error
from echomq.conformance.model.words import dec, int_field
from echomq.engine.transitions import EXPIRED_ERROR, EXPIRED_MAX

EXPIRED = EXPIRED_ERROR.encode()


@dataclass
class Walk:
    """What a claim's walk of pending met: live ids to lease, ghosts to drop, ids to end."""

    claims: list[bytes] = field(default_factory=list)
    ghosts: list[bytes] = field(default_factory=list)
    expired: list[bytes] = field(default_factory=list)


class Expiry(Joins):
    """The claim walk, and an expired job's end."""

    def expired_by(self, row: bytes, now: int) -> bool:
        deadline = int_field(self.hget(row, b"expires_at"), 0)
        return 0 < deadline <= now

    def plan_claims(self, base: bytes, pending: bytes, count: int, now: int) -> Walk:
        """From pending's lowest entry: up to ``count`` live ids, the ghosts met on the way and
        the ids whose deadline ``now`` meets (the walk stops at ``EXPIRED_MAX`` of them)."""
        walk = Walk()
        for member, _score in self.zitems(pending):
            if len(walk.claims) >= count or len(walk.expired) >= EXPIRED_MAX:
                break
            row = base + b"job:" + member
            if self.kind(row) != b"hash":
                walk.ghosts.append(member)
            elif self.expired_by(row, now):
                walk.expired.append(member)
            else:
                walk.claims.append(member)
        return walk

    def plan_expired(self, j: Join, expired: list[bytes]) -> tuple[int, int] | None:
        """Each expired job's end, then its hook, planned in walk order: the range of their
        steps, or None when a check failed (j.failure is the reply)."""
        first = len(j.steps)
        for job_id in expired:
            for key, kind in ((j.base + b"dead", b"zset"), (j.base + b"ended:" + job_id, b"list"),
                              (j.base + b"counts", b"hash")):
                self.join_check(j, key, kind)
            if j.failed:
                return None
            row = j.base + b"job:" + job_id
            j.steps.append(Step("expire", job_id, row))
            if self.plan_end(j, job_id, row, "dead", EXPIRED) is None:
                return None
        return first, len(j.steps)

    def plan_walk_end(self, j: Join, walk: Walk, wake_key: bytes) -> tuple[int, int] | bytes:
        """The expired jobs' ends planned, and the wake key checked when the walk stopped at its
        bound: the range of their steps, or the refusal."""
        span = self.plan_expired(j, walk.expired)
        if span is None:
            return j.refusal()
        if len(walk.expired) >= EXPIRED_MAX and self.kind(wake_key) not in (b"none", b"list"):
            return error(E_TYPE)
        return span

    def apply_walk_end(self, j: Join, walk: Walk, span: tuple[int, int], wake_key: bytes) -> None:
        """The expired jobs ended, then a wake token when the walk stopped at its bound (a
        consumer claims again at once)."""
        self.apply_steps(j, span)
        if len(walk.expired) >= EXPIRED_MAX:
            self.wake(wake_key, 1)

    def _step_expire(self, j: Join, step: Step) -> None:
        attempt = self.attempts_of(step.row)
        assert j.now is not None, "a claim takes now"
        self.zrem(j.base + b"pending", step.id)
        self.keys[step.row].data[b"error"] = EXPIRED
        self.zadd(j.base + b"dead", j.now, step.id)
        counts = j.base + b"counts"
        self.hset(counts, b"expired", dec(int_field(self.hget(counts, b"expired"), 0) + 1))
        self.mark_ended(step.row, step.id, None)
        self.emit("dead", step.id, attempt)
