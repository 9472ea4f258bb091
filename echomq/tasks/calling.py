"""One call of a task with per-call options (``Task.with_options``): the job id, a delay or a
due time, a lane, a queue, a priority, a deadline (``expires_in``, ``expires_at``), and the jobs
it waits on (``after``: it is admitted waiting, ``Queue.enqueue_after``, and runs once each of
them ended, under ``policy``)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from echomq.engine.deadlines import epoch_ms, seconds_ms
from echomq.engine.errors import ArgumentError
from echomq.engine.graph_calls import checked_policy
from echomq.engine.partial import PartialAdmission
from echomq.queue.ids import new_job_id
from echomq.tasks.batch import batch_of
from echomq.tasks.canvas import TaskSignature
from echomq.tasks.envelope import call_envelope, encode
from echomq.tasks.handle import HandledTask, TaskHandle
from echomq.tasks.signature import Signature
from echomq.tasks.unique import KEYS, resolved
from echomq.tasks.workflow import WorkflowHandle, leaves

if TYPE_CHECKING:
    from echomq.engine.calls import Verdict
    from echomq.queue.blocking import Queue

P = ParamSpec("P")
R = TypeVar("R")


def at_ms(at: datetime.datetime) -> int:
    """An ``at=`` time (an aware datetime) as epoch ms."""
    if at.tzinfo is None:
        raise ValueError("at= takes a timezone-aware datetime (a naive one has no single time)")
    return round(at.timestamp() * 1000)


def expiry_options(expires_in: float | None,
                   expires_at: datetime.datetime | float | None) -> dict[str, int]:
    """``with_options``' deadline as ``TaskCall``'s fields, checked now (ArgumentError for both,
    a negative or non-finite number, a naive datetime): ``expires_in_ms`` is counted from each
    enqueue, ``expires_at_ms`` is epoch ms."""
    if expires_in is not None and expires_at is not None:
        raise ArgumentError("give expires_in or expires_at, not both")
    if expires_in is not None:
        return {"expires_in_ms": seconds_ms("expires_in", expires_in)}
    if expires_at is not None:
        return {"expires_at_ms": epoch_ms("expires_at", expires_at)}
    return {}


class CalledTask(HandledTask, Protocol):
    """What a call reads of its task (an ``echomq.tasks.app.Task``)."""

    @property
    def app(self) -> Any: ...

    @property
    def queue(self) -> str: ...

    @property
    def priority(self) -> int: ...

    @property
    def signature(self) -> Signature: ...


# What ``after=`` takes: a task's handle, a workflow's (waiting on the jobs of its result), or
# a job id of the same queue.
Parent = TaskHandle[Any] | WorkflowHandle | str


def parent_ids(parents: Iterable[Parent], queue: str) -> tuple[str, ...]:
    """The job ids ``after=`` names; ValueError for a handle of another queue (a job waits
    only on jobs of its own queue: the join is a transition of that queue)."""
    ids: list[str] = []
    for parent in parents:
        if isinstance(parent, str):
            ids.append(parent)
            continue
        if parent.queue.name != queue:
            raise ValueError(f"after= names a job of queue {parent.queue.name!r}; a job waits "
                             f"only on jobs of its own queue ({queue!r})")
        ids.extend(leaves(parent.shape) if isinstance(parent, WorkflowHandle) else [parent.id])
    return tuple(ids)


@dataclass(frozen=True)
class TaskCall(Generic[P, R]):
    """A task with per-call options (``Task.with_options``)."""

    task: CalledTask
    job_id: str | None = None
    delay_ms: int = 0
    at_ms: int | None = None
    lane: str | None = None
    queue: str | None = None
    priority: int = 0
    after: tuple[Parent, ...] | None = None
    policy: str = "fail"
    unique: dict[str, Any] | None = None
    expires_in_ms: int | None = None
    expires_at_ms: int | None = None

    def __post_init__(self) -> None:
        checked_policy(self.policy)
        if self.after is not None and (self.delay_ms or self.at_ms is not None or self.lane
                                       or self.unique or self._deadline()):
            raise ValueError("a job with after= runs once its parents ended: give no delay, "
                             "at, lane, dedupe, debounce, throttle or expiry with it")

    def _deadline(self) -> dict[str, int]:
        """The deadline options for ``Queue.enqueue``: none without a deadline."""
        if self.expires_in_ms is not None:
            return {"expires_in_ms": self.expires_in_ms}
        return {} if self.expires_at_ms is None else {"expires_at_ms": self.expires_at_ms}

    def s(self, *args: Any, **kwargs: Any) -> TaskSignature:
        """``Task.s`` with this call's ``job_id`` and ``priority`` (a workflow's jobs go to its
        one queue, at once: ValueError for a delay, a lane or a queue of its own)."""
        return self._signature(args, kwargs, immutable=False)

    def si(self, *args: Any, **kwargs: Any) -> TaskSignature:
        """``Task.si`` with this call's ``job_id`` and ``priority``."""
        return self._signature(args, kwargs, immutable=True)

    def _signature(self, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                   immutable: bool) -> TaskSignature:
        if self.delay_ms or self.at_ms is not None or self.lane or self.queue \
                or self.after is not None or self._deadline():
            raise ValueError("a workflow's task takes job_id and priority only: its jobs go to "
                             "the workflow's queue, each as soon as its parents ended")
        if self.unique:
            modes = ", ".join(f"{mode}=None" for mode in self.unique if mode in KEYS)
            raise ValueError("a workflow's jobs are admitted together, with no dedupe, debounce "
                             f"or throttle: send this task in it as with_options({modes}).s(...)")
        return TaskSignature(self.task, args, kwargs, immutable, self.job_id, self.priority)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """Admit one run of the task with these arguments and this call's options; its handle
        (its verdict WAITING, READY, DEAD or CANCELLED when it names ``after``)."""
        with self._admitting(args, kwargs) as admission:
            verdict: Verdict = admission.sent(admission.queue)
        return admission.handle(self.task, verdict)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle[R]:
        """``enqueue``, awaited, on the App's asyncio client."""
        with self._admitting(args, kwargs) as admission:
            queue = await self.task.app.aqueues.queue_named(admission.queue.name)
            verdict: Verdict = await admission.sent(queue)
        return admission.handle(self.task, verdict)

    def enqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle[R]]:
        """Admit one run of the task per call — a tuple of positional arguments, or the task's
        signature (``task.s(...)``) — in one ``Queue.enqueue_many``; a handle per call, in
        order (``echomq.tasks.batch``). Every call is checked before anything is sent."""
        with batch_of(self, calls) as batch:
            try:
                verdicts: list[Verdict] = batch.sent(batch.queue)
            except PartialAdmission as err:
                raise batch.partial(self.task, err) from err.error
        return batch.handles(self.task, verdicts)

    async def aenqueue_many(self, calls: Iterable[Any]) -> list[TaskHandle[R]]:
        """``enqueue_many``, awaited, on the App's asyncio client."""
        with batch_of(self, calls) as batch:
            queue = await self.task.app.aqueues.queue_named(batch.queue.name)
            try:
                verdicts: list[Verdict] = await batch.sent(queue)
            except PartialAdmission as err:
                raise batch.partial(self.task, err) from err.error
        return batch.handles(self.task, verdicts)

    @contextmanager
    def _admitting(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[Admission[R]]:
        """What one enqueue sends, inside the hooks' ``enqueuing`` block (the caller sends it
        there): the arguments checked against the signature and its type hints, and encoded in
        their envelope."""
        task, app = self.task, self.task.app
        task.signature.check(args, kwargs, from_json=app.serializer == "json")
        queue = app.queue_named(self.queue or task.queue)
        job_id = self.job_id or new_job_id()
        headers: dict[str, str] = {}
        with app.hooks.enqueuing(queue.name, task.name, headers):
            payload = encode(call_envelope(task.name, list(args), kwargs, headers,
                                           id_made=self.job_id is None, queue=queue.name,
                                           own_queue=task.queue),
                             app.serializer)
            after = None if self.after is None else parent_ids(self.after, queue.name)
            yield Admission(queue, job_id, payload,
                            {"lane": self.lane, "priority": self.priority, **self._timing(),
                             **self._deadline(), **resolved(self.unique or {}, args, kwargs)},
                            after, self.policy)

    def _timing(self) -> dict[str, int]:
        """The delay options for ``Queue.enqueue``: none at all for a job due now."""
        if self.at_ms is not None:
            return {"at_ms": self.at_ms}
        return {"delay_ms": self.delay_ms} if self.delay_ms else {}


@dataclass(frozen=True)
class Admission(Generic[R]):
    """One enqueue, ready to send: the queue (of the App's blocking ones, by whose name the
    asyncio one is found), the job id, the encoded envelope, ``Queue.enqueue``'s options, and
    the jobs it waits on with its policy (``after``: None for none)."""

    queue: Queue
    job_id: str
    payload: bytes
    options: dict[str, Any]
    after: tuple[str, ...] | None = None
    policy: str = "fail"

    def sent(self, queue: Any) -> Any:
        """The admission sent on ``queue`` (a blocking Queue: its verdict; an asyncio one: the
        awaitable of it)."""
        if self.after is None:
            return queue.enqueue(self.job_id, self.payload, **self.options)
        return queue.enqueue_after(self.job_id, self.payload, after=self.after,
                                   policy=self.policy, priority=self.options["priority"])

    def handle(self, task: HandledTask, verdict: Verdict) -> TaskHandle[R]:
        return TaskHandle(self.job_id, self.queue, task, verdict)
