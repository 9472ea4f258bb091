"""Workflows: task signatures and the canvas — ``chain``, ``group`` and ``chord``.

``task.s(*args, **kwargs)`` is one call of a task, not yet sent; ``task.si(...)`` one that ignores
its parent's result. ``chain(a, b, c)`` runs each after the one before, passing its result as the
next one's first argument; ``group(a, b)`` runs its members side by side (its result: theirs, in
order); ``chord(header, body)`` runs ``body`` once with the header's results in the header's
order. They nest: a chain of chords, a chord in a group, a group in a chain (a group followed by
a task is a chord).

``.enqueue()`` admits a whole workflow (``echomq.tasks.workflow``): in one transaction, or staged
in short steps when it is big (``echomq.queue.graphs``). Every job of a workflow goes to one
queue (its first task's, or ``enqueue(queue=...)``): the join is a transition of that queue. A
job with parents waits (``Queue.enqueue_after``) and the settle of its last parent moves it to
pending in the same atomic step, on both executors, so a callback runs once however workers
crash or race, and nothing polls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from echomq.engine.graph_calls import POLICIES, checked_policy
from echomq.engine.native import checked_priority
from echomq.tasks.workflow import Parents, Plan, WorkflowHandle, aadmit, admit, leaves

# How deep chains, groups and chords may nest inside one another: planning a workflow recurses
# through its nodes, and so does giving a job its parents' results.
MAX_DEPTH = 64


class Workflow(ABC):
    """What every node of a canvas does: plan its jobs, ``enqueue`` (and ``aenqueue``) them.
    ``depth``: how many chains, groups and chords nest down to its deepest signature (0 for a
    signature), at most ``MAX_DEPTH``."""

    depth: int = 0

    @abstractmethod
    def planned(self, plan: Plan, parents: Parents | None, after: tuple[str, ...],
                policy: str) -> Parents:
        """Plan this node's jobs as waiting on ``after`` and given ``parents``; the shape of
        its result."""

    def enqueue(self, *, queue: str | None = None,
                workflow_id: str | None = None) -> WorkflowHandle:
        """Admit this workflow (``Queue.enqueue_graph``: one transaction, or staged in short
        steps); its handle (``result()`` waits for it). ``workflow_id`` (``[A-Za-z0-9._:-]``):
        the jobs not given ids of their own are ``JOB:<workflow_id>.<n>``, so enqueueing the
        same workflow again with it finishes an admission whose process died between steps
        (and is DUPLICATE for every job once it was whole)."""
        return admit(self, queue, workflow_id)

    async def aenqueue(self, *, queue: str | None = None,
                       workflow_id: str | None = None) -> WorkflowHandle:
        """``enqueue``, awaited on the App's asyncio client."""
        return await aadmit(self, queue, workflow_id)


@dataclass(frozen=True)
class TaskSignature(Workflow):
    """One call of a task, not yet sent: ``task.s(...)`` (given its parent's result first) or
    ``task.si(...)`` (``immutable``: its arguments as given). ``job_id`` and ``priority`` as
    ``Task.with_options`` takes them (``set`` returns a copy with them)."""

    task: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    immutable: bool = False
    job_id: str | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        checked_priority(self.priority)

    def set(self, *, job_id: str | None = None, priority: int | None = None) -> TaskSignature:
        return TaskSignature(self.task, self.args, self.kwargs, self.immutable,
                             self.job_id if job_id is None else job_id,
                             self.priority if priority is None else priority)

    def planned(self, plan: Plan, parents: Parents | None, after: tuple[str, ...],
                policy: str) -> Parents:
        return plan.leaf(self, parents, after, policy)


@dataclass(frozen=True)
class Chain(Workflow):
    """Each node after the one before, given its result first (``chain``)."""

    nodes: tuple[Workflow, ...]
    policy: str | None = None
    depth: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _nested(self, self.nodes)

    def planned(self, plan: Plan, parents: Parents | None, after: tuple[str, ...],
                policy: str) -> Parents:
        return _in_turn(self.nodes, plan, parents, after, self.policy or policy)


