"""The lockstep machine's priority rules (a mixin of QueueMachine in tests/test_stateful.py): jobs
admitted at a priority (mostly 0, at once or later), a row's priority field changed behind the
queue's back, and the checks: the job a claim leases has a priority at least as high as every
live job still pending, and each live pending job waits in the band of its row's priority
(wherever it came back from: recover, release, promote, requeue)."""

from __future__ import annotations

from typing import Any

from hypothesis import event, strategies as st
from hypothesis.stateful import invariant, precondition, rule

from echomq.conformance.model import dec
from echomq.conformance.model.words import row_priority
from echomq.engine.priority import split_score
from echomq.engine.transitions import ENQUEUE, ENQUEUE_DELAYED
from tests.stateful_world import PAYLOADS, key

PRIORITIES = st.one_of(st.just(0), st.sampled_from([1, -1, 100, -100]), st.integers(-100, 100))
PRIORITY_FIELDS = st.sampled_from([b"abc", b"101", b"-101", b"+1", b"", b"-0", b"007", b"5",
                                   b"-100"])


def band(score: float) -> int:
    """The priority whose band of pending scores holds ``score``."""
    return split_score(score)[0]


class Priorities:
    """The priority rules; the machine gives ``draw_id``, ``admitted``, ``claim_one``,
    ``behind_the_back``, ``live``, ``now`` and ``model``."""

    @rule(data=st.data(), payload=PAYLOADS, priority=PRIORITIES)
    def enqueue_ranked(self, data: st.DataObject, payload: bytes, priority: int) -> None:
        machine: Any = self
        job_id = machine.draw_id(data)
        argv = [3, key(b"job", job_id), key(b"pending"), key(b"wake"), job_id, payload,
                machine.now, priority]
        if machine.admitted(ENQUEUE, argv):
            self.admitted_at(job_id, priority)
            assert band(dict(machine.model.zitems(key(b"pending")))[job_id]) == priority

    @rule(data=st.data(), priority=PRIORITIES, delay_ms=st.sampled_from([0, 1, 1_000]))
    def enqueue_ranked_later(self, data: st.DataObject, priority: int, delay_ms: int) -> None:
        machine: Any = self
        job_id = machine.draw_id(data)
        argv = [3, key(b"job", job_id), key(b"delayed"), key(b"wake"), job_id, b"p",
                machine.now, delay_ms, 0, priority]
        if machine.admitted(ENQUEUE_DELAYED, argv):
            self.admitted_at(job_id, priority)
            assert dict(machine.model.zitems(key(b"delayed")))[job_id] == machine.now + delay_ms

    def admitted_at(self, job_id: bytes, priority: int) -> None:
        """A job admitted: live, its row's priority field written only when it is not 0."""
        machine: Any = self
        machine.live.add(job_id)
        self.retold().discard(job_id)
        field = machine.model.hget(key(b"job", job_id), b"priority")
        assert field == (dec(priority) if priority else None), (priority, field)
        if priority:
            event("a job admitted at a priority")

    def retold(self) -> set[bytes]:
        """The ids whose priority field changed behind the queue's back since their admission:
        their pending score keeps the band they were admitted to until they move."""
        told: set[bytes] = self.__dict__.setdefault("_retold", set())
        return told

    @precondition(lambda self: self.live)
    @rule(data=st.data(), value=PRIORITY_FIELDS)
    def tamper_priority(self, data: st.DataObject, value: bytes) -> None:
        """A row's priority field gets another value, a priority or not (it then counts as 0)."""
        machine: Any = self
        job_id = data.draw(st.sampled_from(sorted(machine.live)), label="reprioritised")
        machine.behind_the_back(b"HSET", key(b"job", job_id), b"priority", value)
        self.retold().add(job_id)

    @rule(lease_ms=st.sampled_from([1, 1_000, 30_000]))
    def claim_by_priority(self, lease_ms: int) -> None:
        """A claim leases a job of the highest priority still pending among the live ones."""
        machine: Any = self
        bands = {job_id: band(score) for job_id, score in self.pending()
                 if job_id in machine.live}
        job_id = machine.claim_one(lease_ms)
        if job_id is not None:
            assert all(bands[job_id] >= other for other in bands.values()), (job_id, bands)
            if len(set(bands.values())) > 1:
                event("a claim chose between priorities")

    def pending(self) -> list[tuple[bytes, float]]:
        """pending's entries, lowest score first (none while a foreign key stands there)."""
        machine: Any = self
        if machine.model.kind(key(b"pending")) != b"zset":
            return []
        entries: list[tuple[bytes, float]] = machine.model.zitems(key(b"pending"))
        return entries

    @invariant()
    def pending_in_their_bands(self) -> None:
        """Each live pending job (its priority field untouched) waits in its row's band."""
        machine: Any = self
        for job_id, score in self.pending():
            row = key(b"job", job_id)
            if job_id in machine.live and job_id not in self.retold() \
                    and machine.model.kind(row) == b"hash":
                assert band(score) == row_priority(machine.model.hget(row, b"priority")), job_id
