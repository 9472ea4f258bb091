"""The lockstep machine's expiry rules (a mixin of QueueMachine in tests/test_stateful.py): jobs
admitted with a deadline (enqueue and delayed enqueue's ``expires_at``: past, at now, just after,
later, or none), and the check a claim and settle's claim part make of it: every live pending
job they walk past whose deadline their now meets ends dead with the error ``expired``, and the
jobs they lease are the oldest live ones whose deadline is still ahead (docs/PROTOCOL.md,
"Expiry")."""

from __future__ import annotations

from typing import Any

from hypothesis import event, strategies as st
from hypothesis.stateful import rule

from echomq.conformance.model import int_field
from echomq.engine.transitions import ENQUEUE, ENQUEUE_DELAYED
from tests.stateful_world import PAYLOADS, key

# A deadline relative to the admission's now (None: none given, so 0 is sent after the priority).
DEADLINES = st.sampled_from([None, -1_000, 0, 1, 1_000, 60_000])


class Expiries:
    """The expiry rules; the machine gives ``draw_id``, ``admitted``, ``live``, ``now``,
    ``model`` and ``zmembers``."""

    @rule(data=st.data(), payload=PAYLOADS, ahead=DEADLINES,
          delay_ms=st.sampled_from([None, 0, 1_000]))
    def enqueue_expiring(self, data: st.DataObject, payload: bytes, ahead: int | None,
                         delay_ms: int | None) -> None:
        """A job admitted with a deadline ``ahead`` of now (at once, or delayed): its row keeps
        it when it is above 0, and only then."""
        machine: Any = self
        job_id = machine.draw_id(data)
        deadline = 0 if ahead is None else max(0, machine.now + ahead)
        if delay_ms is None:
            argv = [3, key(b"job", job_id), key(b"pending"), key(b"wake"), job_id, payload,
                    machine.now, 0, deadline]
            admitted = machine.admitted(ENQUEUE, argv)
        else:
            argv = [3, key(b"job", job_id), key(b"delayed"), key(b"wake"), job_id, payload,
                    machine.now, delay_ms, 0, 0, deadline]
            admitted = machine.admitted(ENQUEUE_DELAYED, argv)
        if admitted:
            machine.live.add(job_id)
            kept = machine.model.hget(key(b"job", job_id), b"expires_at")
            assert kept == (str(deadline).encode() if deadline else None), (deadline, kept)

    def expired_by_now(self, job_id: bytes) -> bool:
        """Whether a claim now would end ``job_id`` as expired (its row's deadline met)."""
        machine: Any = self
        deadline = int_field(machine.model.hget(key(b"job", job_id), b"expires_at"), 0)
        return 0 < deadline <= machine.now

    def check_expired(self, walked: list[bytes]) -> None:
        """Each live job a claim walked past with its deadline met is dead, ``expired``."""
        machine: Any = self
        dead = set(machine.zmembers(b"dead"))
        for job_id in walked:
            event("a claim met a job's deadline")
            assert job_id in dead, job_id
            assert machine.model.hget(key(b"job", job_id), b"error") == b"expired", job_id
