"""The lockstep machine's unique enqueue (a mixin of QueueMachine in tests/test_stateful.py), in
its three modes on one dedupe key: dedupe (one job while its holder's row lives, or for
``period_ms`` after it ends), debounce (a holder still delayed is pushed back, its payload
replaced) and throttle (one admission per window). The job a call admits is tracked like any
other: claimed, settled, recovered and ended by the other rules, so the dedupe key's release at
the job's end (acked, dead, cancelled) is checked against the model step by step."""

from __future__ import annotations

from typing import Any

from hypothesis import event, strategies as st
from hypothesis.stateful import precondition, rule

from echomq.conformance.model import status
from echomq.engine.transitions import ENQUEUE_UNIQUE
from tests.stateful_world import PAYLOADS, Argv, key

MODES = st.sampled_from([b"dedupe", b"debounce", b"throttle"])
# A window's TTL runs on the server's real clock, not the machine's: it is long (10 minutes, far
# beyond one example's run), and its end is a rule (``window_ends``), as a tombstone's is.
PERIODS = st.sampled_from([0, 600_000])
DELAYS = st.sampled_from([0, 0, 1_000])
VERDICTS = {b"dedupe": ("ENQUEUED", "DUPLICATE"),
            b"debounce": ("ENQUEUED", "DEBOUNCED", "DUPLICATE"),
            b"throttle": ("ENQUEUED", "THROTTLED", "DUPLICATE")}


class UniqueEnqueues:
    """The unique enqueue rule; the machine gives ``draw_id``, ``execute``, ``model``, ``now``,
    ``live`` and ``ghosts``."""

    @rule(data=st.data(), payload=PAYLOADS, mode=MODES, period_ms=PERIODS, delay_ms=DELAYS)
    def enqueue_unique(self, data: st.DataObject, payload: bytes, mode: bytes, period_ms: int,
                       delay_ms: int) -> None:
        machine: Any = self
        job_id = machine.draw_id(data)
        argv = [5, key(b"pending"), key(b"delayed"), key(b"job", job_id), key(b"wake"),
                key(b"dedupe"), job_id, payload, machine.now, mode, period_ms, delay_ms]
        self.unique_admit(argv)

    def window(self) -> bool:
        machine: Any = self
        held = machine.model.keys.get(key(b"dedupe"))
        return held is not None and bool(held.expires)

    @precondition(lambda self: self.window())
    @rule()
    def window_ends(self) -> None:
        """The dedupe key's window (dedupe's ``period_ms`` after its job ended, throttle's
        window) runs out: the key expires."""
        machine: Any = self
        machine.behind_the_back(b"DEL", key(b"dedupe"))
        event("a unique window ended")

    def unique_admit(self, argv: Argv) -> bytes:
        """A valid unique enqueue on the tracked queue, checked: the verdicts of its mode only;
        an id whose row exists is a DUPLICATE that changes nothing; the job it admits is live
        (and was neither live nor a ghost), in pending or, delayed, in delayed."""
        machine: Any = self
        row, job_id, mode = argv[3], argv[6], argv[9]
        known = machine.model.kind(row) == b"hash"
        reply, outcomes = machine.execute(ENQUEUE_UNIQUE, argv)
        if reply.startswith(b"-"):  # a key planted behind the queue's back: the model decides
            event("unique enqueue refused")
            return bytes(reply)
        assert reply in [status(word) for word in VERDICTS[mode]], (mode, reply)
        event(f"unique enqueue ({mode.decode()}): {reply.decode().strip()}")
        if known or reply != status("ENQUEUED"):
            if reply in (status("DUPLICATE"), status("THROTTLED")):
                assert outcomes["lua"].after == outcomes["lua"].before
            return bytes(reply)
        assert job_id not in machine.live and job_id not in machine.ghosts
        machine.live.add(job_id)
        return bytes(reply)
