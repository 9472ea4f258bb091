"""Workflows on the task layer: a canvas (``echomq.tasks.canvas``) planned as the jobs it admits
and admitted by ``Queue.enqueue_graph`` (one transaction, or staged in short steps); the handle
that waits for its result; and, on the worker's side, the parents' results a job of a workflow
is given.

A workflow's result has a shape (``Parents``): a job id (a task's, a chain's last, a chord's
body) or a list of shapes (a group's members, in order). A job given its parents' results
carries that shape in its envelope; the worker reads the results of its ids in pages
(``Queue.results``) and rebuilds the shape with the values in place of the ids.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import msgspec

from echomq.engine.calls import Verdict
from echomq.engine.errors import ResultDropped
from echomq.engine.native import checked_id
from echomq.queue.graphs import GraphJob
from echomq.queue.ids import new_job_id
from echomq.queue.results import Kept
from echomq.tasks.envelope import (
    UNKEPT_RESULT,
    Envelope,
    call_envelope,
    decode_result,
    encode,
)
from echomq.tasks.handle import TaskHandle

if TYPE_CHECKING:
    from echomq.queue.blocking import Queue

Parents: TypeAlias = "str | list[Parents]"


class Leaf(Protocol):
    """What a plan reads of one task call (``echomq.tasks.canvas.TaskSignature``)."""

    @property
    def task(self) -> Any: ...

    @property
    def args(self) -> tuple[Any, ...]: ...

    @property
    def kwargs(self) -> dict[str, Any]: ...

    @property
    def immutable(self) -> bool: ...

    @property
    def job_id(self) -> str | None: ...

    @property
    def priority(self) -> int: ...


class PlanNode(Protocol):
    """A node of a canvas: it plans its jobs into a ``Plan``."""

    def planned(self, plan: Plan, parents: Parents | None, after: tuple[str, ...],
                policy: str) -> Parents: ...


@dataclass(frozen=True)
class Planned:
    """One job of a workflow: its call, its id, the ids it waits on (``after``; none: it is
    admitted pending), the shape of the results it is given first (``parents``; None: none)
    and what a dead parent does to it (``policy``)."""

    leaf: Leaf
    job_id: str
    after: tuple[str, ...] = ()
    parents: Parents | None = None
    policy: str = "fail"


@dataclass
class Plan:
    """The jobs a workflow admits, each after every job it waits on; ``workflow_id``: each job
    not given an id of its own is ``JOB:<workflow_id>.<n>``, ``n`` its place in the plan (so the
    same workflow planned again has the same ids), else a fresh id."""

    jobs: list[Planned] = field(default_factory=list)
    workflow_id: str | None = None

    def leaf(self, leaf: Leaf, parents: Parents | None, after: tuple[str, ...],
             policy: str) -> str:
        """Plan one task call waiting on ``after``; its job id."""
        job_id = leaf.job_id or self._next_id()
        self.jobs.append(Planned(leaf, job_id, after, None if leaf.immutable else parents,
                                 policy))
        return job_id


    def _next_id(self) -> str:
        if self.workflow_id is None:
            return new_job_id()
        return checked_id(f"JOB:{self.workflow_id}.{len(self.jobs)}")


def planned(node: PlanNode, workflow_id: str | None = None) -> tuple[Plan, Parents]:
    """The jobs ``node`` admits, and the shape of its result."""
    plan = Plan(workflow_id=workflow_id)
    return plan, node.planned(plan, None, (), "fail")


def leaves(shape: Parents | None) -> Iterator[str]:
    """The job ids of a result's shape, depth first, in order."""
    if shape is None:
        return
    if isinstance(shape, str):
        yield shape
        return
    for part in shape:
        yield from leaves(part)


# admission --------------------------------------------------------------------------------------

def admit(node: PlanNode, queue: str | None, workflow_id: str | None = None) -> WorkflowHandle:
    """Admit the workflow ``node`` (``Queue.enqueue_graph``); its handle."""
    plan, shape = planned(node, workflow_id)
    target, jobs = _graph(plan, queue)
    verdicts = target.enqueue_graph(jobs)
    return WorkflowHandle(shape, target, plan, verdicts)


async def aadmit(node: PlanNode, queue: str | None,
                 workflow_id: str | None = None) -> WorkflowHandle:
    """``admit``, awaited on the App's asyncio client."""
    plan, shape = planned(node, workflow_id)
    target, jobs = _graph(plan, queue)
    app = plan.jobs[0].leaf.task.app
    verdicts = await (await app.aqueues.queue_named(target.name)).enqueue_graph(jobs)
    return WorkflowHandle(shape, target, plan, verdicts)


