"""The unique enqueue: a job admitted once per dedupe key, in its mode — dedupe (held while its
holder's row exists, or while the key has a TTL), debounce (a holder still delayed is pushed back,
its payload replaced), throttle (one admission per window: the key set with a TTL)."""

from __future__ import annotations

from echomq.conformance.model.call import Call
from echomq.conformance.model.replies import status
from echomq.conformance.model.state import State, Value
from echomq.conformance.model.words import dec, id_ok, pending_score


class UniqueEnqueue(State):
    """enqueue_unique applied to the keyspace (validation, step 6 included, has run)."""

    def holder_of(self, call: Call) -> bytes | None:
        """The id the dedupe key names: its value when it is an id of the kind gate."""
        dedupe = call.keys[4]
        held = self.keys[dedupe].data if self.kind(dedupe) == b"string" else None
        return held if held is not None and id_ok(held) else None

    def _enqueue_unique(self, call: Call) -> bytes:
        _pending, delayed, row, _wake, dedupe = call.keys
        numbers, mode = call.numbers, call.args[3]
        now, period, delay = numbers["now"], numbers["period_ms"], numbers["delay_ms"]
        if row in self.keys:
            return status("DUPLICATE")
        taken = dedupe in self.keys
        holder = self.holder_of(call)
        holder_row = None if holder is None else call.base + b"job:" + holder
        later = now + delay if delay > 0 else None
        held_by = dedupe[len(call.base):]
        if mode == b"dedupe":
            if taken and ((holder_row is not None and holder_row in self.keys)
                          or self.keys[dedupe].expires):
                return status("DUPLICATE")
            extra = {b"dedupe": held_by}
            if period > 0:
                extra[b"dedupe_ms"] = dec(period)
            return self.admit_unique(call, later, extra, expires=None)
        if mode == b"debounce":
            due = now + period + delay
            if holder is not None and holder_row is not None and holder_row in self.keys \
                    and holder in self.zset(delayed):
                self.keys[holder_row].data[b"p"] = call.args[1]
                self.zadd(delayed, due, holder)
                self.emit("debounced", holder, self.attempts_of(holder_row), due=due)
                return status("DEBOUNCED")
            self._drop_empty(delayed)
            return self.admit_unique(call, due, {b"dedupe": held_by}, expires=None)
        if taken:
            return status("THROTTLED")
        return self.admit_unique(call, later, {}, expires=period > 0)

    def admit_unique(self, call: Call, due: int | None, extra: dict[bytes, bytes],
                     expires: bool | None) -> bytes:
        """The row (enqueue's fields, then ``extra``), into delayed at ``due`` or pending, then
        the dedupe key (``expires`` None: set for good; True: for the window; False: not set),
        one wake token and the enqueued entry."""
        pending, delayed, row, wake_key, dedupe = call.keys
        job_id, now = call.args[0], call.numbers["now"]
        priority = call.numbers.get("priority", 0)
        fields = {b"p": call.args[1], b"t": dec(now)}
        if priority:
            fields[b"priority"] = dec(priority)
        self.keys[row] = Value(b"hash", {**fields, **extra})
        if due is None:
            self.zadd(pending, pending_score(priority, now), job_id)
        else:
            self.zadd(delayed, due, job_id)
        if expires is not False:
            self.keys[dedupe] = Value(b"string", job_id, expires=bool(expires))
        self.wake(wake_key, 1)
        self.emit("enqueued", job_id, 0, due=due, priority=priority)
        return status("ENQUEUED")
