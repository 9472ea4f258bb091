"""What the App's worker side wraps an attempt in: ``Attempt``, the hooks' ``running`` block and
the outcome it records, and ``Unrunnable``, a job no task of the App can run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from echomq.consumer.directives import Done, Reject, RetryIn
from echomq.consumer.loop import error_text
from echomq.engine.calls import Job
from echomq.tasks.envelope import Envelope
from echomq.tasks.hooks import DEAD, RETRIED, SUCCEEDED, RunRecord, cancelled_wins
from echomq.tasks.retry import RetryPolicy

Directive = Done | RetryIn | Reject


def task_error_text(exc: Exception, function: Callable[..., Any]) -> str:
    """``error_text`` of what the task ``function`` raised, its traceback from the function's
    own frame on: the frames that called it (the App's, an event loop's, a thread pool's) are
    no part of the task's error. A traceback that never reached that frame (a task that is no
    plain function, an error raised before it ran) is kept whole."""
    code = getattr(function, "__code__", None)
    trace = exc.__traceback__
    while trace is not None and trace.tb_frame.f_code is not code:
        trace = trace.tb_next
    if trace is not None:
        exc.__traceback__ = trace
    return error_text(exc)


@dataclass(frozen=True)
class Unrunnable:
    """A job no task of the app can run: the Reject it settles with, and its envelope when the
    payload is one (naming a task the app does not have)."""

    reject: Reject
    envelope: Envelope | None


class Attempt:
    """The hooks' ``running`` block around one attempt, and the record it fills: the outcome
    judged from the directive, or "retried" when the task raised what stops the worker (the
    consumer fails that attempt), or "cancelled" when its job was cancelled while it ran."""

    def __init__(self, block: Any, job: Job, policy: RetryPolicy) -> None:
        self.block, self.job, self.policy = block, job, policy
        self.record = RunRecord()

    def __enter__(self) -> Attempt:
        self.record = self.block.__enter__()
        return self

    def __exit__(self, kind: Any, exc: Any, trace: Any) -> Any:
        if exc is not None:
            self.record.outcome, self.record.error = RETRIED, error_text(exc)
        cancelled_wins(self.record)
        return self.block.__exit__(kind, exc, trace)

    def settled(self, directive: Directive) -> Directive:
        if isinstance(directive, Done):
            self.record.outcome, self.record.error = SUCCEEDED, None
        elif isinstance(directive, Reject):
            self.record.outcome, self.record.error = DEAD, directive.error
        else:
            last = self.policy.last(self.job.attempt)
            self.record.outcome, self.record.error = (DEAD if last else RETRIED), directive.error
        return directive
