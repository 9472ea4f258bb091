"""The lockstep machine's cancel: a mixin of ``tests.test_stateful.QueueMachine``. A job
cancelled while not leased is never claimed afterwards (it gets no fence again while its
tombstone stands), and a leased one is flagged, its attempt running on."""

from __future__ import annotations

from hypothesis import event, strategies as st
from hypothesis.stateful import invariant, rule

from echomq.conformance.model import status
from echomq.engine.transitions import CANCEL
from tests.stateful_world import POOL, ZSETS, Argv, key


class Cancelling:
    """The cancel rule of ``QueueMachine`` and its invariant."""

    def cancelled_fences(self) -> dict[bytes, int]:
        """Each id cancelled while not leased, and the fences it had been given by then."""
        found: dict[bytes, int] = self.__dict__.setdefault("_cancelled_fences", {})
        return found

    @rule(data=st.data(), retention_ms=st.sampled_from([0, 600_000, 600_000]))
    def cancel(self, data: st.DataObject, retention_ms: int) -> None:
        job_id = data.draw(st.sampled_from(POOL), label="cancelled")
        self.cancelled([6, key(b"job", job_id), key(b"pending"), key(b"delayed"),
                        key(b"active"), key(b"dead"), key(b"ring"), job_id, self.now,
                        retention_ms])

    def cancelled(self, argv: Argv) -> bytes:
        """A cancel (``argv``: numkeys 6, the row, pending, delayed, active, dead, ring, then id,
        now, retention_ms), checked: a live job not leased is cancelled and never runs again, a
        leased one is flagged."""
        row, job_id = argv[1], argv[7]
        leased = job_id in self.zmembers(b"active")
        # A row whose payload was taken behind the queue's back (``tamper``) and that carries the
        # cancel mark reads as cancelled already, leased or not (PROTOCOL.md, cancel's table).
        whole = self.model.kind(row) != b"hash" or self.model.hget(row, b"p") is not None
        reply, _ = self.execute(CANCEL, argv)
        if reply == status("CANCELLED") and job_id in self.live and whole:
            assert not leased, job_id
            event("a waiting job cancelled")
            self.live.discard(job_id)
            self.cancelled_fences()[job_id] = len(self.fences.get(job_id, []))
        elif reply == status("CANCELLING"):
            assert leased, job_id
            event("a leased job flagged")
            self.flagged_leases().add(job_id)
        return bytes(reply)

    def heartbeat(self, job_id: bytes, fence: int) -> bytes:
        """What extending the lease (``job_id``, ``fence``) answers: STALE when it is not
        current, CANCELLING when it is and a cancel flagged it, else EXTENDED."""
        if not self.is_current(job_id, fence):
            return b"STALE"
        flagged = self.model.hget(key(b"job", job_id), b"cancel") is not None
        return b"CANCELLING" if flagged else b"EXTENDED"

    def flagged(self, job_id: bytes) -> bool:
        return self.model.flagged(key(b"job", job_id))

    def flagged_leases(self) -> set[bytes]:
        """The ids a cancel flagged while leased, until their attempt ends."""
        found: set[bytes] = self.__dict__.setdefault("_flagged_leases", set())
        return found

    def forget_cancelled(self) -> None:
        """A flagged lease's end, by any settlement or a recover, leaves a cancelled tombstone,
        or no row at all when the cancel asked for no retention: its id is live no more."""
        flagged, active = self.flagged_leases(), set(self.zmembers(b"active"))
        for job_id in sorted(self.live - active):  # a flagged lease ends by leaving active
            row = key(b"job", job_id)
            tombstone = self.model.hget(row, b"cancelled") is not None \
                and self.model.hget(row, b"p") is None
            if tombstone or (job_id in flagged and row not in self.model.keys):
                self.live.discard(job_id)
                flagged.discard(job_id)
                event("a flagged lease ended cancelled")

    @invariant()
    def cancelled_jobs_never_run(self) -> None:
        """No claim leases a job cancelled while it waited: while its cancelled tombstone stands
        it is in no set and gets no new fence."""
        places = {member for role in ZSETS for member in self.zmembers(role)}
        places |= {member for name, value in self.model.keys.items()
                   if name.startswith(key(b"lane:")) and value.kind == b"list"
                   for member in value.data}
        for job_id, fences in list(self.cancelled_fences().items()):
            if self.model.hget(key(b"job", job_id), b"cancelled") is None:
                del self.cancelled_fences()[job_id]  # its tombstone went: the id may come back
                continue
            assert job_id not in places, job_id
            assert len(self.fences.get(job_id, [])) == fences, job_id
