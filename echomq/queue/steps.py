"""Durable steps for both Queues (mixed in): ``record_step`` and ``recorded_steps``, each one
program, run by the blocking Queue and awaited by the asyncio one (echomq.engine.steps says what
is sent and what the replies mean)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from echomq.engine.calls import Call, Job, Payload, QueueCalls, Verdict
from echomq.engine.native import checked_id
from echomq.engine.program import Invoke, Program, method, op
from echomq.engine.steps import recorded, step_call, steps_of


class StepRecords:
    """A job's durable steps, recorded under its lease and read back once an attempt."""

    conn: Any
    calls: QueueCalls
    _sent: Callable[..., Program[Any]]

    @op
    def record_step(self, job: Job, name: str, output: Payload) -> Program[Verdict]:
        """Record ``output`` (at most MAX_STEP_BYTES; a job's steps at most MAX_JOB_STEPS_BYTES
        in all) as step ``name`` of ``job``, under its lease: RECORDED, or KEPT when the name
        was recorded already (its first output stands). StaleLease if the lease is not
        current (nothing is written); LaneError for a bad name and ArgumentError for an output
        too long, before anything is sent."""
        call: Call = step_call(self.calls, job, name, output)
        verdict: Verdict = yield from self._sent(call, partial(recorded, job))
        return verdict

    @op
    def recorded_steps(self, job: Job) -> Program[dict[str, bytes]]:
        """The steps recorded for ``job`` so far (by any of its attempts), by name: one read of
        its row. StaleLease when the row's fence is not ``job``'s lease."""
        row = yield Invoke(self.conn, method("hgetall", self.calls.key("job", checked_id(job.id))))
        return steps_of(job, row)