def _graph(plan: Plan, queue: str | None) -> tuple[Queue, list[GraphJob]]:
    """The queue a plan goes to (``queue``, or its first task's) and its jobs, each checked
    against its task's signature and encoded in its envelope."""
    first = plan.jobs[0].leaf.task
    app = first.app
    target: Queue = app.queue_named(queue or first.queue)
    jobs = []
    for job in plan.jobs:
        task = job.leaf.task
        if task.app is not app:
            raise ValueError(f"every task of a workflow belongs to one App: {task.name} does not")
        given = (None,) if job.parents is not None else ()
        task.signature.bind((*given, *job.leaf.args), job.leaf.kwargs)
        id_made = job.leaf.job_id is None and plan.workflow_id is None  # new_job_id's
        jobs.append(GraphJob(job.job_id, _payload(app, target, job, id_made), job.after,
                             job.policy, job.leaf.priority))
    return target, jobs


def _payload(app: Any, queue: Queue, job: Planned, id_made: bool) -> bytes:
    task = job.leaf.task
    headers: dict[str, str] = {}
    with app.hooks.enqueuing(queue.name, task.name, headers):
        return encode(call_envelope(task.name, list(job.leaf.args), job.leaf.kwargs, headers,
                                    id_made=id_made, queue=queue.name,
                                    own_queue=task.queue, parents=job.parents),
                      app.serializer)


class WorkflowHandle:
    """An enqueued workflow: ``ids`` (every job it admitted, each after those it waits on),
    ``verdicts`` (each one's, by id: ENQUEUED, WAITING, READY, DEAD, CANCELLED or DUPLICATE),
    ``shape`` (its result's: the id of the job whose result it is, or a list of shapes for a
    group) and ``queue``; ``result`` waits for it as a task's handle does."""

    def __init__(self, shape: Parents, queue: Queue, plan: Plan,
                 verdicts: Sequence[Verdict]) -> None:
        self.shape = shape
        self.queue = queue
        self.ids = [job.job_id for job in plan.jobs]
        self.verdicts = dict(zip(self.ids, verdicts, strict=True))
        self._tasks = {job.job_id: job.leaf.task for job in plan.jobs}

    def __repr__(self) -> str:
        return f"<WorkflowHandle of {len(self.ids)} jobs on {self.queue.name}: {self.shape!r}>"

    @property
    def id(self) -> str | None:
        """The id of the job whose result is the workflow's (None for a group)."""
        return self.shape if isinstance(self.shape, str) else None

    def handle(self, job_id: str) -> TaskHandle[Any]:
        """The handle of one of the workflow's jobs."""
        return TaskHandle(job_id, self.queue, self._tasks[job_id], self.verdicts[job_id])

    def result(self, timeout: float | None = None) -> Any:
        """The workflow's result once it ended, waiting up to ``timeout`` seconds in all
        (None: as long as it takes): the value of its last job, or a list for a group. Raises
        what a task's ``result`` raises for the first job that did not succeed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._resolved(self.shape, lambda job, left: self.handle(job).result(left),
                              deadline)

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result``, awaited."""
        deadline = None if timeout is None else time.monotonic() + timeout
        values = {}
        for job in leaves(self.shape):
            values[job] = await self.handle(job).aresult(_left(deadline))
        return _filled(self.shape, values)

    def _resolved(self, shape: Parents, wait: Any, deadline: float | None) -> Any:
        values = {job: wait(job, _left(deadline)) for job in leaves(shape)}
        return _filled(shape, values)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _filled(shape: Parents, values: dict[str, Any]) -> Any:
    """``shape`` with each job id replaced by its value."""
    if isinstance(shape, str):
        return values[shape]
    return [_filled(part, values) for part in shape]


# the worker's side ------------------------------------------------------------------------------

def parent_ids(envelope: Envelope) -> list[str]:
    """The jobs whose results ``envelope``'s job is given first (none for most jobs)."""
    return list(leaves(envelope.parents))


class ParentResultDropped(ResultDropped):
    """A job is given its parents' results, and one of them was dropped (``job_id``, the
    parent; ``reason``): the job goes dead, since no retry can bring the result back."""

    def __str__(self) -> str:
        return f"parent {super().__str__()}"


def given_parents(envelope: Envelope, kept: Sequence[Kept]) -> Envelope:
    """``envelope`` with its parents' results (``kept``, as ``Queue.kept_results`` read them
    for ``parent_ids``) first among its arguments, in the shape its parents have; a result not
    kept (a parent ignored when dead, or acked keeping none) is None. ParentResultDropped
    (naming the parent and why) when a parent's result was dropped: its value is lost, so the
    job cannot run as asked, now or at any retry."""
    values = {}
    for job, (result, dropped) in zip(parent_ids(envelope), kept, strict=True):
        if dropped is not None:
            raise ParentResultDropped(job, dropped)
        values[job] = _value(result)
    given = _filled(envelope.parents, values)
    return msgspec.structs.replace(envelope, args=[given, *envelope.args], parents=None)


def _value(kept: bytes | None) -> Any:
    if kept is None or kept == UNKEPT_RESULT:
        return None
    return decode_result(kept).value
