"""``echomq.progress(value)``: a running task tells how far it got.

The app sets the running job in a context variable around each call of a task's function
(``running``), so ``progress`` finds the job and its queue wherever the task calls it: in a plain
function (in the worker's thread, or the thread the asyncio consumer runs it in) or an ``async
def`` one. The value is encoded as a kept result is (``Result``, the app's serializer) and
recorded by ``Queue.set_progress``, fenced by the job's lease; ``TaskHandle.progress()`` decodes
the last one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from echomq.engine.calls import Job
from echomq.queue.blocking import Queue
from echomq.tasks.envelope import Result, Serializer, decode_result, encode

__all__ = ["RunningJob", "StepLog", "decoded_progress", "progress", "running", "running_job"]


@dataclass
class StepLog:
    """The steps an attempt knows of (``echomq.step``): None until its first step reads them."""

    known: dict[str, bytes] | None = None


@dataclass(frozen=True)
class RunningJob:
    """The job a task's function is running for, the queue it was claimed from, how the app
    encodes what the task reports, and the attempt's steps."""

    queue: Queue
    job: Job
    serializer: Serializer
    steps: StepLog = field(default_factory=StepLog)


_RUNNING: ContextVar[RunningJob | None] = ContextVar("echomq_running_job", default=None)


@contextmanager
def running(queue: Queue, job: Job, serializer: Serializer) -> Iterator[None]:
    """Within the block, ``progress`` reports on ``job``."""
    token = _RUNNING.set(RunningJob(queue, job, serializer))
    try:
        yield
    finally:
        _RUNNING.reset(token)


def progress(value: Any) -> None:
    """Record ``value`` as how far the running task got: its job's progress, read back by
    ``TaskHandle.progress()`` and ``Queue.outcome(id).progress``, the last one kept after the
    job is done. The value is encoded as a result is (TypeError when the app's serializer cannot
    carry it); ArgumentError when it is over MAX_PROGRESS_BYTES encoded; StaleLease when the
    job's lease is no longer this worker's (it expired and the job was taken again). A blocking
    call of one round trip, in an ``async def`` task too. RuntimeError outside a running
    task."""
    found = running_job("echomq.progress() reports on the job a task is running")
    found.queue.set_progress(found.job, encode(Result(value), found.serializer))


def running_job(what: str) -> RunningJob:
    """The job the calling task runs for; RuntimeError saying ``what`` outside a running
    task."""
    found = _RUNNING.get()
    if found is None:
        raise RuntimeError(f"{what}: call it inside a function of @app.task while a worker "
                           "runs it")
    return found


def decoded_progress(kept: bytes | None) -> Any:
    """The value a task reported last, from the progress its job's row keeps (None: none)."""
    return None if kept is None else decode_result(kept).value