@dataclass(frozen=True)
class Group(Workflow):
    """Its nodes side by side; its result is theirs, in order (``group``)."""

    nodes: tuple[Workflow, ...]
    policy: str | None = None
    depth: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _nested(self, self.nodes)

    def planned(self, plan: Plan, parents: Parents | None, after: tuple[str, ...],
                policy: str) -> Parents:
        own = self.policy or policy
        return [node.planned(plan, parents, after, own) for node in self.nodes]


@dataclass(frozen=True)
class Chord(Workflow):
    """``body`` once every node of ``header`` ended, given their results (``chord``)."""

    header: Group
    body: Workflow
    policy: str | None = None
    depth: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _nested(self, (self.header, self.body))

    def planned(self, plan: Plan, parents: Parents | None, after: tuple[str, ...],
                policy: str) -> Parents:
        return _in_turn((self.header, self.body), plan, parents, after, self.policy or policy)


def _nested(node: Workflow, inside: Sequence[Workflow]) -> None:
    """Sets ``node``'s depth, one more than its deepest node's; ValueError past MAX_DEPTH."""
    depth = 1 + max((each.depth for each in inside), default=0)
    if depth > MAX_DEPTH:
        raise ValueError(f"a workflow nests chains, groups and chords at most {MAX_DEPTH} deep; "
                         f"this one would nest {depth} deep")
    object.__setattr__(node, "depth", depth)


def _in_turn(nodes: Sequence[Workflow], plan: Plan, parents: Parents | None,
             after: tuple[str, ...], policy: str) -> Parents:
    """Plan ``nodes`` one after another, each waiting on the jobs of the one before."""
    shape = parents
    for node in nodes:
        shape = node.planned(plan, shape, after, policy)
        after = tuple(leaves(shape))
    assert shape is not None  # a chain and a chord have a node at least
    return shape


Node: TypeAlias = Workflow


def chain(*nodes: Workflow | Iterable[Workflow], policy: str | None = None) -> Chain:
    """``nodes`` one after another, each given the result of the one before as its first
    argument (a ``si`` signature is given none). ``policy``: what a dead job does to the jobs
    waiting on it — "fail" (the default: they go dead with its error), "ignore" (they run, its
    result None) or "continue" (they run at once, without waiting for the rest)."""
    return Chain(_nodes(nodes, "chain"), _policy(policy))


def group(*nodes: Workflow | Iterable[Workflow], policy: str | None = None) -> Group:
    """``nodes`` side by side; the group's result is the list of theirs, in order."""
    return Group(_nodes(nodes, "group"), _policy(policy))


def chord(header: Group | Iterable[Workflow], body: Workflow, *,
          policy: str | None = None) -> Chord:
    """``body`` run once with the list of ``header``'s results, in the header's order, after
    every one of them ended (``policy``: see ``chain``)."""
    members = header if isinstance(header, Group) else group(*header)
    if not isinstance(body, Workflow):
        raise TypeError(f"a chord's body is a signature (task.s(...)) or a workflow, not "
                        f"{body!r}")
    return Chord(members, body, _policy(policy))


def _nodes(given: Sequence[Workflow | Iterable[Workflow]], what: str) -> tuple[Workflow, ...]:
    """The nodes as given, or the one iterable given (``group(t.s(i) for i in ...)``); at
    least one."""
    items: Sequence[Any] = given
    if len(given) == 1 and not isinstance(given[0], Workflow):
        items = tuple(given[0])
    for node in items:
        if not isinstance(node, Workflow):
            raise TypeError(f"a {what} takes signatures (task.s(...)) and workflows, not "
                            f"{node!r}")
    if not items:
        raise ValueError(f"a {what} needs at least one signature")
    return tuple(items)


def _policy(policy: str | None) -> str | None:
    return None if policy is None else checked_policy(policy)


__all__ = ["MAX_DEPTH", "POLICIES", "Chain", "Chord", "Group", "Node", "TaskSignature", "Workflow",
           "chain", "chord", "group"]
