"""cancel: a job waiting to run becomes a cancelled tombstone, a leased one is flagged and its
holder woken by a notice on <base>cancels (the tombstone, which the settlements of a flagged
lease share, is ``State.bury_cancelled``)."""

from __future__ import annotations

from echomq.conformance.model.call import Call
from echomq.conformance.model.join import Join, Joins, Waiter
from echomq.conformance.model.replies import E_TYPE, error, status
from echomq.conformance.model.state import Value
from echomq.conformance.model.words import dec, int_field

# How many entries <base>cancels keeps (include/cancelled.lua, native/cancel.c).
CANCELS_MAXLEN = 1000


class Cancels(Joins):
    """cancel applied to the keyspace."""

    def mark_cancel(self, row: bytes, retention_ms: int, now: int) -> None:
        """The cancel mark: the retention its tombstone gets, and when it was asked."""
        fields = self.keys[row].data
        fields[b"cancel"] = dec(retention_ms)
        fields[b"cancelled"] = dec(now)

    def flag(self, call: Call) -> bytes:
        """A leased job: flagged, when it is not yet, and its holder left a notice (the notices'
        stream checked first); CANCELLING."""
        row, job_id = call.keys[0], call.args[0]
        if self.hget(row, b"cancel") is None:
            notices = call.base + b"cancels"
            if self.kind(notices) not in (b"none", b"stream"):
                return error(E_TYPE)
            self.mark_cancel(row, call.numbers["retention_ms"], call.numbers["now"])
            self.notify_holder(notices, job_id, row)
        return status("CANCELLING")

    def notify_holder(self, notices: bytes, job_id: bytes, row: bytes) -> None:
        """The notice that wakes a flagged lease's holder: ``job <id> fence <fence>`` on
        <base>cancels, which keeps its last CANCELS_MAXLEN entries."""
        entries = self.keys.setdefault(notices, Value(b"stream", [])).data
        entries.append((b"job", job_id, b"fence", dec(int_field(self.field(row, b"f"), 0))))
        del entries[:-CANCELS_MAXLEN]

    def _cancel(self, call: Call) -> bytes:
        row, _pending, _delayed, active, dead, _ring = call.keys
        job_id = call.args[0]
        group = self.hget(row, b"lane") if self.kind(row) == b"hash" else None
        lane = None if group is None else call.base + b"lane:" + group
        if group is not None and not self.cancel_lane_keys_ok(call.base, group):
            return error(E_TYPE)
        if self.kind(row) != b"hash":
            return status("UNKNOWN")
        if self.in_zset(dead, job_id):
            return status("DEAD")
        if self.field(row, b"p") is None:
            return status("DONE" if self.hget(row, b"cancelled") is None else "CANCELLED")
        if self.in_zset(active, job_id):
            return self.flag(call)
        j = Join(call.base, call.numbers["now"])
        span = self.cancel_hook(call, j)
        if span is None:
            return error(E_TYPE)
        verdict = self.cancel_waiting(call, lane)
        self.apply_steps(j, span)
        return status(verdict)

    def cancel_hook(self, call: Call, j: Join) -> tuple[int, int] | None:
        """A job cancelled at once: <base>waiting checked when it waits (its row counts waits),
        then its end hook planned (cancelled, with this cancel's mark); None: WRONGTYPE."""
        row = call.keys[0]
        if self.hget(row, b"waits") is not None \
                and self.kind(call.base + b"waiting") not in (b"none", b"zset"):
            return None
        j.state[call.args[0]] = Waiter(row)  # it ends here: a cycle back to it finds it so
        return self.plan_end(j, call.args[0], row, "cancelled",
                             mark=(call.numbers["retention_ms"], call.numbers["now"]))

    def cancel_waiting(self, call: Call, lane: bytes | None) -> str:
        """A job waiting to run leaves its set (pending, delayed, its lane) and is buried."""
        row, pending, delayed = call.keys[:3]
        job_id, retention_ms = call.args[0], call.numbers["retention_ms"]
        waits = self.hget(row, b"waits") is not None
        self.zrem(pending, job_id)
        self.zrem(delayed, job_id)
        if waits:
            self.zrem(call.base + b"waiting", job_id)
            self.keys[row].data.pop(b"waits", None)
            self.keys[row].data.pop(b"hold", None)
        if lane is not None:
            self.lane_cancelled(call, lane, job_id)
        attempt = self.attempts_of(row)
        if retention_ms > 0:
            self.mark_cancel(row, retention_ms, call.numbers["now"])
        verdict = self.bury_cancelled(row, job_id, retention_ms)
        self.emit("cancelled", job_id, attempt)
        return verdict

    def cancel_lane_keys_ok(self, base: bytes, group: bytes) -> bool:
        """A lane job's derived keys: its lane and prio zset, then <base>parked and
        <base>ringleft (hashes), each absent or of its type."""
        return self.lane_keys_ok(base, group) and all(
            self.kind(base + suffix) in (b"none", b"hash") for suffix in (b"parked", b"ringleft"))

    def lane_cancelled(self, call: Call, lane: bytes, job_id: bytes) -> None:
        """A lane job leaves its lane; a lane left empty leaves the ring, its entry left where it
        stands and counted in <base>ringleft (the ring not walked), unless its group is parked
        (out of the ring already): its group joins the ring once when the lane fills again."""
        if lane in self.keys:
            self.keys[lane].data[:] = [member for member in self.keys[lane].data
                                       if member != job_id]
            self._drop_empty(lane)
        base, group = call.base, lane[len(call.base) + 5:]
        self.zrem(base + b"prio:" + group, job_id)
        if self.lane_empty(base, group) and self.hget(base + b"parked", group) is None:
            left = base + b"ringleft"
            self.hset(left, group, dec(int_field(self.hget(left, group), 0) + 1))

    def in_zset(self, key: bytes, member: bytes) -> bool:
        return self.kind(key) == b"zset" and member in self.keys[key].data
