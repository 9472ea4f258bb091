"""A sharded queue's methods, written once for both clients (``echomq.queue.shard_layout`` says
where its keys live): a ``ShardedMethods`` holds its N shards, plain queues of the same shell
(``shard_queues``), and each method is a program that drives the shards' own programs.

A job goes to the shard of its id (a lane job: of its group), and so does everything done to it
by id or by lease: ack, retry, extend, progress, steps, cancel, outcome, wait. A job admitted in
a lane is not on its id's shard: ``cancel``, ``outcome`` and ``wait`` look in the others when
the id's shard does not know it. Counts and housekeeping go over every shard; a direct ``claim``
takes the shards in turn. A settle of outcomes on several shards is atomic per shard, not across.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from echomq.engine.calls import (
    DEFAULT_BATCH_LIMIT,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_MS,
    Item,
    Job,
    JobOutcome,
    Outcome,
    Payload,
    Verdict,
    settled,
)
from echomq.engine.errors import ItemError
from echomq.engine.execution import ExecutorMethods
from echomq.engine.native import checked_id, checked_lane
from echomq.engine.produce import admitted, enqueue_many_calls, item_verdicts, verdicts
from echomq.engine.program import Op, Program, Reads, method, op
from echomq.engine.rows import Layout
from echomq.engine.wire import Wire
from echomq.queue.bounds import Housekept
from echomq.queue.methods import QueueMethods
from echomq.queue.results import Kept
from echomq.queue.shard_layout import (
    ShardCalls,
    ShardError,
    checked_shards,
    mismatch,
    record_key,
    recorded,
    shard_of,
)
from echomq.queue.sharded_controls import ShardedControls

M = QueueMethods  # the plain programs each shard runs: ``M.<method>.program(shard, ...)``


def _grouped(keys: Iterable[int]) -> dict[int, list[int]]:
    """The positions of each key, in order."""
    groups: dict[int, list[int]] = {}
    for at, key in enumerate(keys):
        groups.setdefault(key, []).append(at)
    return groups


def _item_route(item: Any) -> tuple[str, str | None]:
    """The id and group an item of ``enqueue_many`` routes by."""
    if not isinstance(item, tuple) or not 2 <= len(item) <= 4:
        raise ItemError(f"an item is (id, payload[, lane[, priority]]), not {item!r}")
    return checked_id(item[0]), item[2] if len(item) > 2 else None


class ShardedMethods(ShardedControls, QueueMethods):
    """One logical queue over ``shards`` plain queues (2 to 256), recorded on the server when
    first made; see the module's docstring. Every method of a Queue either works here or raises
    ShardError naming it and why."""

    _plain_class: ClassVar[type[Any]]  # the shell's plain Queue, of which the shards are made

    def __init__(self, conn: Any, name: str, *, wire: int | str = Wire.AUTO,
                 retention_ms: int = DEFAULT_RETENTION_MS,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, check_policy: bool = True,
                 events: bool = False, shards: int | None = None,
                 staging_timeout_ms: int | None = None) -> None:
        # graphs are refused here (``enqueue_graph``), so no job is ever held: no sweep
        self.shards = checked_shards(shards)
        options: dict[str, Any] = {"retention_ms": retention_ms, "max_attempts": max_attempts,
                                   "events": events}
        self._shards = [self._shard(conn, name, index, wire, options)
                        for index in range(self.shards)]
        self._turn = 0
        self._layout_due = True
        super().__init__(conn, name, wire=wire, check_policy=check_policy,
                         staging_timeout_ms=None, **options)
        for shard in self._shards:  # one executor: an auto wire decides once for them all
            shard.executor = self.executor

    def _shard(self, conn: Any, name: str, index: int, wire: int | str,
               options: dict[str, Any]) -> QueueMethods:
        shard: QueueMethods = self._plain_class(conn, name, wire=wire, check_policy=False,
                                               staging_timeout_ms=None, **options)
        shard.calls = ShardCalls(name, index, self.shards, **options)
        shard.name = shard.calls.name
        shard._registered = True  # the logical queue is listed, never its shards
        return shard

    @property
    def shard_queues(self) -> list[Any]:
        """The shards, plain queues of this queue's shell, in shard order."""
        return list(self._shards)

    def shard_of(self, job_id: str, lane: str | None = None) -> int:
        """The shard of a job: of its lane's group when it has one, else of its id."""
        if lane is not None:
            return shard_of(checked_lane(lane), self.shards, lane)
        return shard_of(checked_id(job_id), self.shards)

    def key(self, role: str, job_id: str | None = None, lane: str | None = None) -> str:
        """The key of a job (``job``, ``ended``) or a lane (``lane``, ``prio``) on its shard;
        a queue-wide role has a key on each shard (``shard_queues[k].key``): ShardError."""
        if lane is not None:
            return str(self._lane_shard(lane).key(role, job_id, lane))
        if job_id is not None:
            return str(self._id_shard(job_id).key(role, job_id, lane))
        raise ShardError(f"sharded queue {self.name!r} has a {role!r} key on each shard: "
                         "ask shard_queues[k].key")

    def _id_shard(self, job_id: str) -> Any:
        return self._shards[self.shard_of(job_id)]

    def _lane_shard(self, group: str) -> Any:
        return self._shards[self.shard_of("", group)]

    def _job_shard(self, job: Job) -> Any:
        return self._shards[shard_of(job.id, self.shards, job.lane)]

    @property
    def _due(self) -> bool:
        return self._layout_due or self._policy_due

    def _due_checks(self) -> Program[None]:
        """The count of shards recorded or checked (``_layout``), then the plain queue's
        checks."""
        if self._layout_due:
            yield from self._layout()
        yield from super()._due_checks()

    def _layout(self) -> Program[None]:
        """Record the count of shards (``SET NX``) and read it back: another count recorded
        first refuses this client (ShardError, nothing written); then list the queue."""
        key = record_key(self.name)
        _, found = yield Reads(self.conn, [method("set", key, self.shards, nx=True),
                                           method("get", key)])
        count = recorded(found)
        if count != self.shards:
            raise mismatch(self.name, self.shards, count if count is not None else 0)
        self._layout_due = False
        yield from self._register()

    # producer -------------------------------------------------------------------------------

    @op
    def enqueue(self, job_id: str, payload: Payload, *, lane: str | None = None,
                delay_ms: int = 0, at_ms: int | None = None, priority: int = 0,
                now: int | None = None, dedupe: str | None = None, dedupe_ms: int | None = None,
                debounce: str | None = None, debounce_ms: int | None = None,
                throttle: str | None = None, throttle_ms: int | None = None,
                expires_in_ms: int | None = None,
                expires_at_ms: int | None = None) -> Program[Verdict]:
        """Admit a job once, on its shard (``shard_of``), as ``Queue.enqueue`` does. ``dedupe``,
        ``debounce`` and ``throttle`` are refused (ShardError): jobs of one key may have ids of
        different shards, so the key could not be kept exact."""
        if dedupe is not None or debounce is not None or throttle is not None:
            raise ShardError(f"dedupe, debounce and throttle are not available on sharded queue "
                             f"{self.name!r}: jobs of one key may live on different shards")
        shard = self._shards[self.shard_of(job_id, lane)]
        return (yield from M.enqueue.program(shard, job_id, payload, lane=lane,
                                             delay_ms=delay_ms, at_ms=at_ms, priority=priority,
                                             now=now, expires_in_ms=expires_in_ms,
                                             expires_at_ms=expires_at_ms))

    @op
    def enqueue_many(self, items: Iterable[Item], *, now: int | None = None,
                     delay_ms: int = 0) -> Program[list[Verdict]]:
        """Admit many jobs, each on its shard: every item is checked first, then one flush a
        shard (its ``enqueue_many``); a verdict per item, in order. A shard that refuses a
        command ends the batch there (no later shard is sent to): PartialAdmission, as for
        ``Queue.enqueue_many``, when an item was admitted before."""
        listed = list(items)
        groups = _grouped(self.shard_of(*_item_route(item)) for item in listed)
        batches = {index: enqueue_many_calls(self._shards[index].calls,
                                             [listed[at] for at in places], now, delay_ms)
                   for index, places in groups.items()}
        for call in (call for calls in batches.values() for call in calls):
            self.executor.refuse(call[0])  # a lane job on wire=6: before any shard is sent to
        found: list[Verdict | None] = [None] * len(listed)
        error: BaseException | None = None
        for index, calls in batches.items():
            shard = self._shards[index]
            replies = yield from ExecutorMethods.call_each.program(shard.executor, shard.conn,
                                                                   calls)
            for at, verdict in zip(groups[index], item_verdicts(calls, replies), strict=True):
                found[at] = verdict
            error = next((reply for reply in replies if isinstance(reply, BaseException)), None)
            if error is not None:
                break
        return admitted(listed, found, error)

    @op
    def cancel(self, job_id: str, *, retention_ms: int | None = None,
               now: int | None = None) -> Program[Verdict]:
        """Cancel ``job_id`` on the shard that holds it, as ``Queue.cancel`` does."""
        shard, _ = yield from self._holder(job_id)
        return (yield from M.cancel.program(shard, job_id, retention_ms=retention_ms, now=now))

    @op
    def outcome(self, job_id: str) -> Program[JobOutcome]:
        """Where ``job_id`` stands: read on its id's shard, then (a lane job's id, or an id no
        shard knows) on the others."""
        return (yield from self._holder(job_id))[1]

    @op
    def wait(self, job_id: str, timeout_s: float) -> Program[JobOutcome]:
        """``Queue.wait`` on the shard that holds ``job_id`` (its id's shard if none does)."""
        shard, _ = yield from self._holder(job_id)
        return (yield from M.wait.program(shard, job_id, timeout_s))

    def _holder(self, job_id: str) -> Program[tuple[Any, JobOutcome]]:
        """The shard whose row ``job_id`` has, and its outcome there; its id's shard and
        "unknown" when none has one."""
        first = self._id_shard(job_id)
        found = yield from M.outcome.program(first, job_id)
        for shard in self._shards:
            if found.state != "unknown" or shard is first:
                continue
            there = yield from M.outcome.program(shard, job_id)
            if there.state != "unknown":
                return shard, there
        return first, found

    @op
    def results(self, job_ids: Sequence[str]) -> Program[list[bytes | None]]:
        """The result each of ``job_ids`` kept, read on its id's shard (a lane job's result:
        ``outcome(id).result``)."""
        kept = yield from ShardedMethods.kept_results.program(self, job_ids)
        return [result for result, _ in kept]

    @op
    def kept_results(self, job_ids: Sequence[str]) -> Program[list[Kept]]:
        """``results``, each with why its result was dropped (``Queue.kept_results``), read
        on its id's shard."""
        groups = _grouped(self.shard_of(job_id) for job_id in job_ids)
        kept: list[Kept] = [(None, None)] * len(job_ids)
        for index, places in groups.items():
            found = yield from M.kept_results.program(self._shards[index],
                                                      [job_ids[at] for at in places])
            for at, result in zip(places, found, strict=True):
                kept[at] = result
        return kept

    # a lease, on the shard it came from -----------------------------------------------------

    @op
    def ack(self, job: Job, *, retention_ms: int | None = None,
            result: Payload | None = None) -> Program[Verdict]:
        """``Queue.ack`` on ``job``'s shard."""
        return (yield from M.ack.program(self._job_shard(job), job, retention_ms=retention_ms,
                                         result=result))

    @op
    def retry(self, job: Job, *, delay_ms: int = 1_000, error: Payload = "",
              max_attempts: int | None = None, now: int | None = None) -> Program[Verdict]:
        """``Queue.retry`` on ``job``'s shard."""
        return (yield from M.retry.program(self._job_shard(job), job, delay_ms=delay_ms,
                                           error=error, max_attempts=max_attempts, now=now))

    @op
    def extend(self, job: Job, *, lease_ms: int = DEFAULT_LEASE_MS,
               now: int | None = None) -> Program[Verdict]:
        """``Queue.extend`` on ``job``'s shard."""
        return (yield from M.extend.program(self._job_shard(job), job, lease_ms=lease_ms,
                                            now=now))

    @op
    def set_progress(self, job: Job, data: Payload) -> Program[None]:
        """``Queue.set_progress`` on ``job``'s shard."""
        yield from M.set_progress.program(self._job_shard(job), job, data)

    @op
    def record_step(self, job: Job, name: str, output: Payload) -> Program[Verdict]:
        """``Queue.record_step`` on ``job``'s shard."""
        return (yield from M.record_step.program(self._job_shard(job), job, name, output))

    @op
    def recorded_steps(self, job: Job) -> Program[dict[str, bytes]]:
        """``Queue.recorded_steps`` on ``job``'s shard."""
        return (yield from M.recorded_steps.program(self._job_shard(job), job))

    @op
    def extend_many(self, jobs: Iterable[Job], *, lease_ms: int = DEFAULT_LEASE_MS,
                    now: int | None = None) -> Program[list[Verdict]]:
        """``Queue.extend_many`` per shard (every call built first); a verdict per job."""
        listed = list(jobs)
        groups = _grouped(shard_of(job.id, self.shards, job.lane) for job in listed)
        calls = {index: self._shards[index].calls.extend_many(
            [listed[at] for at in places], lease_ms, now) for index, places in groups.items()}
        found: list[Verdict] = [Verdict.STALE] * len(listed)
        for index, call in calls.items():
            replies = yield from self._shards[index]._sent(call, verdicts)
            for at, verdict in zip(groups[index], replies, strict=True):
                found[at] = verdict
        return found

    @op
    def settle(self, outcomes: Iterable[Outcome], *, claim: int = 0,
               lease_ms: int = DEFAULT_LEASE_MS, retention_ms: int | None = None,
               now: int | None = None,
               claim_id: str | None = None) -> Program[tuple[list[Verdict], list[Job]]]:
        """``Queue.settle`` per shard (every call built first; atomic within a shard), then up
        to ``claim`` jobs claimed with the shards in turn (``claim_many``)."""
        found = yield from self._settled(list(outcomes), lease_ms, retention_ms, now, False,
                                         False)
        jobs = (yield from self._claimed(claim, lease_ms, now, claim_id)) if claim else []
        return found, jobs

    @op
    def settle_leased(self, outcomes: Iterable[Outcome], claim: int, lease_ms: int,
                      retention_ms: int | None, now: int | None, *,
                      watch: bool = False,
                      claim_id: str | None = None
                      ) -> Program[tuple[list[Verdict], list[Job]]]:
        """``Queue.settle_leased`` per shard, then ``claim`` jobs with the shards in turn."""
        found = yield from self._settled(list(outcomes), lease_ms, retention_ms, now, True,
                                         watch)
        jobs = (yield from self._claimed(claim, lease_ms, now, claim_id)) if claim else []
        return found, jobs

    def _settled(self, outcomes: list[Outcome], lease_ms: int, retention_ms: int | None,
                 now: int | None, leased: bool, watch: bool) -> Program[list[Verdict]]:
        groups = _grouped(self._outcome_shard(outcome) for outcome in outcomes)
        calls = {index: self._shards[index].calls.settle([outcomes[at] for at in places], 0,
                                                         lease_ms, retention_ms, now,
                                                         leased=leased)
                 for index, places in groups.items()}
        found: list[Verdict] = [Verdict.STALE] * len(outcomes)
        for index, call in calls.items():
            replies, _ = yield from self._shards[index]._sent(call, settled, watch=watch)
            for at, verdict in zip(groups[index], replies, strict=True):
                found[at] = verdict
        return found

    def _outcome_shard(self, outcome: Any) -> int:
        job = getattr(outcome, "job", None)
        if not isinstance(job, Job):
            raise ItemError(f"an outcome is Ack(job), Retry(job, ...) or Release(job), "
                            f"not {outcome!r}")
        return shard_of(job.id, self.shards, job.lane)

    # claims, the shards in turn -------------------------------------------------------------

    def _turns(self) -> list[Any]:
        """Every shard once, starting one further each call: no shard waits more than N."""
        start, self._turn = self._turn, (self._turn + 1) % self.shards
        return self._shards[start:] + self._shards[:start]

    def _claimed(self, count: int, lease_ms: int, now: int | None,
                 claim_id: str | None) -> Program[list[Job]]:
        jobs: list[Job] = []
        for shard in self._turns():
            if len(jobs) >= count:
                break
            jobs += yield from M.claim_many.program(shard, count - len(jobs), lease_ms, now=now,
                                                    claim_id=claim_id)
        return jobs

    @op
    def claim(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None,
              claim_id: str | None = None) -> Program[Job | None]:
        """Lease a job from the first shard in turn that has one (each call starts one shard
        further), or None. ``claim_id`` is recorded on each shard asked."""
        for shard in self._turns():
            job = yield from M.claim.program(shard, lease_ms, now=now, claim_id=claim_id)
            if job is not None:
                return job
        return None

    @op
    def claim_many(self, count: int, lease_ms: int = DEFAULT_LEASE_MS, *,
                   now: int | None = None, claim_id: str | None = None) -> Program[list[Job]]:
        """Lease up to ``count`` jobs, the shards in turn until ``count`` are leased."""
        self._shards[0].calls.claim_many(count, lease_ms, now, claim_id)  # checked, not sent
        return (yield from self._claimed(count, lease_ms, now, claim_id))

    @op
    def claim_lane(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None,
                   watch: bool = False, claim_id: str | None = None) -> Program[Job | None]:
        """``Queue.claim_lane`` on the shards in turn until one leases a job."""
        for shard in self._turns():
            job = yield from M.claim_lane.program(shard, lease_ms, now=now, watch=watch,
                                                  claim_id=claim_id)
            if job is not None:
                return job
        return None

    # housekeeping and inspection, over every shard ------------------------------------------

    @op
    def recover(self, *, now: int | None = None, limit: int = DEFAULT_BATCH_LIMIT,
                max_attempts: int | None = None) -> Program[int]:
        """``Queue.recover`` on every shard (``limit`` each); the leases taken in all."""
        return (yield from self._summed(M.recover, now=now, limit=limit,
                                        max_attempts=max_attempts))

    @op
    def promote(self, *, now: int | None = None,
                limit: int = DEFAULT_BATCH_LIMIT) -> Program[int]:
        """``Queue.promote`` on every shard (``limit`` each); the jobs moved in all."""
        return (yield from self._summed(M.promote, now=now, limit=limit))

    @op
    def trim_dead(self, *, now: int | None = None,
                  limit: int = DEFAULT_BATCH_LIMIT) -> Program[int]:
        """``Queue.trim_dead`` on every shard (``limit`` each); the jobs gone in all."""
        return (yield from self._summed(M.trim_dead, now=now, limit=limit))

    def _summed(self, method: Op[Any, ..., int], **options: Any) -> Program[int]:
        """One count-returning program run on every shard in turn; the counts summed."""
        total = 0
        for shard in self._shards:
            total += yield from method.program(shard, **options)
        return total

    @op
    def recover_due(self, *, now: int | None = None, max_attempts: int | None = None,
                    trim: bool = True) -> Program[Housekept]:
        """``Queue.recover_due`` on every shard; the sums."""
        total = [0] * len(Housekept._fields)
        for shard in self._shards:
            done = yield from M.recover_due.program(shard, now=now, max_attempts=max_attempts,
                                                    trim=trim)
            total = [a + b for a, b in zip(total, done, strict=True)]
        return Housekept(*total)

    @op
    def next_due(self) -> Program[int | None]:
        """The earliest ``next_due`` of the shards."""
        due = []
        for shard in self._shards:
            due.append((yield from M.next_due.program(shard)))
        return min((at for at in due if at is not None), default=None)

    @op
    def row_layout(self) -> Program[Layout]:
        """Every shard's row layout as one: the latest version a shard records (a shard not yet
        migrated records none), and the earlier layout's rows any shard's heads hold."""
        found = []
        for shard in self._shards:
            found.append((yield from M.row_layout.program(shard)))
        versions = [layout.recorded for layout in found if layout.recorded is not None]
        return Layout(max(versions, default=None),
                      tuple(job_id for layout in found for job_id in layout.old_rows))

    @op
    def counts(self) -> Program[dict[str, int]]:
        """Each count summed over the shards."""
        total: dict[str, int] = {}
        for shard in self._shards:
            for role, n in (yield from M.counts.program(shard)).items():
                total[role] = total.get(role, 0) + n
        return total

    @op
    def lane_depths(self, groups: Iterable[Any] | None = None,
                    parked: Iterable[Any] | None = None) -> Program[dict[str, int]]:
        """Each non-empty lane's depth, from every shard (a group lives on one); ``groups``
        and ``parked`` are a shard's own, so ShardError when given."""
        if groups is not None or parked is not None:
            raise ShardError("lane_depths of a sharded queue reads each shard's ring itself: "
                             "pass no groups")
        depths: dict[str, int] = {}
        for shard in self._shards:
            depths.update((yield from M.lane_depths.program(shard)))
        return depths

    check_policy = QueueMethods.check_policy
