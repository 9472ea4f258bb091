"""The batched verbs: settle (its items in order, then its claim part) and extend_many."""

from __future__ import annotations

from typing import Any

from echomq.conformance.model.call import Call, Item
from echomq.conformance.model.flat import FlatTransitions
from echomq.conformance.model.join import Join
from echomq.conformance.model.lane_slots import release_lane_slot
from echomq.conformance.model.limits import limited_take, note_queue_limits, queue_limits
from echomq.conformance.model.replies import E_FENCE, E_TYPE, array, bulk, error, integer, status
from echomq.conformance.model.words import INT_MAX, dec, int_field, pending_score, row_priority


class BatchTransitions(FlatTransitions):
    """The batched verbs, built on the single ones' effects."""

    def _settle(self, call: Call) -> bytes:
        active, pending = call.keys[0], call.keys[3]
        count = 0 if call.recorded is not None else call.numbers["count"]
        limits = queue_limits(self, call.base, call.numbers["now"]) if count > 0 else None
        if count > 0 and limits is None:
            return error(E_TYPE)
        j, current = Join(call.base, call.numbers["now"]), set[bytes]()
        spans = [self.item_hook(j, call, item, current) for item in call.items]
        if j.failed:
            return j.refusal()
        walk = self.plan_claims(call.base, pending, count, call.numbers["now"])
        expired = self.plan_walk_end(j, walk, call.keys[6])
        if isinstance(expired, bytes):
            return expired
        if call.numbers["last_fence"] + len(walk.claims) > INT_MAX:
            return error(E_FENCE)
        verdicts = []
        for item, span in zip(call.items, spans, strict=True):
            verdicts.append(status(self.settle_item(call, item)))
            self.apply_steps(j, span)
        if call.recorded is not None:
            return b"*2\r\n" + array(verdicts) + array(self.held(call, active))
        for ghost in walk.ghosts:
            self.zrem(pending, ghost)
        self.apply_walk_end(j, walk, expired, call.keys[6])
        return b"*2\r\n" + array(verdicts) + array(self._claim_part(call, limits, walk.claims))

    def _claim_part(self, call: Call, limits: Any, claims: list[bytes]) -> list[bytes]:
        """settle's claim part: the planned claims leased, as far as the queue's limits let."""
        active, pending, counter = call.keys[0], call.keys[3], call.keys[4]
        jobs, leases = [], []
        take = limited_take(self, limits, active, len(claims)) if limits is not None else 0
        for member in claims[:take]:
            row = call.base + b"job:" + member
            self.zrem(pending, member)
            attempt, fence = self.lease(call, row, member, active, counter)
            call.numbers["last_fence"] = fence
            self.emit("claimed", member, attempt, fence=fence)
            leases.append((member, fence))
            payload = self.hget(row, b"p") or b""
            jobs.append(b"*4\r\n" + bulk(member) + bulk(payload) + integer(attempt)
                        + integer(fence))
        self.write_record(call, leases)
        if limits is not None:
            note_queue_limits(self, call.base, limits, active, pending, take)
        return jobs

    def item_hook(self, j: Join, call: Call, item: Item,
                  current: set[bytes]) -> tuple[int, int] | None:
        """The end hook of an item that ends its job (a current lease, not settled earlier in
        the call): done (ack, done), dead (a retry using up its attempts), cancelled (flagged)."""
        row = call.base + b"job:" + item.id
        if j.failed or item.id in current or not self.is_current(call.keys[0], row, item.id,
                                                                  item.fence):
            return None
        current.add(item.id)
        if self.flagged(row):
            return self.plan_end(j, item.id, row, "cancelled", mark=self.mark_of(row))
        if item.op in (b"ack", b"done"):
            return self.plan_end(j, item.id, row, "done")
        if item.op == b"retry" and int_field(self.field(row, b"a"), 0) >= item.max_attempts:
            return self.plan_end(j, item.id, row, "dead", item.error)
        return None

    def settle_item(self, call: Call, item: Item) -> str:
        row = call.base + b"job:" + item.id
        if not self.is_current(call.keys[0], row, item.id, item.fence):
            if item.op == b"release":
                return "CANCELLED" if self.cancelled_at(row, item.fence) else "STALE"
            error = item.error if item.op == b"retry" else None
            return self.replayed(row, item.fence, error, call.keys[2], item.id)
        if self.flagged(row):
            return self.finish_cancelled(call.keys[0], row, item.id, item.fence)
        if item.op in (b"ack", b"done"):
            return self.finish_ack(call.keys[0], row, item.id, call.numbers["retention_ms"],
                                   item.result, item.fence)
        if item.op == b"release":
            return self.finish_release(call, row, item)
        return self.finish_retry(call.keys, row, item, call.numbers["now"])

    def finish_release(self, call: Call, row: bytes, item: Item) -> str:
        """Hand a lease back unrun: out of active, its attempt uncounted (never below 0), back
        where recover puts it, a wake token."""
        active, pending, ring, wake_key = call.keys[0], call.keys[3], call.keys[5], call.keys[6]
        job_id = item.id
        self.zrem(active, job_id)
        release_lane_slot(self, call.base, row)
        attempts = int_field(self.field(row, b"a"), 0)
        self.keys[row].data[b"a"] = dec(max(attempts - 1, 0))
        at = int_field(self.field(row, b"t"), call.numbers["now"])
        score = pending_score(row_priority(self.hget(row, b"priority")), at)
        move = self.lane_move(call.base, job_id, score, at)
        assert move is not None, "the release item's lane keys are checked first"
        self.put_back(call.base, ring, pending, move, head=True)
        self.wake(wake_key, 1)
        self.emit("released", job_id, max(attempts - 1, 0), fence=item.fence, lane=move.lane)
        return "RELEASED"

    def _extend_many(self, call: Call) -> bytes:
        active, deadline = call.keys[0], call.numbers["now"] + call.numbers["lease_ms"]
        verdicts = []
        for item in call.items:
            row = call.base + b"job:" + item.id
            current = self.is_current(active, row, item.id, item.fence)
            if current:
                self.zadd(active, deadline, item.id)
            verdicts.append(status(self.extended(row) if current else "STALE"))
        return array(verdicts)
