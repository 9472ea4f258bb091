"""step: a durable step's output recorded in the job's row under the current lease, once."""

from __future__ import annotations

from echomq.conformance.model.call import Call
from echomq.conformance.model.replies import E_STEPS_TOTAL, STEPS_MAX, error, status
from echomq.conformance.model.state import State
from echomq.conformance.model.words import dec, int_field


class StepRecording(State):
    """The step transition applied to the keyspace."""

    def _step(self, call: Call) -> bytes:
        """Not the current lease: STALE; the name recorded already: KEPT; the row's steps
        over the cap with this output: EMQSIZE; else the row's step:<name> and steps."""
        active, row = call.keys
        job_id, name, output = call.args[0], call.args[2], call.args[3]
        if not self.is_current(active, row, job_id, call.numbers["fence"]):
            return status("STALE")
        fields = self.keys[row].data
        if b"step:" + name in fields:
            return status("KEPT")
        total = int_field(fields.get(b"steps"), 0) + len(output)
        if total > STEPS_MAX:
            return error(E_STEPS_TOTAL)
        fields[b"step:" + name] = output
        fields[b"steps"] = dec(total)
        return status("RECORDED")
