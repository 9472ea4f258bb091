"""``TaskHandle``: what ``enqueue`` (or ``aenqueue``) returns, and ``App.handle`` makes again from
a job id — the job's id, and a way to wait for its result, from blocking code (``result``) or
asyncio code (``aresult``: the same call, awaited on the App's asyncio client,
``echomq.tasks.twins``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from echomq.engine.errors import EchoMQError, ResultDropped, TaskFailed
from echomq.tasks.envelope import UNKEPT_RESULT, decode_result, is_json
from echomq.tasks.reporting import decoded_progress
from echomq.tasks.signature import Signature

if TYPE_CHECKING:
    from echomq.queue import aio
    from echomq.queue.blocking import JobOutcome, Queue, Verdict
    from echomq.tasks.twins import AsyncQueues

R = TypeVar("R")

WAITING = frozenset({"pending", "delayed", "active", "waiting"})


class Cancelled(EchoMQError):
    """A task's job was cancelled (``Queue.cancel``, ``TaskHandle.cancel``): it ran no further
    and has no result."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"{job_id} was cancelled")
        self.job_id = job_id


class UnknownJob(EchoMQError, LookupError):
    """No job ``job_id`` on ``queue``: never admitted there, or its tombstone expired."""

    def __init__(self, job_id: str, queue: str) -> None:
        super().__init__(f"no job {job_id} on queue {queue}: never admitted, or its tombstone "
                         "expired")
        self.job_id, self.queue = job_id, queue


class HandledTask(Protocol):
    """What a handle reads of the task it ran (an ``echomq.tasks.app.Task``)."""

    @property
    def name(self) -> str: ...

    @property
    def signature(self) -> Signature: ...

    @property
    def aqueues(self) -> AsyncQueues: ...


class TaskHandle(Generic[R]):
    """One enqueued run of a task: ``id`` (its job id), ``verdict`` (ENQUEUED, or DUPLICATE
    when that id was admitted before; None for a handle ``App.handle`` made from an id),
    ``queue`` (the Queue it went to). Each call has an asyncio twin of the same name prefixed
    ``a`` (``aresult``, ``aoutcome``, ``acancel``, ``aprogress``), with the same semantics, for
    code running on an event loop."""

    def __init__(self, job_id: str, queue: Queue, task: HandledTask,
                 verdict: Verdict | None) -> None:
        self.id = job_id
        self.queue = queue
        self.task = task
        self.verdict = verdict

    def __repr__(self) -> str:
        said = "" if self.verdict is None else f": {self.verdict.value}"
        return f"<TaskHandle {self.id} on {self.queue.name}{said}>"

    def outcome(self) -> JobOutcome:
        """Where the job is now (``Queue.outcome``)."""
        return self.queue.outcome(self.id)

    def cancel(self) -> Verdict:
        """Cancel the job (``Queue.cancel``): CANCELLED when it will never run (again),
        CANCELLING when its handler runs now and is told, DONE or DEAD when it already ended
        so (nothing changes), UNKNOWN when there is no such job."""
        return self.queue.cancel(self.id)

    def result(self, timeout: float | None = None) -> R | None:
        """The task's return value once the job is done, waiting up to ``timeout`` seconds
        (None: as long as it takes) without polling — ``Queue.wait`` blocks on the server.
        TaskFailed, with the job's last error, when it is dead; Cancelled when it was
        cancelled; ResultDropped (``reason`` "memory") when it is done but its ack ran on a
        server over its maxmemory, which kept the outcome without the result; TimeoutError
        when it is not done in time; UnknownJob (a LookupError) when there is no such job (never
        admitted, or its tombstone expired). A task declared with
        ``keep_result=False`` is waited for the same way, and gives None once done."""
        return self._settled(self.queue.wait(self.id, _wait_s(timeout)), timeout)

    async def aresult(self, timeout: float | None = None) -> R | None:
        """``result``, awaited: the wait blocks the server's side, never the event loop."""
        queue = await self._aqueue()
        return self._settled(await queue.wait(self.id, _wait_s(timeout)), timeout)

    async def aoutcome(self) -> JobOutcome:
        """``outcome``, awaited."""
        return await (await self._aqueue()).outcome(self.id)

    async def acancel(self) -> Verdict:
        """``cancel``, awaited."""
        return await (await self._aqueue()).cancel(self.id)

    async def aprogress(self) -> Any:
        """``progress``, awaited."""
        return decoded_progress((await self.aoutcome()).progress)

    def progress(self) -> Any:
        """The value the task last reported with ``echomq.progress`` (decoded as a result is),
        while it runs and after it is done (for the retention); None when it reported none."""
        return decoded_progress(self.queue.outcome(self.id).progress)

    async def _aqueue(self) -> aio.Queue:
        return await self.task.aqueues.queue_named(self.queue.name)

    def _settled(self, outcome: JobOutcome, timeout: float | None) -> R | None:
        """The value of a job whose wait ended at ``outcome``, or what it raises instead."""
        if outcome.state == "done" and outcome.dropped is not None:
            raise ResultDropped(self.id, outcome.dropped)
        if outcome.state == "done":
            return self._value(outcome.result)
        if outcome.state == "dead":
            raise TaskFailed(self.id, outcome.error or "", outcome.attempts)
        if outcome.state == "cancelled":
            raise Cancelled(self.id)
        if outcome.state in WAITING:
            raise TimeoutError(f"{self.id} is still {outcome.state} after {timeout} s")
        raise UnknownJob(self.id, self.queue.name)

    def _value(self, kept: bytes | None) -> R | None:
        if kept is None or kept == UNKEPT_RESULT:  # acked keeping no result
            return None
        value: Any = decode_result(kept).value
        converted: R = self.task.signature.converted_result(value, from_json=is_json(kept))
        return converted


class AnyTask:
    """The task of a handle made from a job id alone (``App.handle`` given no task): its
    result is given as decoded, with no return hint to convert it to."""

    name = "<any>"
    signature = Signature(lambda: None)

    def __init__(self, aqueues: AsyncQueues) -> None:
        self.aqueues = aqueues


def known_handle(job_id: str, queue: Queue, task: HandledTask,
                 outcome: JobOutcome) -> TaskHandle[Any]:
    """The handle of ``job_id`` on ``queue``, whose outcome is ``outcome``: UnknownJob when it
    has no row there."""
    if outcome.state == "unknown":
        raise UnknownJob(job_id, queue.name)
    return TaskHandle(job_id, queue, task, None)


def _wait_s(timeout: float | None) -> float:
    """A ``result`` timeout as ``Queue.wait`` takes it (None: as long as it takes)."""
    return math.inf if timeout is None else timeout
