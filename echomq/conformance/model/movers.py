"""The verbs that move jobs back to be run: recover (expired leases; spent ones go dead),
promote (delayed jobs due) and requeue (a dead job), each to pending or to its lane."""

from __future__ import annotations

from echomq.conformance.model.call import Call, Move
from echomq.conformance.model.join import Join, Joins
from echomq.conformance.model.lane_slots import due_windows, release_lane_slot, reopen_windows
from echomq.conformance.model.replies import E_TYPE, error, integer, status
from echomq.conformance.model.state import REOPENING
from echomq.conformance.model.words import int_field, pending_score, row_priority

LOST = b"lease expired during attempt %d: the worker was lost"


class Movers(Joins):
    """recover, promote and requeue applied to the keyspace."""

    def _plan(self, base: bytes, due: list[tuple[bytes, int]], fallback: int | None,
              max_attempts: int | None = None) -> tuple[list[Move], list[bytes]] | bytes:
        moves: list[Move] = []
        ghosts: list[bytes] = []
        for member, score in due:
            row = base + b"job:" + member
            if self.kind(row) != b"hash":
                ghosts.append(member)
                continue
            move = self._move_of(base, member, score, fallback, max_attempts)
            if isinstance(move, bytes):
                return move
            moves.append(move)
        return moves, ghosts

    def _move_of(self, base: bytes, member: bytes, score: int, fallback: int | None,
                 max_attempts: int | None) -> Move | bytes:
        """A live job's move. recover: a lease a cancel flagged ends cancelled, a spent one
        dead (each with its ended key checked); else back to its lane, or to pending in its
        priority's band at its enqueued_at (recover), its due time (promote) or now (requeue)."""
        row = base + b"job:" + member
        ended_ok = self.list_or_none(base + b"ended:" + member)
        if max_attempts is not None and self.flagged(row):
            return Move(member, row, score, cancelled=True) if ended_ok else error(E_TYPE)
        attempts = int_field(self.field(row, b"a"), 0)
        if max_attempts is not None and attempts >= max_attempts:
            return Move(member, row, score, spent=attempts) if ended_ok else error(E_TYPE)
        at = int(max(score, 0)) if fallback is None \
            else int_field(self.field(row, b"t"), fallback)
        move = self.lane_move(base, member, score, at)
        if move is None:
            return error(E_TYPE)
        if move.lane is None:
            move.score = pending_score(row_priority(self.hget(row, b"priority")), at)
        return move

    def _move_back(self, call: Call, head: bool) -> bytes:
        zsource, wake_key = call.keys[0], call.keys[3]
        now, limit = call.numbers["now"], call.numbers["limit"]
        due = [item for item in self.zitems(zsource) if item[1] <= now][:limit]
        plan = self._plan(call.base, due, now if head else None, call.numbers.get("max_attempts"))
        if isinstance(plan, bytes):
            return plan
        # Every key is checked before anything is written, each refusal a WRONGTYPE: recover
        # checks the lane bookkeeping of each lane lease it takes, promote the keys of the groups
        # it reopens.
        if not self.movers_typed(call.base, head, due):
            return error(E_TYPE)
        windows = [] if head else due_windows(self, call.base, now, limit)
        if windows is None:
            return error(E_TYPE)
        moves, ghosts = plan
        j = Join(call.base, now)
        spans = self.recover_hooks(j, moves) if head else {}
        if j.failed:
            return j.refusal()
        for ghost in ghosts:
            self.zrem(zsource, ghost)
        back = 0
        for move in reversed(moves) if head else moves:
            back += self._apply_move(call, move, head, j, spans.get(move.member))
        self.wake(wake_key, back)
        if not head:  # promote: the windows opened by now
            reopen_windows(self, call.base, windows, wake_key)
        return integer(len(moves))

    def _apply_move(self, call: Call, move: Move, head: bool, j: Join,
                    span: tuple[int, int] | None) -> int:
        """One move of recover or promote: ended cancelled, dead, or back to be run (1)."""
        zsource, pending, ring = call.keys[:3]
        attempt = self.attempts_of(move.row)
        self.zrem(zsource, move.member)
        if head:  # recover: the lease leaves active
            release_lane_slot(self, call.base, move.row)
        if move.cancelled:
            self.bury_cancelled(move.row, move.member,
                                int_field(self.hget(move.row, b"cancel"), 0))
            self.emit("cancelled", move.member, attempt)
        elif move.spent:
            self.keys[move.row].data[b"error"] = LOST % move.spent
            self.zadd(call.keys[4], call.numbers["now"], move.member)
            self.mark_ended(move.row, move.member, None)
            self.emit("dead", move.member, move.spent)
        else:
            self.put_back(call.base, ring, pending, move, head)
            self.emit("recovered" if head else "promoted", move.member, attempt, lane=move.lane)
            return 1
        self.apply_steps(j, span)
        return 0

    def movers_typed(self, base: bytes, head: bool, due: list[tuple[bytes, int]]) -> bool:
        """recover: the lane bookkeeping of each lease it takes; promote: the reopening keys."""
        if head:
            return all(self.lane_bookkeeping_ok(base, base + b"job:" + member)
                       for member, _score in due)
        return self.typed(base, REOPENING)

    def recover_hooks(self, j: Join, moves: list[Move]) -> dict[bytes, tuple[int, int] | None]:
        """recover's end hooks, planned in the order its moves apply (latest deadline first): a
        flagged lease ends cancelled, a spent one dead."""
        spans: dict[bytes, tuple[int, int] | None] = {}
        for move in reversed(moves):
            if move.cancelled:
                spans[move.member] = self.plan_end(j, move.member, move.row, "cancelled",
                                                   mark=self.mark_of(move.row))
            elif move.spent:
                spans[move.member] = self.plan_end(j, move.member, move.row, "dead",
                                                   LOST % move.spent)
        return spans

    def _requeue(self, call: Call) -> bytes:
        dead, pending, ring, wake_key, row = call.keys
        job_id = call.args[0]
        if self.kind(dead) != b"zset" or job_id not in self.keys[dead].data \
                or self.kind(row) != b"hash":
            return status("NOT_DEAD")
        plan = self._plan(call.base, [(job_id, call.numbers["now"])], None)
        if isinstance(plan, bytes):
            return plan
        if not self.list_or_none(call.base + b"ended:" + job_id):
            return error(E_TYPE)
        if plan[0][0].lane is not None and self.kind(call.base + b"parked") not in (b"none",
                                                                                     b"hash"):
            return error(E_TYPE)
        self.zrem(dead, job_id)
        self.keys[row].data[b"a"] = b"0"
        self.keys[row].data.pop(b"expires_at", None)  # the operator's run: no deadline now
        self.keys.pop(call.base + b"ended:" + job_id, None)
        self.put_back(call.base, ring, pending, plan[0][0], head=False)
        self.wake(wake_key, 1)
        self.emit("requeued", job_id, 0, lane=plan[0][0].lane)
        return status("REQUEUED")

    def _recover(self, call: Call) -> bytes:
        return self._move_back(call, head=True)

    def _promote(self, call: Call) -> bytes:
        return self._move_back(call, head=False)
