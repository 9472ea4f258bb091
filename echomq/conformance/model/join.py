"""Dependencies and the join: enqueue_after, after, and the end hook every transition that ends a
job runs (include/dependents.lua's twin). A plan walks the dependents on an overlay of what it
already planned, checking each derived key's type (the model's only refusal of a derived key:
WRONGTYPE) before anything is written; the caller applies its steps after the job's own writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from echomq.conformance.model.call import Call
from echomq.conformance.model.replies import E_TYPE, error, number_error, status
from echomq.conformance.model.state import State, Value
from echomq.conformance.model.words import count_field, dec, int_field, pending_score, row_priority

POLICIES = (b"fail", b"ignore", b"continue")
# The refusal of a call that would count on a waiting job's `waits` that is not a count.
E_WAITS = number_error("waits", 0)
# The type each derived key of the hook must have when present, by its suffix's first word.


@dataclass
class Waiter:
    """A job's planned state: whether it waits, its count and hold, its policy."""

    row: bytes
    waiting: bool = False
    waits: int | None = 0  # None: its `waits` is not a count (count_field)
    hold: bool = False
    policy: bytes = b"fail"

    def count(self) -> int:
        """Its `waits`, known to be a count (after's own job: checked before the plan)."""
        assert self.waits is not None
        return self.waits


@dataclass
class Step:
    op: str
    id: bytes
    row: bytes = b""
    error: bytes = b""
    mark: tuple[int, int] = (0, 0)
    key: bytes = b""
    ms: int = 0
    child: bytes = b""


