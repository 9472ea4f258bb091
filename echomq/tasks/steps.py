"""``echomq.step(name, fn, *args, **kwargs)``: a task's step that runs once for its job.

Inside a task, ``step`` looks the name up among the steps its job recorded (read once an
attempt, at the first step: one read of the job's row); a recorded step gives back its output
without calling ``fn``. Otherwise ``fn(*args, **kwargs)`` runs, its value is encoded as a kept
result is (the app's serializer) and recorded by ``Queue.record_step`` under the job's lease
before ``step`` returns, so a later attempt — a retry, or a lease recovered after the worker
died — gets it back. A step that raises records nothing: the next attempt runs it again.

Both return the value as the serializer carries it (``decode(encode(value))``), the first run
and every later one alike. An ``async def`` task awaits the twin, ``await echomq.astep(...)``,
whose ``fn`` may be a plain or an ``async def`` function; its two round trips run in a thread
(``asyncio.to_thread``) so the event loop keeps serving the other jobs in flight.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from echomq.engine.calls import Verdict
from echomq.engine.native import checked_step_name
from echomq.tasks.envelope import Result, decode_result, encode
from echomq.tasks.reporting import RunningJob, running_job

__all__ = ["astep", "step"]

T = TypeVar("T")


def step(name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` once for the running task's job, as step ``name``: its value
    recorded before this returns; a later attempt gets the recorded value back and ``fn`` is
    not called. LaneError for a bad name (1-200 bytes of ``[A-Za-z0-9._:-]``) before ``fn``
    runs; StaleLease when the job's lease is no longer this worker's (before ``fn`` runs when
    the read at the attempt's first step finds it so; after it, the output is not recorded);
    ArgumentError for an output over MAX_STEP_BYTES encoded, or a job's steps over
    MAX_JOB_STEPS_BYTES (nothing is recorded). RuntimeError outside a running task, or for an
    ``fn`` that returns an awaitable (use ``astep``)."""
    found = _found(name)
    known = _known(found)
    if name in known:
        return cast(T, _decoded(known[name]))
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        _close(value)
        raise RuntimeError(f"step {name!r}: its function returned an awaitable; an async def "
                           "task awaits echomq.astep(...)")
    output = encode(Result(value), found.serializer)
    verdict = found.queue.record_step(found.job, name, output)
    return cast(T, _settled(found, name, output, verdict))


async def astep(name: str, fn: Callable[..., T | Awaitable[T]], *args: Any,
                **kwargs: Any) -> T:
    """``step`` for an ``async def`` task: awaited, ``fn`` awaited when it returns an
    awaitable."""
    found = _found(name)
    known = found.steps.known
    if known is None:
        known = await asyncio.to_thread(_known, found)
    if name in known:
        return cast(T, _decoded(known[name]))
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    output = encode(Result(value), found.serializer)
    verdict = await asyncio.to_thread(found.queue.record_step, found.job, name, output)
    return cast(T, await asyncio.to_thread(_settled, found, name, output, verdict))


def _found(name: str) -> RunningJob:
    found = running_job("echomq.step() records a step of the job a task is running")
    checked_step_name(name)
    return found


def _known(found: RunningJob) -> dict[str, bytes]:
    """The steps the attempt knows of: read from the job's row at its first step."""
    if found.steps.known is None:
        found.steps.known = found.queue.recorded_steps(found.job)
    return found.steps.known


def _settled(found: RunningJob, name: str, output: bytes, verdict: Verdict) -> Any:
    """The value step ``name`` gives, once recorded: ``output``'s, or, when the name was
    recorded already (KEPT), the recorded one, read again."""
    known = _known(found)
    if verdict is Verdict.KEPT:
        known.update(found.queue.recorded_steps(found.job))
    else:
        known[name] = output
    return _decoded(known[name])


def _decoded(output: bytes) -> Any:  # the task's own value, as its serializer carries it
    return decode_result(output).value


def _close(value: Any) -> None:
    close = getattr(value, "close", None)
    if close is not None:
        close()
