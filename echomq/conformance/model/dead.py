"""trim_dead: the oldest dead jobs beyond the queue's bounds (``<base>deadconf``) forgotten, each
row and ended key deleted as purge deletes them."""

from __future__ import annotations

from echomq.conformance.model.call import Call
from echomq.conformance.model.replies import E_TYPE, error, integer, number_error
from echomq.conformance.model.state import State
from echomq.conformance.model.words import int_arg
from echomq.engine.transitions import DEAD_BOUNDS


class DeadTrimming(State):
    """trim_dead applied to the keyspace."""

    def dead_bounds(self, deadconf: bytes) -> list[int] | bytes:
        """max_count and max_age_ms as they apply, or the EMQNUM error of the first bad one."""
        bounds: list[int] = []
        for name, default in DEAD_BOUNDS.items():
            value = self.hget(deadconf, name.encode())
            bound = default if value is None else int_arg(value, 0)
            if bound is None:
                return number_error(f"deadconf {name}", 0)
            bounds.append(bound)
        return bounds

    def _trim_dead(self, call: Call) -> bytes:
        dead, deadconf = call.keys
        bounds = self.dead_bounds(deadconf)
        if isinstance(bounds, bytes):
            return bounds
        max_count, max_age_ms = bounds
        now, limit = call.numbers["now"], call.numbers["limit"]
        entries = self.zitems(dead)
        over = len(entries) - max_count if max_count > 0 else 0
        taken: list[bytes] = []
        for n, (member, score) in enumerate(entries[:limit], start=1):
            if n > over and not (max_age_ms > 0 and score <= now - max_age_ms):
                break
            taken.append(member)
        if not all(self.list_or_none(call.base + b"ended:" + member) for member in taken):
            return error(E_TYPE)
        for member in taken:
            attempt = self.attempts_of(call.base + b"job:" + member)
            self.zrem(dead, member)
            self.keys.pop(call.base + b"job:" + member, None)
            self.keys.pop(call.base + b"ended:" + member, None)
            self.emit("purged", member, attempt)
        return integer(len(taken))