@dataclass
class Join:
    """One call's plan: its base, its now (None: ack, ack with a result), the keys checked, the
    overlay, the steps and whether a check failed."""

    base: bytes
    now: int | None
    checked: set[bytes] = field(default_factory=set)
    state: dict[bytes, Waiter] = field(default_factory=dict)
    next_add: dict[bytes, list[bytes]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    failure: bytes | None = None

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def refusal(self) -> bytes:
        """The reply of the first check that failed."""
        assert self.failure is not None
        return self.failure


class Joins(State):
    """The join's plan and moves, and the two transitions of dependencies."""

    # -- the plan ---------------------------------------------------------------------------

    def join_check(self, j: Join, key: bytes, kind: bytes) -> None:
        if j.failed or key in j.checked:
            return
        j.checked.add(key)
        if self.kind(key) not in (b"none", kind):
            j.failure = error(E_TYPE)

    def next_of(self, j: Join, job_id: bytes, value: bytes | None) -> list[bytes]:
        ids = [d for d in (value or b"").split(b" ") if d]
        return ids + j.next_add.get(job_id, [])

    def waiter(self, j: Join, d: bytes) -> Waiter:
        if d in j.state:
            return j.state[d]
        row = j.base + b"job:" + d
        self.join_check(j, row, b"hash")
        s = Waiter(row)
        j.state[d] = s
        if j.failed:
            return s
        waiting = j.base + b"waiting"
        if (self.kind(waiting) == b"zset" and d in self.keys[waiting].data
                and self.kind(row) == b"hash"):
            s.waiting, s.waits = True, count_field(self.hget(row, b"waits"))
            s.hold = self.hget(row, b"hold") is not None
            s.policy = self.hget(row, b"policy") or b"fail"
        return s

    def plan_release(self, j: Join, d: bytes, s: Waiter) -> None:
        self.join_check(j, j.base + b"pending", b"zset")
        self.join_check(j, j.base + b"wake", b"list")
        s.waiting = False
        j.steps.append(Step("release", d, s.row))

    def plan_fail(self, j: Join, d: bytes, s: Waiter, text: bytes) -> None:
        self.join_check(j, j.base + b"dead", b"zset")
        self.join_check(j, j.base + b"ended:" + d, b"list")
        s.waiting = False
        j.steps.append(Step("fail", d, s.row, error=text))

    def plan_cancel(self, j: Join, d: bytes, s: Waiter, mark: tuple[int, int]) -> None:
        self.join_check(j, j.base + b"ended:" + d, b"list")
        s.waiting = False
        j.steps.append(Step("cancel", d, s.row, mark=mark))

    def plan_dependent(self, j: Join, d: bytes, parent: tuple[bytes, str, bytes, tuple[int, int]],
                       work: list[tuple[bytes, bytes, str, bytes, tuple[int, int]]]) -> None:
        """One dependent ``d`` of a job that ended so (its id, outcome, error, cancel mark); a
        dependent that ends in turn joins the worklist."""
        s = self.waiter(j, d)
        if j.failed or not s.waiting:
            return
        pid, outcome, text, mark = parent
        if outcome == "dead" and s.policy == b"continue":
            self.plan_release(j, d, s)
        elif outcome == "dead" and s.policy != b"ignore":
            dtext = b"parent " + pid + b" died: " + text
            self.plan_fail(j, d, s, dtext)
            work.append((d, s.row, "dead", dtext, mark))
        elif outcome == "cancelled":
            self.plan_cancel(j, d, s, mark)
            work.append((d, s.row, "cancelled", text, mark))
        else:  # done, or dead under ignore
            if s.waits is None:  # not a count: refused before anything is written
                j.failure = E_WAITS
                return
            s.waits -= 1
            if s.waits <= 0 and not s.hold:
                self.plan_release(j, d, s)
            else:
                j.steps.append(Step("decr", d, s.row))

    def plan_end(self, j: Join, job_id: bytes, row: bytes, outcome: str,
                 text: bytes = b"", mark: tuple[int, int] = (0, 0)) -> tuple[int, int] | None:
        """Plans the end hook of ``job_id``: the range of its steps, or None (WRONGTYPE)."""
        first = len(j.steps)
        work: list[tuple[bytes, bytes, str, bytes, tuple[int, int]]] = [
            (job_id, row, outcome, text, mark)]
        k = 0
        while k < len(work) and not j.failed:
            wid, wrow, wout, wtext, wmark = work[k]
            k += 1
            dedupe = self.hget(wrow, b"dedupe") if self.kind(wrow) == b"hash" else None
            nxt = self.hget(wrow, b"next") if self.kind(wrow) == b"hash" else None
            if dedupe is not None:
                key = j.base + dedupe
                self.join_check(j, key, b"string")
                ms = int_field(self.hget(wrow, b"dedupe_ms"), 0)
                j.steps.append(Step("dedupe", wid, key=key, ms=ms))
            ids = self.next_of(j, wid, nxt)
            if ids:
                self.join_check(j, j.base + b"waiting", b"zset")
            for d in ids:
                if not j.failed:
                    self.plan_dependent(j, d, (wid, wout, wtext, wmark), work)
        if j.failed:
            return None
        return first, len(j.steps)

    def mark_of(self, row: bytes) -> tuple[int, int]:
        return (int_field(self.hget(row, b"cancel"), 0), int_field(self.hget(row, b"cancelled"), 0))

    # -- the steps --------------------------------------------------------------------------

    def apply_steps(self, j: Join, span: tuple[int, int] | None) -> None:
        if span is None:
            return
        for step in j.steps[span[0]:span[1]]:
            getattr(self, "_step_" + step.op)(j, step)

    def _leave_waiting(self, j: Join, step: Step) -> None:
        self.zrem(j.base + b"waiting", step.id)
        fields = self.keys[step.row].data
        fields.pop(b"waits", None)
        fields.pop(b"hold", None)

    def _step_dedupe(self, j: Join, step: Step) -> None:
        value = self.keys.get(step.key)
        if value is None or value.data != step.id:
            return
        if step.ms > 0:
            value.expires = True
        else:
            del self.keys[step.key]

    def _hincr(self, row: bytes, by: int) -> None:
        fields = self.keys.setdefault(row, Value(b"hash", {})).data
        fields[b"waits"] = dec(int_field(fields.get(b"waits"), 0) + by)

    def _step_decr(self, j: Join, step: Step) -> None:
        self._hincr(step.row, -1)

    def _step_incr(self, j: Join, step: Step) -> None:
        self._hincr(step.row, 1)

    def _step_link(self, j: Join, step: Step) -> None:
        fields = self.keys[step.row].data
        cur = fields.get(b"next")
        fields[b"next"] = cur + b" " + step.child if cur else step.child

    def _step_seal(self, j: Join, step: Step) -> None:
        self.keys[step.row].data.pop(b"hold", None)
        self._hincr(step.row, -1)

    def _step_release(self, j: Join, step: Step) -> None:
        attempt = self.attempts_of(step.row)
        at = j.now if j.now is not None else int_field(self.field(step.row, b"t"), 0)
        self._leave_waiting(j, step)
        p = row_priority(self.hget(step.row, b"priority"))
        self.zadd(j.base + b"pending", pending_score(p, at), step.id)
        self.wake(j.base + b"wake", 1)
        self.emit("ready", step.id, attempt, priority=p)

    def _step_fail(self, j: Join, step: Step) -> None:
        attempt = self.attempts_of(step.row)
        self._leave_waiting(j, step)
        self.keys[step.row].data[b"error"] = step.error
        assert j.now is not None, "a job dies only in a call that takes now"
        self.zadd(j.base + b"dead", j.now, step.id)
        self.mark_ended(step.row, step.id, None)
        self.emit("dead", step.id, attempt)

    def _step_cancel(self, j: Join, step: Step) -> None:
        attempt = self.attempts_of(step.row)
        self._leave_waiting(j, step)
        retention, at = step.mark
        if retention > 0:
            fields = self.keys[step.row].data
            fields[b"cancel"], fields[b"cancelled"] = dec(retention), dec(at)
        self.bury_cancelled(step.row, step.id, retention)
        self.emit("cancelled", step.id, attempt)

    # -- the transitions --------------------------------------------------------------------

    def _enqueue_after(self, call: Call) -> bytes:
        waiting, row = call.keys
        job_id, payload, policy = call.args[0], call.args[1], call.args[3]
        if row in self.keys:
            return status("DUPLICATE")
        now, priority = call.numbers["now"], call.numbers.get("priority", 0)
        fields = {b"p": payload, b"t": dec(now)}
        if priority:
            fields[b"priority"] = dec(priority)
        fields[b"waits"], fields[b"hold"] = b"1", b"1"
        if policy != b"fail":
            fields[b"policy"] = policy
        self.keys[row] = Value(b"hash", fields)
        self.zadd(waiting, now, job_id)
        self.emit("waiting", job_id, 0, priority=priority)
        return status("WAITING")

    def after_parent(self, j: Join, call: Call, me: Waiter, p: bytes) -> str | None:
        """One parent of after's waiting job: done (absent, a tombstone), dead (the job's
        policy), cancelled, or live (linked once). The job's new verdict, or None."""
        job_id, row, dead = call.args[0], call.keys[3], call.keys[2]
        prow = call.base + b"job:" + p
        if self.kind(prow) == b"none":
            return None
        if self.kind(dead) == b"zset" and p in self.keys[dead].data:
            if me.policy == b"continue":
                self.plan_release(j, job_id, me)
                return "READY"
            if me.policy == b"ignore":
                return None
            text = b"parent " + p + b" died: " + (self.hget(prow, b"error") or b"")
            self.plan_fail(j, job_id, me, text)
            self.plan_end(j, job_id, row, "dead", text)
            return "DEAD"
        if self.field(prow, b"p") is None:
            if self.hget(prow, b"cancelled") is None:
                return None
            mark = self.mark_of(prow)
            self.plan_cancel(j, job_id, me, mark)
            self.plan_end(j, job_id, row, "cancelled", mark=mark)
            return "CANCELLED"
        if job_id not in self.next_of(j, p, self.hget(prow, b"next")):
            j.next_add.setdefault(p, []).append(job_id)
            j.steps.append(Step("link", p, prow, child=job_id))
            j.steps.append(Step("incr", job_id, row))
            me.waits = me.count() + 1
        return None

    def _after(self, call: Call) -> bytes:
        waiting, row = call.keys[0], call.keys[3]
        job_id, parents = call.args[0], call.args[3:]
        if any(self.kind(call.base + b"job:" + p) not in (b"none", b"hash") for p in parents):
            return error(E_TYPE)
        if self.kind(waiting) != b"zset" or job_id not in self.keys[waiting].data:
            return status("NOTWAITING")
        if self.hget(row, b"hold") is None:
            return status("SEALED")
        if count_field(self.hget(row, b"waits")) is None:
            return E_WAITS
        return self.after_open(call)

    def after_open(self, call: Call) -> bytes:
        """after on a job still open for parents: each parent in order, then the seal."""
        row, job_id, parents = call.keys[3], call.args[0], call.args[3:]
        j = Join(call.base, call.numbers["now"])
        me = Waiter(row, True, count_field(self.hget(row, b"waits")), True,
                    self.hget(row, b"policy") or b"fail")
        j.state[job_id] = me
        verdict = "WAITING"
        for p in parents:
            if not me.waiting:
                break
            if p != job_id:
                verdict = self.after_parent(j, call, me, p) or verdict
            if j.failed:
                return j.refusal()
        if call.numbers["seal"] != 0 and me.waiting:
            if me.count() - 1 <= 0:
                self.plan_release(j, job_id, me)
                verdict = "READY"
            else:
                j.steps.append(Step("seal", job_id, row))
        if j.failed:
            return j.refusal()
        self.apply_steps(j, (0, len(j.steps)))
        return status(verdict)
