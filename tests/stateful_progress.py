"""The lockstep machine's progress rule (a mixin of QueueMachine in tests/test_stateful.py): a
holder reports how far it got, fenced as extend is; only the current lease writes the row's
progress, a stale holder or one over the cap changes nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import event, strategies as st
from hypothesis.stateful import precondition, rule

from echomq.conformance.model import status
from echomq.engine.transitions import MAX_PROGRESS_BYTES, PROGRESS
from tests.stateful_world import key

PROGRESSES = st.one_of(st.sampled_from([b"", b"50%", b"\x00\r\n+OK\r\n",
                                        b"g" * MAX_PROGRESS_BYTES,
                                        b"g" * (MAX_PROGRESS_BYTES + 1)]),
                       st.binary(max_size=24))


class Progress:
    """The progress rule; the machine gives ``pick_lease``, ``is_current``, ``fenced`` and
    ``model``."""

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), progress=PROGRESSES)
    def progress(self, data: st.DataObject, progress: bytes) -> None:
        machine: Any = self
        job_id, fence = machine.pick_lease(data)
        argv = [2, key(b"active"), key(b"job", job_id), job_id, fence, progress]
        current = machine.is_current(job_id, fence)
        before = machine.model.hget(key(b"job", job_id), b"progress") \
            if machine.model.kind(key(b"job", job_id)) == b"hash" else None
        reply = machine.fenced(PROGRESS, job_id, fence, argv)
        row_progress = machine.model.hget(key(b"job", job_id), b"progress") \
            if machine.model.kind(key(b"job", job_id)) == b"hash" else None
        if len(progress) > MAX_PROGRESS_BYTES:
            assert reply.startswith(b"-EMQSIZE progress "), reply
        elif current:
            assert reply == status("RECORDED"), reply
            assert row_progress == progress
            event("a progress recorded")
            return
        assert row_progress == before
