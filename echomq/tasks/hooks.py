"""What an App tells observers about its tasks: around each enqueue and each attempt.

Metrics and tracing implement ``TaskHooks``; an App takes any number of them and calls each in
the order given (entering in order, leaving in reverse). ``NoHooks`` is the default and does
nothing. A hook that raises is a bug in the hook: it propagates (at enqueue, to the caller; in a
worker, it fails the attempt like a task's own error), so it is seen rather than swallowed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Protocol

from echomq.consumer.cancelling import cancel_requested
from echomq.consumer.loop import error_text
from echomq.engine.calls import Job

SUCCEEDED = "succeeded"
RETRIED = "retried"
DEAD = "dead"
CANCELLED = "cancelled"  # its job was cancelled while it ran: the server ended it so
# The queue or task an attempt is told under when the job does not say one the App knows: a
# payload that is no envelope, a task not registered. One fixed name, however many the strays
# carry, so a metric's label values stay bounded.
UNKNOWN = "<unknown>"


@dataclass
class RunRecord:
    """How one attempt ended, filled in by the App before the ``running`` block exits:
    ``outcome`` is "succeeded", "retried", "dead" or "cancelled"; ``error`` the error text, or
    None."""

    outcome: str = SUCCEEDED
    error: str | None = None


def cancelled_wins(record: RunRecord) -> RunRecord:
    """The one rule of a cancel that reached a running attempt: its job was cancelled while the
    attempt ran, so the server ends it cancelled, whatever the attempt came to (a return, a
    raise, a retry). Called once an attempt's outcome is judged, inside the attempt (the
    running job's cancel flag is read): by the App for its tasks, and by
    ``echomq.ops.metrics.instrument`` for a plain handler; the hooks, the metrics and the spans
    all read the record it leaves."""
    if cancel_requested():
        record.outcome = CANCELLED
    return record


@contextmanager
def failures_recorded(record: RunRecord) -> Iterator[RunRecord]:
    """Yield ``record``; an exception that escapes the block is a failed attempt, retried,
    unless the record already says how the attempt ended (the App's word stands)."""
    try:
        yield record
    except BaseException as exc:
        if record.error is None:
            record.outcome, record.error = RETRIED, error_text(exc)
        raise


class TaskHooks(Protocol):
    def enqueuing(self, queue: str, task: str,
                  headers: dict[str, str]) -> AbstractContextManager[None]:
        """Around one enqueue; may add entries to ``headers`` (they travel with the job)."""
        ...

    def running(self, queue: str, task: str, job: Job, headers: Mapping[str, str],
                enqueued_ms: int | None) -> AbstractContextManager[RunRecord]:
        """Around one attempt; yields the RunRecord the App fills in. ``enqueued_ms`` is the
        producer's clock at enqueue: the envelope's, else the time in the job's default id
        (``echomq.tasks.envelope.enqueue_time``); None when neither tells. The block exits with an
        exception when the task raised one that stops the worker (KeyboardInterrupt,
        SystemExit; the record says "retried"): read the record in a ``finally``. A job the App
        cannot run (its payload no envelope, its task not registered) is told under ``UNKNOWN``
        (``enqueued_ms`` None when unreadable) and ends "dead"."""
        ...


class NoHooks:
    """Hooks that do nothing."""

    def enqueuing(self, queue: str, task: str,
                  headers: dict[str, str]) -> AbstractContextManager[None]:
        return nullcontext()

    def running(self, queue: str, task: str, job: Job, headers: Mapping[str, str],
                enqueued_ms: int | None) -> AbstractContextManager[RunRecord]:
        return nullcontext(RunRecord())


class AllHooks:
    """Several hooks as one: each one's block nested in the one before, all sharing the
    RunRecord of the first (every record the others yield is filled in the same)."""

    def __init__(self, hooks: Sequence[TaskHooks]) -> None:
        self.hooks = tuple(hooks)

    def enqueuing(self, queue: str, task: str,
                  headers: dict[str, str]) -> AbstractContextManager[None]:
        return self._enqueuing(queue, task, headers)

    @contextmanager
    def _enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> Iterator[None]:
        with ExitStack() as stack:
            for hook in self.hooks:
                stack.enter_context(hook.enqueuing(queue, task, headers))
            yield

    def running(self, queue: str, task: str, job: Job, headers: Mapping[str, str],
                enqueued_ms: int | None) -> AbstractContextManager[RunRecord]:
        return self._running(queue, task, job, headers, enqueued_ms)

    @contextmanager
    def _running(self, queue: str, task: str, job: Job, headers: Mapping[str, str],
                 enqueued_ms: int | None) -> Iterator[RunRecord]:
        with ExitStack() as stack:
            records = [stack.enter_context(hook.running(queue, task, job, headers, enqueued_ms))
                       for hook in self.hooks]
            shared = RunRecord()
            try:
                yield shared
            finally:
                for record in records:
                    record.outcome, record.error = shared.outcome, shared.error


def combined(hooks: TaskHooks | Sequence[TaskHooks]) -> TaskHooks:
    """One TaskHooks for an App's ``hooks=`` argument: a single hook, or several, or none."""
    if isinstance(hooks, Sequence):
        if not hooks:
            return NoHooks()
        return hooks[0] if len(hooks) == 1 else AllHooks(hooks)
    return hooks
