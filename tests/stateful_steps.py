"""The lockstep machine's step rule (a mixin of QueueMachine in tests/test_stateful.py): a
holder records a durable step, fenced as progress is; only the current lease writes, once per
name, its first output standing; a stale holder, a name recorded already or an output over a cap
changes nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import event, strategies as st
from hypothesis.stateful import precondition, rule

from echomq.conformance.model import status
from echomq.engine.transitions import MAX_STEP_BYTES, STEP
from tests.stateful_world import key

NAMES = st.sampled_from([b"charge", b"ship", b"email"])
OUTPUTS = st.one_of(st.sampled_from([b"", b"ch_1", b"\x00\r\n+OK\r\n",
                                     b"o" * MAX_STEP_BYTES, b"o" * (MAX_STEP_BYTES + 1)]),
                    st.binary(max_size=24))


class Steps:
    """The step rule; the machine gives ``pick_lease``, ``is_current``, ``fenced`` and
    ``model``."""

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), name=NAMES, output=OUTPUTS)
    def step(self, data: st.DataObject, name: bytes, output: bytes) -> None:
        machine: Any = self
        job_id, fence = machine.pick_lease(data)
        row = key(b"job", job_id)
        argv = [2, key(b"active"), row, job_id, fence, name, output]
        current = machine.is_current(job_id, fence)
        before = self._fields(row)
        reply = machine.fenced(STEP, job_id, fence, argv)
        after = self._fields(row)
        if len(output) > MAX_STEP_BYTES:
            assert reply.startswith(b"-EMQSIZE output "), reply
        elif reply.startswith(b"-WRONGTYPE"):  # a key tampered with behind the queue's back
            event("a step refused on a key of the wrong type")
        elif current and b"step:" + name in before:
            assert reply == status("KEPT"), reply
            event("a step kept")
        elif current and reply == status("RECORDED"):
            assert after[b"step:" + name] == output
            total = int(before.get(b"steps", b"0")) + len(output)
            assert after[b"steps"] == str(total).encode()
            event("a step recorded")
            return
        elif current:
            assert reply.startswith(b"-EMQSIZE a job's steps "), reply
        else:
            assert reply == status("STALE"), reply
        assert after == before

    def _fields(self, row: bytes) -> dict[bytes, bytes]:
        machine: Any = self
        model = machine.model
        return dict(model.keys[row].data) if model.kind(row) == b"hash" else {}
