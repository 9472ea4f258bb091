"""A batch of calls of one task (``task.enqueue_many``, ``aenqueue_many``): every call checked
against the task's signature and encoded in its envelope, then all of them sent as one
``Queue.enqueue_many`` — one command per 10,000 jobs on the wire — and a handle per call.

A call is a tuple (or list) of positional arguments, ``add.enqueue_many([(1, 2), (3, 4)])`` as
RQ's ``enqueue_many`` or Celery's ``chunks``/``starmap`` take them, or the task's signature,
``add.s(1, y=2)`` (keyword arguments, and ``.set(job_id=..., priority=...)`` per call). The
per-call options of ``with_options`` that apply to every job of a batch: ``lane``, ``queue``,
``priority`` and ``delay_ms``.

A batch refused after some of its commands were admitted raises PartialAdmission with a handle
per call admitted and the other calls, as signatures with the job ids they were given: sent
again (on the same ``with_options``), each call is admitted once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from echomq.engine.partial import PartialAdmission, partial_admission
from echomq.queue.ids import new_job_id
from echomq.tasks.canvas import TaskSignature
from echomq.tasks.envelope import call_envelope, encode
from echomq.tasks.handle import HandledTask, TaskHandle

if TYPE_CHECKING:
    from echomq.engine.calls import Item, Verdict
    from echomq.queue.blocking import Queue

R = TypeVar("R")


class BatchOptions(Protocol):
    """What a batch reads of its call (an ``echomq.tasks.calling.TaskCall``)."""

    @property
    def task(self) -> Any: ...

    @property
    def job_id(self) -> str | None: ...

    @property
    def delay_ms(self) -> int: ...

    @property
    def at_ms(self) -> int | None: ...

    @property
    def lane(self) -> str | None: ...

    @property
    def queue(self) -> str | None: ...

    @property
    def priority(self) -> int: ...

    @property
    def after(self) -> tuple[Any, ...] | None: ...

    @property
    def unique(self) -> dict[str, Any] | None: ...

    @property
    def expires_in_ms(self) -> int | None: ...

    @property
    def expires_at_ms(self) -> int | None: ...


@dataclass(frozen=True)
class Batch(Generic[R]):
    """The jobs of a batch, ready to send: the queue (of the App's blocking ones, by whose name
    the asyncio one is found), ``Queue.enqueue_many``'s items and its delay."""

    queue: Queue
    items: list[Item]
    delay_ms: int
    calls: list[TaskSignature]  # each call as the task's signature with the job id it was given

    def sent(self, queue: Any) -> Any:
        """The batch sent on ``queue`` (a blocking Queue: its verdicts; an asyncio one: the
        awaitable of them)."""
        return queue.enqueue_many(self.items, delay_ms=self.delay_ms)

    def handles(self, task: HandledTask, verdicts: list[Verdict]) -> list[TaskHandle[R]]:
        return [TaskHandle(item[0], self.queue, task, verdict)
                for item, verdict in zip(self.items, verdicts, strict=True)]

    def partial(self, task: HandledTask, err: PartialAdmission) -> PartialAdmission:
        """The queue's PartialAdmission told of the calls: a handle per call admitted (None for
        the others), and the others as signatures with their job ids, so that sending them
        again admits each call once."""
        handles: list[TaskHandle[R] | None] = [
            None if verdict is None else TaskHandle(item[0], self.queue, task, verdict)
            for item, verdict in zip(self.items, err.verdicts, strict=True)]
        remaining = [call for call, verdict in zip(self.calls, err.verdicts, strict=True)
                     if verdict is None]
        return partial_admission(err, err.verdicts, remaining, handles)


def _refused(options: BatchOptions) -> str | None:
    """Why ``options`` cannot send a batch: a per-job option, or one of a single enqueue."""
    if options.job_id is not None:
        return "job_id= names one job: give each call its own, task.s(...).set(job_id=...)"
    if options.at_ms is not None or options.after is not None or options.unique \
            or options.expires_in_ms is not None or options.expires_at_ms is not None:
        return ("at=, after=, dedupe, debounce, throttle, expires_in and expires_at take one "
                "enqueue at a time: enqueue_many takes lane, queue, priority and delay_ms")
    return None


def _parts(task: Any, call: Any, priority: int) -> tuple[tuple[Any, ...], dict[str, Any],
                                                         str, int]:
    """A call's arguments, job id and priority: a tuple or list of positional arguments, or a
    signature of ``task``."""
    if isinstance(call, TaskSignature):
        if call.task is not task:
            raise ValueError(f"enqueue_many of {task.name} was given a call of {call.task.name}")
        return call.args, call.kwargs, call.job_id or new_job_id(), call.priority
    if isinstance(call, tuple | list):
        return tuple(call), {}, new_job_id(), priority
    raise TypeError("enqueue_many takes calls as tuples of positional arguments or as the "
                    f"task's signatures (task.s(...)), not {type(call).__name__}")


@contextmanager
def batch_of(options: BatchOptions, calls: Iterable[Any]) -> Iterator[Batch[Any]]:
    """The batch ``calls`` make, inside each call's hooks' ``enqueuing`` block (the caller
    sends it there). ValueError or TypeError, before anything is sent, for a call that does
    not fit."""
    refused = _refused(options)
    if refused is not None:
        raise ValueError(refused)
    task, app = options.task, options.task.app
    queue = app.queue_named(options.queue or task.queue)
    with ExitStack() as hooks:
        items: list[Item] = []
        signatures: list[TaskSignature] = []
        for call in calls:
            args, kwargs, job_id, priority = _parts(task, call, options.priority)
            id_made = not isinstance(call, TaskSignature) or call.job_id is None
            task.signature.check(args, kwargs, from_json=app.serializer == "json")
            headers: dict[str, str] = {}
            if app.observed:
                hooks.enter_context(app.hooks.enqueuing(queue.name, task.name, headers))
            payload = encode(call_envelope(task.name, list(args), kwargs, headers,
                                           id_made=id_made, queue=queue.name,
                                           own_queue=task.queue), app.serializer)
            items.append((job_id, payload, options.lane, priority))
            signatures.append(TaskSignature(task, args, kwargs, _immutable(call), job_id,
                                            priority))
        yield Batch(queue, items, options.delay_ms, signatures)


def _immutable(call: Any) -> bool:
    return isinstance(call, TaskSignature) and call.immutable
