"""The command line's checks of its arguments, made before anything connects or starts: queue
names, counts, a worker's queues and its target. Each bad one is a one-line error with a hint
and exit 2 (``--debug`` shows the traceback of a target that does not load)."""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from echomq.cli.errors import BAD_INPUT, Failure, debugging
from echomq.engine.errors import ArgumentError
from echomq.engine.native import checked_priority
from echomq.engine.transitions import queue_base
from echomq.ops.admin import DeadJob, every_dead_job

QUEUE_HINT = ("a queue name is any non-empty text without { or } (they mark the key's hash "
              "tag), / or control characters")
MAX_COUNT = 999_999_999_999_999  # the largest count a transition takes


class QueueName(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """A queue's name, refused with a one-line error when no queue can have it."""

    name = "queue"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        check_queue(str(value))
        return str(value)


class Priority(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """A job's priority, -100 to 100, refused in the server's words when it is not one."""

    name = "priority"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        try:
            number = value if isinstance(value, int) else int(str(value), 10)
            checked_priority(number)
        except (ValueError, ArgumentError) as exc:
            raise Failure(f"bad --priority {value!r}: "
                          "priority must be an integer from -100 to 100",
                          "higher is claimed first; 0, the default, is every job's "
                          "without one", BAD_INPUT) from exc
        return number


QUEUE = QueueName()
PRIORITY = Priority()
COUNT = click.IntRange(1, MAX_COUNT)


def check_queue(name: str) -> None:
    try:
        queue_base(name)
    except ValueError as exc:
        raise Failure(str(exc), QUEUE_HINT, BAD_INPUT) from exc


def check_worker_queues(names: Sequence[str]) -> None:
    """Every queue a worker serves is a queue name, and none is given twice."""
    for name in names:
        check_queue(name)
    twice = sorted({name for name in names if list(names).count(name) > 1})
    if twice:
        raise Failure(f"a queue is listed twice: {', '.join(twice)}",
                      "give each --queue once; their order is their priority", BAD_INPUT)


# Frames of the import machinery and of echomq itself, not where the user's error is.
_NOT_THEIRS = ("<frozen", str(Path(importlib.__file__).parent), str(Path(__file__).parents[1]))


def raised_at(exc: BaseException) -> str | None:
    """Where in the user's code ``exc`` was raised (``file, line N``): a syntax error's own
    place, else the deepest frame outside the import machinery and echomq; None if none."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}, line {exc.lineno}"
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not frame.filename.startswith(_NOT_THEIRS)]
    return f"{frames[-1].filename}, line {frames[-1].lineno}" if frames else None


def load_failure(target: str, exc: Exception) -> Failure:
    """The one-line report of a worker's target (or hook) that does not load. Under
    ``--debug`` the original exception goes on, with its traceback."""
    if debugging():
        raise exc
    where = raised_at(exc)
    said = exc.msg if isinstance(exc, SyntaxError) else exc  # its place is shown once
    message = f"cannot load {target}: {type(exc).__name__}: {said}"
    if where is not None:
        return Failure(f"{message} ({where})", "fix the error there; --debug shows the "
                       "traceback", BAD_INPUT)
    if isinstance(exc, ImportError):
        return Failure(message, "run the command where MODULE can be imported (the current "
                       "directory is on the path), or set PYTHONPATH", BAD_INPUT)
    return Failure(message, "name a handler as MODULE:FUNCTION or an App as MODULE:APP",
                   BAD_INPUT)


@dataclass(frozen=True)
class DeadFilter:
    """Which dead jobs ``dead requeue --all`` runs again: each given part must match."""

    error_has: str | None = None  # the last error contains it
    lane: str | None = None
    task: str | None = None

    def given(self) -> bool:
        return any(part is not None for part in (self.error_has, self.lane, self.task))

    def keeps(self, job: DeadJob) -> bool:
        return ((self.error_has is None or self.error_has in job.error)
                and (self.lane is None or job.lane == self.lane)
                and (self.task is None or job.task == self.task))


def requeue_targets(conn: Any, queue: str, job_ids: tuple[str, ...], every: bool,
                    kept: DeadFilter) -> tuple[str, ...]:
    """The dead jobs ``dead requeue`` runs again: the ids given, or with ``every`` each dead
    job ``kept`` keeps. Ids and ``--all`` together, or neither, are bad input; so are filters
    without ``--all``."""
    if every == bool(job_ids):
        raise Failure("give the ids of the dead jobs to requeue, or --all (not both)",
                      f"`echomq dead list {queue}` shows them", BAD_INPUT)
    if not every:
        if kept.given():
            raise Failure("--error, --lane and --task filter --all",
                          "add --all, or drop the filters", BAD_INPUT)
        return job_ids
    return tuple(job.id for job in every_dead_job(conn, queue) if kept.keeps(job))
