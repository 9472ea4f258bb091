"""A Django 6 ``django.tasks`` backend: ``task.enqueue()`` admits an echomq job and
``get_result()`` reads the job's outcome (``Queue.outcome``); ``handler`` runs the task functions
in an echomq worker.

    TASKS = {"default": {
        "BACKEND": "echomq.contrib.django.EchoMQBackend",
        "QUEUES": ["default", "emails"],          # each Django queue_name is an echomq queue
        "OPTIONS": {"URL": "redis://localhost:6379/0", "WIRE": "auto",
                    "MAX_ATTEMPTS": 1, "RETRY_DELAY_MS": 1000, "EVENTS": False},
    }}

The job's payload is JSON (``Call``: the task's import path, its arguments, which Django has
already made JSON, the backend's alias and the enqueue time); the result a worker keeps with the
job's tombstone is the same call with what its run gave (the return value, when it started and
finished, which worker ran it), and a failed run's error is the exception's class and traceback
(``error_text``). ``run_after`` admits the job into the delayed set (``supports_defer``);
priorities are not supported (a queue runs in order).

Workers: ``DJANGO_SETTINGS_MODULE=mysite.settings echomq worker echomq.contrib.django:handler
--queue default``. A task that raises is retried after the backend's ``RETRY_DELAY_MS`` until its
attempts reach ``MAX_ATTEMPTS`` (1 by default: failed at once, as Django's own backends do).
``EVENTS``: each enqueue appends to the queue's events stream (the workers then take
``--events``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import django
from django.apps import apps
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from echomq.consumer.directives import Directive, Done, Reject, RetryIn
from echomq.engine import rows as jobrow
from echomq.engine.calls import JobOutcome
from echomq.engine.wire import Wire, wire_of
from echomq.queue.blocking import Job, Queue
from echomq.queue.connection import redis_from_url
from echomq.queue.ids import new_job_id

__all__ = ["Call", "EchoMQBackend", "error_text", "handler"]

STATUS_OF_STATE = {
    "pending": TaskResultStatus.READY,
    "delayed": TaskResultStatus.READY,
    "active": TaskResultStatus.RUNNING,
    "done": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
}
TRACEBACK_CHARS = 8_000  # the end of a traceback is kept: the frames nearest the error


@dataclass
class Call:
    """One task call as a job carries it (the payload), and as its result keeps it."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str
    enqueued_at: str
    ran: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        fields = {"task": self.task, "args": self.args, "kwargs": self.kwargs,
                  "backend": self.backend, "enqueued_at": self.enqueued_at, **self.ran}
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Call:
        """ValueError for bytes that are no call's."""
        try:
            data = json.loads(raw)
            call = cls(data.pop("task"), data.pop("args"), data.pop("kwargs"),
                       data.pop("backend"), data.pop("enqueued_at"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a Django task call: {exc!r}") from exc
        call.ran = data
        return call


def error_text(exc: BaseException) -> str:
    """A task's exception as the dead row keeps it: its class's path and its traceback."""
    kind = type(exc)
    trace = "".join(traceback.format_exception(exc))[-TRACEBACK_CHARS:]
    return json.dumps({"exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
                       "traceback": trace})


def task_error(text: str) -> TaskError:
    """The TaskError of a recorded error: ours, or the worker's own words (a crash, a lease
    that ran out) under echomq.EchoMQError."""
    try:
        data = json.loads(text)
        return TaskError(exception_class_path=data["exception_class_path"],
                         traceback=data["traceback"])
    except (ValueError, TypeError, KeyError):
        return TaskError(exception_class_path="echomq.engine.errors.EchoMQError", traceback=text)


def moment(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


class EchoMQBackend(BaseTaskBackend):
    """Django's tasks on echomq queues (``QUEUES``, each an echomq queue of that name)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True  # Django's -100..100, higher first: echomq's own range

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.url: str = self.options.get("URL", "redis://localhost:6379/0")
        self.wire = wire_of(self.options.get("WIRE", Wire.AUTO))
        self.max_attempts: int = self.options.get("MAX_ATTEMPTS", 1)
        self.retry_delay_ms: int = self.options.get("RETRY_DELAY_MS", 1_000)
        self.events: bool = bool(self.options.get("EVENTS", False))

    @cached_property
    def conn(self) -> Any:
        return redis_from_url(self.url)

    def queue(self, name: str) -> Queue:
        return Queue(self.conn, name, wire=self.wire, max_attempts=self.max_attempts,
                     check_policy=False, events=self.events)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        job_id = new_job_id()
        result = self._result(task, job_id, TaskResultStatus.READY, args, kwargs,
                              enqueued_at=timezone.now())
        call = Call(task.module_path, result.args, result.kwargs, self.alias,
                    result.enqueued_at.isoformat())
        at_ms = None if task.run_after is None else int(task.run_after.timestamp() * 1000)
        self.queue(task.queue_name).enqueue(job_id, call.encode(), at_ms=at_ms,
                                            priority=task.priority)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The result of job ``result_id``, from whichever of the backend's queues holds it;
        TaskResultDoesNotExist when none does (never admitted, or its tombstone expired)."""
        for name in sorted(self.queues):
            queue = self.queue(name)
            outcome = queue.outcome(result_id)
            if outcome.state != "unknown":
                return self._read(queue, result_id, outcome)
        raise TaskResultDoesNotExist(result_id)

    def _read(self, queue: Queue, job_id: str, outcome: JobOutcome) -> TaskResult:
        raw = outcome.result if outcome.state == "done" else \
            queue.conn.hget(queue.key("job", job_id), jobrow.PAYLOAD)
        if not raw:  # acked keeping no result (none, or an empty one): not one of ours
            raise TaskResultDoesNotExist(job_id)
        call = Call.decode(raw)
        task = import_string(call.task).using(queue_name=queue.name, backend=self.alias)
        workers = [""] * max(outcome.attempts - 1, 0) + [call.ran.get("worker_id", "")]
        result = self._result(
            task, job_id, STATUS_OF_STATE[outcome.state], call.args, call.kwargs,
            enqueued_at=moment(call.enqueued_at), started_at=moment(call.ran.get("started_at")),
            finished_at=moment(call.ran.get("finished_at")),
            worker_ids=workers if outcome.attempts else [],
            errors=[task_error(outcome.error)] if outcome.state == "dead" and outcome.error
            else [])
        object.__setattr__(result, "_return_value", call.ran.get("return_value"))
        return result

    def _result(self, task: Task, job_id: str, status: TaskResultStatus, args: Any,
                kwargs: Any, *, enqueued_at: datetime | None = None,
                started_at: datetime | None = None, finished_at: datetime | None = None,
                worker_ids: list[str] | None = None,
                errors: list[TaskError] | None = None) -> TaskResult:
        return TaskResult(task=task, id=job_id, status=status, enqueued_at=enqueued_at,
                          started_at=started_at, finished_at=finished_at,
                          last_attempted_at=started_at, args=list(args), kwargs=dict(kwargs),
                          backend=self.alias, errors=errors or [],
                          worker_ids=worker_ids or [])


WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


def handler(job: Job) -> Directive:
    """The handler an echomq worker runs for Django tasks: decodes the call, runs the task
    function (``Task.call``: a coroutine function too), and settles: ``Done`` keeping the
    result, ``RetryIn`` with the exception (dead at the backend's ``MAX_ATTEMPTS``), or
    ``Reject`` for a job that can never run (not a call, an unknown task or backend)."""
    if not apps.ready:
        django.setup()
        _log_once()
    try:
        call = Call.decode(job.payload)
        task: Task = import_string(call.task)
        backend: EchoMQBackend = task_backends[call.backend]
    except Exception as exc:
        return Reject(error_text(exc))
    return _run(task, backend, call, job)


def _log_once() -> None:
    """Django's default logging gives the ``django`` logger a console handler of its own (shown
    while DEBUG) and lets it propagate to the root logger, where the worker already writes to
    stderr: every task line would show twice. The worker's handler stays; the ``django``
    logger's own handlers to the terminal go when the root logger writes there already."""
    streams = (sys.stderr, sys.stdout)

    def to_terminal(handler: logging.Handler) -> bool:
        return isinstance(handler, logging.StreamHandler) and handler.stream in streams

    django_log = logging.getLogger("django")
    if django_log.propagate and any(map(to_terminal, logging.getLogger().handlers)):
        for handler in [h for h in django_log.handlers if to_terminal(h)]:
            django_log.removeHandler(handler)


def _run(task: Task, backend: EchoMQBackend, call: Call, job: Job) -> Directive:
    started = timezone.now()
    running = backend._result(task, job.id, TaskResultStatus.RUNNING, call.args, call.kwargs,
                              enqueued_at=moment(call.enqueued_at), started_at=started,
                              worker_ids=[WORKER_ID] * job.attempt)
    task_started.send(type(backend), task_result=running)
    try:
        context = (TaskContext(task_result=running),) if task.takes_context else ()
        value = normalize_json(task.call(*context, *call.args, **call.kwargs))
    except Exception as exc:
        _finished(backend, running, TaskResultStatus.FAILED)
        return RetryIn(backend.retry_delay_ms, error_text(exc), backend.max_attempts)
    _finished(backend, running, TaskResultStatus.SUCCESSFUL)
    call.ran = {"started_at": started.isoformat(), "finished_at": timezone.now().isoformat(),
                "worker_id": WORKER_ID, "return_value": value}
    return Done(call.encode())


def _finished(backend: EchoMQBackend, result: TaskResult, status: TaskResultStatus) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(type(backend), task_result=result)
