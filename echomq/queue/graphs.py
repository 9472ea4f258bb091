"""Admitting jobs that wait for others, for both Queues (mixed in): ``enqueue_after`` and
``enqueue_graph`` are one program each, run by the blocking Queue and awaited by the asyncio one.

A job with parents is admitted waiting (``ENQUEUE_AFTER``: in ``<base>waiting``, never claimed)
and its parents are named by ``AFTER`` calls of at most ``PARENTS_PAGE`` ids each; a last
``AFTER`` seals it: from then on the settle of its last parent moves it to pending in the same
atomic step (docs/PROTOCOL.md "Dependencies").

A graph is admitted in two phases (docs/PROTOCOL.md "Staged admission"): first every job is
admitted waiting and open — its parentless ones too — and its parents are registered unsealed,
in the graph's order; then every job with parents is sealed, last first, and every parentless
one, first to last, released by its seal. A graph whose calls weigh at most ``STEP_WEIGHT``
goes as one transaction, so no worker ever sees half of it; a bigger one is **staged**, each
phase in transactions of at most that weight, so that no step holds the server long. Nothing of
the graph runs before its parentless jobs are sealed, by then every job with parents is sealed,
and no job is sealed before all of its parents are registered; a transaction that meets a
script the server lost runs none of its seals early (a seal of a job whose own admission failed
finds nothing to seal). The staging is idempotent: a client that died between steps leaves
jobs waiting and open (nothing of them runs), and the same admission sent again — the same
ids — finishes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from echomq.engine import graph_calls
from echomq.engine.calls import Call, Payload, QueueCalls, Verdict
from echomq.engine.execution import ExecutorMethods
from echomq.engine.graph_calls import checked_policy
from echomq.engine.program import Program, op

# The parents one AFTER call names.
PARENTS_PAGE = 500
# The most one step of an admission sends, by weight: a call weighs CALL_WEIGHT, each parent it
# names 1 more (a call costs the server about four times what one more parent costs it, on
# both executors); so a step is at most 250 calls, or a page of parents and 125 calls. The
# longest step measured: docs/PROTOCOL.md "Staged admission".
CALL_WEIGHT = 4
STEP_WEIGHT = 1000
# A parent's registration reads through the dependents registered on it before (its ``next``):
# naming a parent weighs 1 more for each FAN_PER_WEIGHT of them this admission registered, so a
# step stays short where one job fans out to thousands (their admission is still quadratic).
FAN_PER_WEIGHT = 20
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


# One call of an admission: the index of its job in the graph, the call, its weight.
Owned = tuple[int, Call, int]


def _pages(parents: Sequence[str]) -> list[Sequence[str]]:
    return [parents[at:at + PARENTS_PAGE] for at in range(0, len(parents), PARENTS_PAGE)]


def _named(page: Sequence[str], fan: Counter[str]) -> int:
    """The weight of naming ``page``'s parents, each one's dependents so far counted in ``fan``
    (a parent's dependents are a list its registration reads through)."""
    weight = 0
    for parent in page:
        weight += 1 + fan[parent] // FAN_PER_WEIGHT
        fan[parent] += 1
    return weight


def _waiting(calls: QueueCalls, n: int, job: GraphJob, now: int | None,
             fan: Counter[str]) -> Iterator[Owned]:
    """``job`` admitted waiting and open, its parents registered."""
    policy = job.policy if job.after else "fail"  # a parentless job's row keeps none
    yield n, graph_calls.enqueue_after(calls, job.job_id, job.payload, now, policy,
                                       job.priority), CALL_WEIGHT
    for page in _pages(job.after):
        yield n, graph_calls.after(calls, job.job_id, now, False, page), (
            CALL_WEIGHT + _named(page, fan))


def _staging(calls: QueueCalls, jobs: Sequence[GraphJob], now: int | None) -> Iterator[Owned]:
    """A staged admission's first phase: every job waiting and open, in order."""
    fan: Counter[str] = Counter()
    for n, job in enumerate(jobs):
        yield from _waiting(calls, n, job, now, fan)


def _sealing(calls: QueueCalls, jobs: Sequence[GraphJob], now: int | None) -> Iterator[Owned]:
    """Its second phase: each job with parents sealed, last first (so every job below it is
    sealed before it), then each parentless job, first to last (released in the graph's order,
    every job below it sealed by then)."""
    order = [*(n for n in range(len(jobs) - 1, -1, -1) if jobs[n].after),
             *(n for n, job in enumerate(jobs) if not job.after)]
    for n in order:
        yield n, graph_calls.after(calls, jobs[n].job_id, now, True, ()), CALL_WEIGHT


def _cut(items: Iterable[Owned]) -> list[list[Owned]]:
    """``items`` in steps of at most ``STEP_WEIGHT`` (a heavier item alone)."""
    steps: list[list[Owned]] = [[]]
    held = 0
    for item in items:
        if steps[-1] and held + item[2] > STEP_WEIGHT:
            steps.append([])
            held = 0
        steps[-1].append(item)
        held += item[2]
    return steps


def calls_of_graph(calls: QueueCalls, jobs: Iterable[GraphJob],
                   now: int | None) -> tuple[list[Call], list[int]]:
    """The calls that admit ``jobs`` in one transaction, in order, and how many of them each
    job takes."""
    listed = list(jobs)
    owned = [*_staging(calls, listed, now), *_sealing(calls, listed, now)]
    counts = [0] * len(listed)
    for n, _, _ in owned:
        counts[n] += 1
    return [call for _, call, _ in owned], counts


def admission_steps(calls: QueueCalls, jobs: Sequence[GraphJob],
                    now: int | None) -> list[list[Owned]]:
    """The transactions that admit ``jobs``: one when the graph weighs at most
    ``STEP_WEIGHT``, else each phase in steps of at most that weight, no step holding calls
    of both (a transaction sent again after NOSCRIPT, which ran its other calls, never seals
    a job whose registration it has still to repeat)."""
    staging, sealing = list(_staging(calls, jobs, now)), list(_sealing(calls, jobs, now))
    if sum(weight for _, _, weight in staging + sealing) <= STEP_WEIGHT:
        return [staging + sealing]
    return _cut(staging) + _cut(sealing)


def graph_verdict(replies: Sequence[Any], parentless: bool) -> Verdict:
    """A job's verdict from the replies to its calls: DUPLICATE when its id was taken; else a
    parentless job ENQUEUED (its seal released it, or found it released already: by the same
    admission sent by another client, or by this one's transaction sent again after NOSCRIPT,
    whose first seal had met no job); one with parents where its AFTER calls left it: WAITING,
    or READY, DEAD or CANCELLED when a parent's state moved it on."""
    first = Verdict.of(replies[0])
    if first is Verdict.DUPLICATE:
        return first
    if parentless:
        return Verdict.ENQUEUED
    return next((verdict for verdict in map(Verdict.of, replies[1:]) if verdict in _MOVED),
                Verdict.WAITING)


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
        or its tombstone gone) counts as ended. One transaction up to ``STEP_WEIGHT`` parents,
        else staged (``enqueue_graph``)."""
        verdicts = yield from GraphAdmissions.enqueue_graph.program(
            self, [GraphJob(job_id, payload, tuple(after), checked_policy(policy), priority)],
            now=now)
        return verdicts[0]

    @op
    def enqueue_graph(self, jobs: Sequence[GraphJob], *,
                      now: int | None = None) -> Program[list[Verdict]]:
        """Admit ``jobs`` — each after the jobs it waits on, which come earlier in the list or
        are already admitted — in one transaction when the graph weighs at most
        ``STEP_WEIGHT`` (a call 1, a parent 1 more), else staged in transactions of at most
        that weight (nothing of it runs before its last steps, and sending the same graph again
        finishes one whose client died between steps); a verdict each, as ``enqueue_after``
        gives (ENQUEUED or DUPLICATE for a job with no parents)."""
        for job in jobs:
            checked_policy(job.policy)
        steps = admission_steps(self.calls, jobs, now)
        replies: list[list[Any]] = [[] for _ in jobs]
        for step in steps:
            got = yield from ExecutorMethods.call_atomic.program(
                self.executor, self.conn, [call for _, call, _ in step])
            for (n, _, _), reply in zip(step, got, strict=True):
                replies[n].append(reply)
        return [graph_verdict(mine, not job.after)
                for job, mine in zip(jobs, replies, strict=True)]
