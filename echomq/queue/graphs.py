"""Admitting jobs that wait for others, for both Queues (mixed in): ``enqueue_after`` and
``enqueue_graph`` are one program each, run by the blocking Queue and awaited by the asyncio one.

A job with parents is admitted waiting (``ENQUEUE_AFTER``: in ``<base>waiting``, never claimed)
and its parents are named by ``AFTER`` calls of at most ``PARENTS_PAGE`` ids each, the last one
sealing it: from then on the settle of its last parent moves it to pending in the same atomic
step (docs/PROTOCOL.md "Dependencies"). A whole graph — the jobs a workflow admits, each after
the ones it waits on — goes as one transaction, so no worker ever sees half of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from echomq.engine import graph_calls
from echomq.engine.calls import Call, Payload, QueueCalls, Verdict
from echomq.engine.execution import ExecutorMethods
from echomq.engine.graph_calls import checked_policy
from echomq.engine.program import Program, op

# The parents one AFTER call names.
PARENTS_PAGE = 1000
# The verdicts that say a waiting job moved on (or never waited) before its last AFTER call.
_MOVED = frozenset({Verdict.READY, Verdict.DEAD, Verdict.CANCELLED})


@dataclass(frozen=True)
class GraphJob:
    """One job of a graph: admitted pending when ``after`` is empty, else waiting until each
    of ``after`` (job ids of the same queue) ended, under ``policy``; at ``priority``."""

    job_id: str
    payload: Payload
    after: Sequence[str] = ()
    policy: str = "fail"
    priority: int = 0


def calls_of_graph(calls: QueueCalls, jobs: Iterable[GraphJob],
                   now: int | None) -> tuple[list[Call], list[int]]:
    """The calls that admit ``jobs`` in order, and how many of them each job takes."""
    made: list[Call] = []
    counts: list[int] = []
    for job in jobs:
        start = len(made)
        if not job.after:
            made.append(calls.enqueue(job.job_id, job.payload, None, now,
                                      priority=job.priority))
        else:
            made.append(graph_calls.enqueue_after(calls, job.job_id, job.payload, now,
                                                  job.policy, job.priority))
            pages = [job.after[at:at + PARENTS_PAGE]
                     for at in range(0, len(job.after), PARENTS_PAGE)]
            made.extend(graph_calls.after(calls, job.job_id, now, n == len(pages) - 1, page)
                        for n, page in enumerate(pages))
        counts.append(len(made) - start)
    return made, counts


def graph_verdict(replies: Sequence[Any]) -> Verdict:
    """A job's verdict from the replies to its calls: ENQUEUED or DUPLICATE for a job with no
    parents; for one with parents, DUPLICATE when its id was taken, else where its AFTER calls
    left it: WAITING, or READY, DEAD or CANCELLED when a parent's state moved it on."""
    first = Verdict.of(replies[0])
    if len(replies) == 1 or first is Verdict.DUPLICATE:
        return first
    for reply in replies[1:]:
        verdict = Verdict.of(reply)
        if verdict in _MOVED:
            return verdict
    return Verdict.WAITING


class GraphAdmissions:
    """``enqueue_after`` and ``enqueue_graph`` for both Queues: written once, as programs."""

    conn: Any
    calls: QueueCalls
    executor: ExecutorMethods

    @op
    def enqueue_after(self, job_id: str, payload: Payload, *, after: Sequence[str],
                      policy: str = "fail", priority: int = 0,
                      now: int | None = None) -> Program[Verdict]:
        """Admit a job that runs once every job of ``after`` ended: WAITING (in the waiting set,
        never claimed, until the settle of its last parent moves it to pending), READY (each
        parent had ended already), DEAD or CANCELLED (a parent had died under ``policy``
        "fail", or was cancelled), or DUPLICATE when its id was taken. ``policy``: what a dead
        parent does to it — "fail" (it goes dead with the parent's error), "ignore" (the parent
        counts as ended) or "continue" (it runs at once). A parent with no row (never admitted,
        or its tombstone gone) counts as ended. One transaction, however many parents."""
        verdicts = yield from GraphAdmissions.enqueue_graph.program(
            self, [GraphJob(job_id, payload, tuple(after), checked_policy(policy), priority)],
            now=now)
        return verdicts[0]

    @op
    def enqueue_graph(self, jobs: Sequence[GraphJob], *,
                      now: int | None = None) -> Program[list[Verdict]]:
        """Admit ``jobs`` — each after the jobs it waits on, which come earlier in the list or
        are already admitted — in one transaction; a verdict each, as ``enqueue_after`` gives
        (ENQUEUED or DUPLICATE for a job with no parents)."""
        for job in jobs:
            checked_policy(job.policy)
        calls, counts = calls_of_graph(self.calls, jobs, now)
        replies = yield from ExecutorMethods.call_atomic.program(self.executor, self.conn, calls)
        verdicts, at = [], 0
        for count in counts:
            verdicts.append(graph_verdict(replies[at:at + count]))
            at += count
        return verdicts
