"""Durable steps, what is sent and what the replies mean — no I/O.

A step's output is recorded by ``EMQ.STEP`` (``step.lua``) in the job's row, ``step:<name>``,
under the lease's fence and once per name (docs/PROTOCOL.md "step"). An attempt reads the steps
recorded so far once, at its first step: one ``HGETALL`` of the row, its ``step:`` fields kept
and its fence checked against the attempt's own, so a worker whose lease was taken learns it
before it runs a step's function rather than after.
"""

from __future__ import annotations

from typing import Any

from echomq.engine import transitions as t
from echomq.engine.calls import (
    Call,
    Job,
    Payload,
    QueueCalls,
    Verdict,
    checked_arg,
    fenced,
    payload_bytes,
    text,
)
from echomq.engine.errors import ArgumentError, StaleLease
from echomq.engine.native import checked_id, checked_step_name
from echomq.engine.rows import FENCE, FULL_NAMES

MAX_STEP_BYTES = t.MAX_STEP_BYTES
MAX_JOB_STEPS_BYTES = t.MAX_JOB_STEPS_BYTES
STEP_FIELD = b"step:"
STEP_OUTPUT_ERROR = t.ERRORS["STEP_OUTPUT"].text


def checked_output(output: Payload) -> bytes:
    """A step's output as its bytes: at most MAX_STEP_BYTES (ArgumentError with the server's
    words otherwise, before anything is sent)."""
    raw = payload_bytes(output)
    if len(raw) > MAX_STEP_BYTES:
        raise ArgumentError(STEP_OUTPUT_ERROR)
    return raw


def step_call(calls: QueueCalls, job: Job, name: str, output: Payload) -> Call:
    """The call recording ``output`` as step ``name`` of ``job`` under its lease."""
    args = (checked_id(job.id), checked_arg("fence", job.fence), checked_step_name(name),
            checked_output(output))
    return calls._call(t.STEP, args, job.id)


def recorded(job: Job, reply: Any) -> Verdict:
    """RECORDED, or KEPT (the name was recorded already: its first output stands);
    StaleLease when the lease is not ``job``'s."""
    return fenced(job, reply)


def steps_of(job: Job, row: Any) -> dict[str, bytes]:
    """The steps ``job``'s row holds (an ``HGETALL`` reply), by name; StaleLease when the row's
    fence is not the job's lease (its lease was taken, or the job ended)."""
    fields = {payload_bytes(k): v for k, v in (row or {}).items()}
    fence = fields.get(FENCE.encode(), fields.get(FULL_NAMES[FENCE].encode()))
    if fence is None or text(fence) != str(job.fence):
        raise StaleLease(job.id, job.attempt)
    return {k[len(STEP_FIELD):].decode(): payload_bytes(v) for k, v in fields.items()
            if k.startswith(STEP_FIELD)}


def steps_total(steps: dict[str, bytes]) -> int:
    """The bytes the steps hold together, as the row's ``steps`` counts them."""
    return sum(len(output) for output in steps.values())
