"""The single verbs: enqueue, enqueue_delayed, claim, ack, ack_result, retry, extend,
progress."""

from __future__ import annotations

from echomq.conformance.model.call import Call, Item
from echomq.conformance.model.expiry import Expiry
from echomq.conformance.model.join import Join
from echomq.conformance.model.lane_slots import release_lane_slot
from echomq.conformance.model.limits import limited_take, note_queue_limits, queue_limits
from echomq.conformance.model.records import Records
from echomq.conformance.model.replies import E_TYPE, bulk, error, integer, null, status
from echomq.conformance.model.state import Value
from echomq.conformance.model.words import dec, int_field, pending_score


def priority_of(call: Call) -> int:
    """The call's priority argument: 0 when it is left off."""
    return call.numbers.get("priority", 0)


class FlatTransitions(Records, Expiry):
    """The single verbs applied to the keyspace."""

    def admit(self, call: Call, score: int, delayed: bool = False) -> bytes:
        """Admit the job once (invariant 2): its row (with its priority unless 0), and its id
        in the set of ``call``'s second key at ``score`` (pending at its priority's band, or
        delayed until it is due); an existing row is a duplicate that changes nothing."""
        row, waiting, wake_key = call.keys
        job_id, payload = call.args[0], call.args[1]
        if row in self.keys:
            return status("DUPLICATE")
        fields = {b"p": payload, b"t": dec(call.numbers["now"])}
        if priority_of(call):
            fields[b"priority"] = dec(priority_of(call))
        if call.numbers.get("expires_at", 0):
            fields[b"expires_at"] = dec(call.numbers["expires_at"])
        self.keys[row] = Value(b"hash", fields)
        self.zadd(waiting, score, job_id)
        self.wake(wake_key, 1)
        self.emit("enqueued", job_id, 0, due=score if delayed else None,
                  priority=priority_of(call))
        return status("ENQUEUED")

    def _enqueue(self, call: Call) -> bytes:
        return self.admit(call, pending_score(priority_of(call), call.numbers["now"]))

    def _enqueue_delayed(self, call: Call) -> bytes:
        numbers = call.numbers
        return self.admit(call, max(numbers["now"] + numbers["delay_ms"], numbers["at_ms"]),
                          delayed=True)

    def _claim(self, call: Call) -> bytes:
        pending, active, counter = call.keys
        if call.recorded is not None:
            return next(iter(self.held(call, active)), null(self.protocol))
        if call.base + b"paused" in self.keys:
            return null(self.protocol)  # the queue paused: nothing leased, nothing written
        limits = queue_limits(self, call.base, call.numbers["now"])
        if limits is None:
            return error(E_TYPE)
        now = call.numbers["now"]
        walk = self.plan_claims(call.base, pending, 1, now)
        j = Join(call.base, now)
        span = self.plan_walk_end(j, walk, call.base + b"wake")
        if isinstance(span, bytes):
            return span
        for ghost in walk.ghosts:
            self.zrem(pending, ghost)  # a ghost: dropped, never returned
        self.apply_walk_end(j, walk, span, call.base + b"wake")
        if not walk.claims or limited_take(self, limits, active, 1) == 0:
            note_queue_limits(self, call.base, limits, active, pending, 0)
            return null(self.protocol)
        member = walk.claims[0]
        row = call.base + b"job:" + member
        self.zrem(pending, member)
        attempt, fence = self.lease(call, row, member, active, counter)
        self.emit("claimed", member, attempt, fence=fence)
        self.write_record(call, [(member, fence)])
        note_queue_limits(self, call.base, limits, active, pending, 1)
        payload = self.hget(row, b"p") or b""
        return b"*4\r\n" + bulk(member) + bulk(payload) + integer(attempt) + integer(fence)

    def lease(self, call: Call, row: bytes, member: bytes, active: bytes,
              counter: bytes) -> tuple[int, int]:
        """Counts the attempt and takes the queue's next fence (SET: any TTL goes); a row of
        the earlier layout is upgraded first."""
        fields = self.keys.setdefault(row, Value(b"hash", {})).data
        if b"payload" in fields:
            upgrade_row(fields)
        attempt = int_field(self.hget(row, b"a"), 0) + 1
        fence = call.numbers["last_fence"] + 1
        self.keys[counter] = Value(b"string", dec(fence))
        fields[b"a"] = dec(attempt)
        fields[b"f"] = dec(fence)
        self.zadd(active, call.numbers["now"] + call.numbers["lease_ms"], member)
        return attempt, fence

    def finish_cancelled(self, active: bytes, row: bytes, job_id: bytes, fence: int) -> str:
        """A flagged lease's settlement, whatever it is: the attempt ends as cancelled, buried
        with the retention its flag carries."""
        attempt = self.attempts_of(row)
        self.zrem(active, job_id)
        release_lane_slot(self, active[:-len(b"active")], row)
        verdict = self.bury_cancelled(row, job_id, int_field(self.hget(row, b"cancel"), 0))
        self.emit("cancelled", job_id, attempt, fence=fence)
        return verdict

    def _ack(self, call: Call) -> bytes:
        active, row = call.keys
        if self.flagged(row) and not self.list_or_none(call.base + b"ended:" + call.args[0]):
            return error(E_TYPE)
        if not self.is_current(active, row, call.args[0], call.numbers["fence"]):
            return status(self.replayed(row, call.numbers["fence"]))
        if not self.lane_bookkeeping_ok(call.base, row):
            return error(E_TYPE)
        j, span = self.ack_hook(call, row)
        if j.failed:
            return j.refusal()
        if self.flagged(row):
            verdict = self.finish_cancelled(active, row, call.args[0], call.numbers["fence"])
        else:
            verdict = self.finish_ack(active, row, call.args[0], call.numbers["retention_ms"],
                                      fence=call.numbers["fence"])
        self.apply_steps(j, span)
        return status(verdict)

    def ack_hook(self, call: Call, row: bytes) -> tuple[Join, tuple[int, int] | None]:
        """The end hook of an ack's current lease: done, or cancelled when flagged (no now)."""
        j = Join(call.base, None)
        if self.flagged(row):
            return j, self.plan_end(j, call.args[0], row, "cancelled", mark=self.mark_of(row))
        return j, self.plan_end(j, call.args[0], row, "done")

    def _ack_result(self, call: Call) -> bytes:
        active, row = call.keys
        if not self.is_current(active, row, call.args[0], call.numbers["fence"]):
            return status(self.replayed(row, call.numbers["fence"]))
        if not self.lane_bookkeeping_ok(call.base, row):
            return error(E_TYPE)
        j, span = self.ack_hook(call, row)
        if j.failed:
            return j.refusal()
        if self.flagged(row):
            verdict = self.finish_cancelled(active, row, call.args[0], call.numbers["fence"])
        else:
            verdict = self.finish_ack(active, row, call.args[0], call.numbers["retention_ms"],
                                      call.args[3], call.numbers["fence"])
        self.apply_steps(j, span)
        return status(verdict)

    def finish_ack(self, active: bytes, row: bytes, job_id: bytes, retention_ms: int,
                   result: bytes | None = None, fence: int = 0) -> str:
        attempt = self.attempts_of(row)
        self.zrem(active, job_id)
        release_lane_slot(self, active[:-len(b"active")], row)
        if retention_ms == 0:
            del self.keys[row]
        else:
            value = self.keys[row]
            if result is not None:
                value.data[b"result"] = result
            self.drop_payload(row)
            value.expires = True
            self._drop_empty(row)
            if result is not None:
                self.mark_ended(row, job_id, retention_ms)
        self.emit("done", job_id, attempt, fence=fence)
        return "ACKED"

    def _retry(self, call: Call) -> bytes:
        active, row = call.keys[0], call.keys[3]
        job_id, number = call.args[0], call.numbers
        if not self.is_current(active, row, job_id, number["fence"]):
            return status(self.replayed(row, number["fence"], call.args[4], call.keys[2], job_id))
        if not self.lane_bookkeeping_ok(call.base, row):
            return error(E_TYPE)
        j, span = Join(call.base, number["now"]), None
        if self.flagged(row):
            span = self.plan_end(j, job_id, row, "cancelled", mark=self.mark_of(row))
        elif int_field(self.field(row, b"a"), 0) >= number["max_attempts"]:
            span = self.plan_end(j, job_id, row, "dead", call.args[4])
        if j.failed:
            return j.refusal()
        if self.flagged(row):
            verdict = self.finish_cancelled(active, row, job_id, number["fence"])
        else:
            item = Item(b"retry", job_id, number["fence"], number["delay_ms"],
                        number["max_attempts"], call.args[4])
            verdict = self.finish_retry(call.keys, row, item, number["now"])
        self.apply_steps(j, span)
        return status(verdict)

    def finish_retry(self, keys: list[bytes], row: bytes, item: Item, now: int) -> str:
        """retry's effects; ``keys`` starts with active, delayed, dead."""
        active, delayed, dead = keys[:3]
        self.zrem(active, item.id)
        release_lane_slot(self, active[:-len(b"active")], row)
        self.keys[row].data[b"error"] = item.error
        attempts = int_field(self.field(row, b"a"), 0)
        if attempts >= item.max_attempts:
            self.zadd(dead, now, item.id)
            self.mark_ended(row, item.id, None)
            self.emit("dead", item.id, attempts, fence=item.fence)
            return "DEAD"
        self.zadd(delayed, now + item.delay_ms, item.id)
        self.emit("retried", item.id, attempts, fence=item.fence, due=now + item.delay_ms)
        return "RETRYING"

    def _extend(self, call: Call) -> bytes:
        active, row = call.keys
        job_id, number = call.args[0], call.numbers
        if not self.is_current(active, row, job_id, number["fence"]):
            return status("STALE")
        self.zadd(active, number["now"] + number["lease_ms"], job_id)
        return status(self.extended(row))

    def extended(self, row: bytes) -> str:
        """An extend of a current lease: CANCELLING when a cancel flagged it, else EXTENDED."""
        return "EXTENDED" if self.hget(row, b"cancel") is None else "CANCELLING"

    def _progress(self, call: Call) -> bytes:
        active, row = call.keys
        if not self.is_current(active, row, call.args[0], call.numbers["fence"]):
            return status("STALE")
        self.keys[row].data[b"progress"] = call.args[2]
        self.emit("progress", call.args[0], self.attempts_of(row), fence=call.numbers["fence"])
        return status("RECORDED")


def upgrade_row(fields: dict[bytes, bytes]) -> None:
    """A row holding the earlier layout's names, as a lease rewrites it: ``p`` and ``t`` from
    ``payload`` and ``enqueued_at`` unless set, ``a`` from ``attempts`` unless set (the lease
    writes it next), and the four old names gone."""
    old = {name: fields.pop(name, None) for name in (b"payload", b"attempts", b"enqueued_at",
                                                     b"fence")}
    for short, full in ((b"p", b"payload"), (b"t", b"enqueued_at"), (b"a", b"attempts")):
        value = old[full]
        if value is not None and short not in fields:
            fields[short] = value
