"""The Queue's methods, written once for both clients: each is a program
(``echomq.engine.program``) that yields the calls ``echomq.engine.calls`` builds and the reads
around them, and decodes the replies. ``echomq.queue.blocking.Queue`` runs them on a blocking
client, ``echomq.queue.aio.Queue`` awaits them on an asyncio one; neither adds a method.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, TypeVar

from redis.exceptions import ClusterError, ResponseError

from echomq.engine import produce
from echomq.engine.calls import (
    DEFAULT_BATCH_LIMIT,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION_MS,
    ZSETS,
    Call,
    Item,
    Job,
    JobOutcome,
    Outcome,
    Payload,
    QueueCalls,
    Verdict,
    admission_reads,
    earliest,
    fenced,
    job_of,
    lost_admission,
    outcome_of,
    settled,
)
from echomq.engine.clients import twins
from echomq.engine.deadlines import deadline_ms
from echomq.engine.execution import ExecutorMethods
from echomq.engine.once import lost_reply
from echomq.engine.produce import admitted, batch_verdicts, enqueue_many_calls, item_verdicts
from echomq.engine.program import Invoke, Program, Reads, method, op, preceded
from echomq.engine.rows import Layout
from echomq.engine.unique import admission_call, unique_options
from echomq.engine.wire import Wire
from echomq.queue.bounds import HOUSEKEEPING_STEP, TRIM_STEPS, Housekept, more_due
from echomq.queue.dead import DeadControls
from echomq.queue.events import EventReads
from echomq.queue.graphs import GraphAdmissions
from echomq.queue.lanes import LaneControls, ring_in_turn, ring_reads
from echomq.queue.layout import read_layout
from echomq.queue.limits import LimitControls
from echomq.queue.parking import WATCH_ROLE, head_read, watch_commands
from echomq.queue.policy import server_checks
from echomq.queue.registry import REGISTRY_KEY
from echomq.queue.results import ResultReads
from echomq.queue.shard_layout import ShardFace
from echomq.queue.staging import STAGING_TIMEOUT_MS, StagingSweep, checked_timeout
from echomq.queue.steps import StepRecords
from echomq.queue.waiting import next_block_s, wait_slice_s

log = logging.getLogger("echomq")
R = TypeVar("R")


class QueueMethods(LaneControls, DeadControls, EventReads, ResultReads, GraphAdmissions,
                   StagingSweep, LimitControls, ShardFace, StepRecords):
    """One queue on a Valkey server, run by scripts (``wire=5``), the trafikey module (``6``) or,
    by default (``"auto"``), the module where the server runs it and scripts otherwise
    (``echomq.engine.execution.AutoWire``): what both Queues are, and do. With ``events``, each
    change its calls make is appended to the queue's events stream (``events()`` reads it
    back). ``staging_timeout_ms``: see ``echomq.queue.staging``."""

    executor: ExecutorMethods

    def __init__(self, conn: Any, name: str, *, wire: int | str = Wire.AUTO,
                 retention_ms: int = DEFAULT_RETENTION_MS,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, check_policy: bool = True,
                 events: bool = False, shards: int | None = None,
                 staging_timeout_ms: int | None = STAGING_TIMEOUT_MS) -> None:
        self.conn = conn
        self.name = name
        self.staging_timeout_ms = checked_timeout(staging_timeout_ms)
        self.calls = QueueCalls(name, retention_ms=retention_ms, max_attempts=max_attempts,
                                events=events)
        self.executor = self._executor_of(wire, name)
        self._registered = False
        self._policy_due = check_policy  # made, nothing sent: checked at the first command

    @staticmethod
    @abstractmethod
    def _executor_of(wire: int | str, queue: str) -> ExecutorMethods:
        """The shell's executor of ``wire`` (an auto one: of ``queue``'s own)."""

    @property
    def _due(self) -> bool:
        """Whether the queue has checks to make before its next command (``_due_checks``)."""
        return self._policy_due

    def _checked(self, program: Program[R]) -> Program[R]:
        """``program`` as each shell runs it: the due checks just before its first command,
        once its arguments are checked (bad input sends nothing)."""
        return preceded(program, self._due_checks) if self._due else program

    def _due_checks(self) -> Program[None]:
        """Asked before the first command of a queue made with ``check_policy`` (making it
        sends nothing): ``server_checks``, the policy once per client; refused, asked again."""
        if self._policy_due:
            yield from server_checks(self.conn, self.name, plain=self.shards == 1, again=False)
            self._policy_due = False

    @property
    def wire(self) -> Wire:
        """The wire the queue was made with: ``Wire.SCRIPTS``, ``NATIVE`` or ``AUTO`` (whose
        executor's ``chosen`` says which it took)."""
        return self.executor.wire

    @property
    def base(self) -> str:
        return self.calls.base

    @property
    def retention_ms(self) -> int:
        return self.calls.retention_ms

    @property
    def max_attempts(self) -> int:
        return self.calls.max_attempts

    @property
    def emits_events(self) -> bool:
        """Whether this queue's calls append their changes to the events stream."""
        return self.calls.events

    def key(self, role: str, job_id: str | None = None, lane: str | None = None) -> str:
        """The key of ``role`` (``job``: of a job id; ``lane``: of a group) of this queue."""
        return self.calls.key(role, job_id, lane)

    @op
    def check_policy(self) -> Program[str | None]:
        """Warns (EvictionPolicyWarning) when the server may evict keys, and returns its policy
        (None: cannot evict, or does not say); a plain queue the server records sharded is
        refused (ShardError). A queue made with ``check_policy`` asks this itself before its
        first command (unless asked first), the policy once per client (``_due_checks``)."""
        self._policy_due = False  # on the call, before the program runs: asked now, not again
        return server_checks(self.conn, self.name, plain=self.shards == 1)

    @op
    def row_layout(self) -> Program[Layout]:
        """The queue's row layout as a worker reads it when it starts (echomq.queue.layout)."""
        return read_layout(self.conn, self.base)

    def _sent(self, call: Call, decode: Callable[[Any], R], *, watch: bool = False) -> Program[R]:
        """``call`` run on the queue's wire and its reply decoded: the one place a call's reply
        meets its decoder. With ``watch``, the queue's watch tokens follow the call in the same
        flush (``echomq.queue.parking``)."""
        if not watch:
            reply = yield from ExecutorMethods.call.program(self.executor, self.conn, *call)
        else:
            then = watch_commands(self.key(WATCH_ROLE))
            replies = yield from ExecutorMethods.call_many.program(self.executor, self.conn,
                                                                   [call], then)
            reply = replies[0]
        return decode(reply)

    # producer -------------------------------------------------------------------------------

    @op
    def enqueue(self, job_id: str, payload: Payload, *, lane: str | None = None,
                delay_ms: int = 0, at_ms: int | None = None, priority: int = 0,
                now: int | None = None, dedupe: str | None = None, dedupe_ms: int | None = None,
                debounce: str | None = None, debounce_ms: int | None = None,
                throttle: str | None = None, throttle_ms: int | None = None,
                expires_in_ms: int | None = None, expires_at_ms: int | None = None,
                ) -> Program[Verdict]:
        """Admit a job once: ENQUEUED, or DUPLICATE when its row exists. KindError on a bad id;
        TypeError, before anything is sent, for a payload that is not str or bytes-like.

        With ``lane``, the job joins its group's lane and is served by ``claim_lane`` in turn
        with the other groups (scripts only: a ``wire=6`` queue raises Wire6Unsupported).

        With ``delay_ms`` or ``at_ms`` (an absolute time in ms on the server's clock), the job
        waits in the delayed set until the later of now + ``delay_ms`` and ``at_ms``; promote
        then moves it to pending (a lane job to its lane).

        ``priority`` (an integer from -100 to 100, ArgumentError otherwise, before anything is
        sent): a job of higher priority is claimed before every job of lower priority waiting
        with it, and jobs of one priority in the order they were admitted. It is kept through
        retries, delays, recovery and release. At 0 nothing more is sent, so any server takes
        the call.

        At most one of ``dedupe``, ``debounce``, ``throttle`` (a key, 1-200 bytes of
        ``A-Z a-z 0-9 . _ : -``; its window ``<mode>_ms``; flat jobs, no ``at_ms``): DUPLICATE
        while the key's job lives (and ``dedupe_ms`` after it ends); DEBOUNCED when the key's
        job still waits in delayed (its payload replaced, due ``debounce_ms`` from now);
        THROTTLED while a job of the key was admitted in the last ``throttle_ms``.

        ``expires_in_ms`` or ``expires_at_ms``: a flat job's deadline (echomq.engine.deadlines)."""
        unique = unique_options(dedupe, dedupe_ms, debounce, debounce_ms, throttle, throttle_ms)
        call = admission_call(self.calls, unique, job_id, payload, lane, now, delay_ms, at_ms,
                              priority, deadline_ms(now, expires_in_ms, expires_at_ms,
                                                    time.time_ns))
        started = time.monotonic()
        try:
            verdict = yield from self._sent(call, Verdict.of)
        except lost_reply():
            verdict = yield from self._after_lost_reply(call, started)
        yield from self._register()
        return verdict

    def _after_lost_reply(self, call: Call, started: float) -> Program[Verdict]:
        """An admission whose reply was lost: ENQUEUED if it went through (docs/PROTOCOL.md,
        Replays), else sent once more."""
        verdict = yield from self._lost_admission(call, started)
        if verdict is not None:
            return verdict
        verdict = yield from self._sent(call, Verdict.of)
        if verdict is Verdict.DUPLICATE:  # the first one arrived after all
            return (yield from self._lost_admission(call, started)) or verdict
        return verdict

    def _lost_admission(self, call: Call, started: float) -> Program[Verdict | None]:
        reads = [method("execute_command", *command) for command in admission_reads(call)]
        replies = yield Reads(self.conn, reads)
        return lost_admission(call, replies, time.monotonic() - started)

    @op
    def enqueue_many(self, items: Iterable[Item], *, now: int | None = None,
                     delay_ms: int = 0) -> Program[list[Verdict]]:
        """Admit many jobs in one wire flush (``echomq.engine.produce``), each due ``delay_ms``
        from now; a verdict per item, in order. Items are ``(id, payload)``, ``(id, payload,
        lane)`` or ``(id, payload, lane, priority)`` (lane None: a flat job); each is checked
        before anything is sent.

        The batch goes as one command per 10,000 jobs (and one per lane job), each all or
        nothing. When the server refuses one after others were admitted, PartialAdmission
        (a subclass of the server's error) is raised: its ``verdicts`` say which items were
        admitted, its ``remaining`` are the others, to send again."""
        listed = items if isinstance(items, list) else list(items)
        calls = enqueue_many_calls(self.calls, listed, now, delay_ms)
        replies = yield from ExecutorMethods.call_each.program(self.executor, self.conn, calls)
        error = next((reply for reply in replies if isinstance(reply, BaseException)), None)
        if error is None:
            yield from self._register()
            return batch_verdicts(calls, replies)
        verdicts = item_verdicts(calls, replies)
        if any(verdict is not None for verdict in verdicts):
            yield from self._register()
        return admitted(listed, verdicts, error)

    def _register(self) -> Program[None]:
        """Enter this queue in the server's registry of queues after its first admission (once
        per Queue), so operators' tools list it without scanning the keyspace. A user whose ACL
        denies the registry key still produces: the queue is then found by ``stats --rescan``.
        The admission stands whatever becomes of this write: where the registry's node cannot
        be reached (on a cluster, another node than the queue's, perhaps down), the write is
        tried again at the next admission."""
        if self._registered:
            return
        self._registered = True
        try:
            yield Invoke(self.conn, method("sadd", REGISTRY_KEY, self.name))
        except (*lost_reply(), *twins(ClusterError)) as exc:  # CLUSTERDOWN among them
            self._registered = False
            log.debug("queue %s not entered in %s yet: %s", self.name, REGISTRY_KEY, exc)
        except twins(ResponseError) as exc:
            log.debug("queue %s not entered in %s: %s", self.name, REGISTRY_KEY, exc)

    # worker ---------------------------------------------------------------------------------

    @op
    def claim(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None,
              claim_id: str | None = None) -> Program[Job | None]:
        """Lease the oldest pending job for ``lease_ms``, or None when there is none.

        ``claim_id`` (1 to 200 bytes of ``[A-Za-z0-9._:-]``, unique to this call, e.g.
        ``echomq.engine.calls.new_claim_id()``): the lease is recorded under it for ``lease_ms``, so
        the same call sent again after its reply was lost answers the lease still held rather
        than lease another job and count another attempt."""
        return (yield from self._sent(self.calls.claim(lease_ms, now, claim_id), job_of))

    @op
    def claim_lane(self, lease_ms: int = DEFAULT_LEASE_MS, *, now: int | None = None,
                   watch: bool = False, claim_id: str | None = None) -> Program[Job | None]:
        """Lease the head job of the next lane in turn (the ring rotates one step per claim),
        or None when no lane can be served, or when the 100 ring entries one call walks held
        none (dropped or parked: another claim goes on from the next). Scripts only (``wire=6``
        raises Wire6Unsupported).
        ``watch``: the queue's watch tokens go out in the claim's flush, after it.
        ``claim_id``: as for ``claim``."""
        call = self.calls.claim_lane(lease_ms, now, claim_id)
        return (yield from self._sent(call, job_of, watch=watch))

    @op
    def ack(self, job: Job, *, retention_ms: int | None = None,
            result: Payload | None = None) -> Program[Verdict]:
        """Complete ``job``'s lease. The row stays as a tombstone for ``retention_ms`` so a
        re-enqueue of the id is still a duplicate; with ``result`` (at most MAX_RESULT_BYTES,
        ArgumentError before sending otherwise) the tombstone keeps it, in the same step.
        StaleLease if the lease is not current."""
        return (yield from self._sent(self.calls.ack(job, retention_ms, result),
                                      partial(fenced, job)))

    @op
    def retry(self, job: Job, *, delay_ms: int = 1_000, error: Payload = "",
              max_attempts: int | None = None, now: int | None = None) -> Program[Verdict]:
        """Record ``error`` and run ``job`` again after ``delay_ms``: RETRYING, or DEAD when its
        attempts are used up. StaleLease if the lease is not current."""
        call = self.calls.retry(job, delay_ms, error, max_attempts, now)
        return (yield from self._sent(call, partial(fenced, job)))

    @op
    def extend(self, job: Job, *, lease_ms: int = DEFAULT_LEASE_MS,
               now: int | None = None) -> Program[Verdict]:
        """Push ``job``'s lease deadline to now + ``lease_ms``. StaleLease if not current."""
        return (yield from self._sent(self.calls.extend(job, lease_ms, now),
                                      partial(fenced, job)))

    @op
    def set_progress(self, job: Job, data: Payload) -> Program[None]:
        """Record ``data`` (at most MAX_PROGRESS_BYTES, ArgumentError before sending otherwise)
        as how far ``job`` got: the row's progress, read back by ``outcome(id).progress`` and
        kept in the tombstone after the ack. StaleLease if the lease is not current."""
        yield from self._sent(self.calls.progress(job, data), partial(fenced, job))

    @op
    def cancel(self, job_id: str, *, retention_ms: int | None = None,
               now: int | None = None) -> Program[Verdict]:
        """Cancel ``job_id``: a job waiting to run (pending, delayed, in its lane) leaves its set
        at once and ends as cancelled, its tombstone kept ``retention_ms`` (None: the queue's
        retention), CANCELLED; a leased job is flagged, CANCELLING, and its attempt ends as
        cancelled at its holder's next settlement (each heartbeat until then answers
        CANCELLING). A job already cancelled answers CANCELLED, one done DONE, one dead DEAD,
        an id without a row UNKNOWN; none of these changes anything. KindError for a bad id,
        before sending."""
        call = self.calls.cancel(job_id, retention_ms, now)
        return (yield from self._sent(call, Verdict.of))

    # batches --------------------------------------------------------------------------------

    @op
    def settle(self, outcomes: Iterable[Outcome], *, claim: int = 0,
               lease_ms: int = DEFAULT_LEASE_MS, retention_ms: int | None = None,
               now: int | None = None,
               claim_id: str | None = None) -> Program[tuple[list[Verdict], list[Job]]]:
        """A worker's round in one round trip: settle each outcome (``Ack(job)``,
        ``Retry(job, delay_ms, error, max_attempts)`` or ``Release(job)``) in order, then lease
        up to ``claim`` jobs for ``lease_ms``, atomically. Returns a verdict per outcome — STALE
        for a lease that is not current (not raised, so the others stand) — and the jobs leased,
        oldest first. Every outcome is checked before anything is sent. ``claim_id``: the
        leases are recorded under it, as for ``claim``: sent again, the call answers them."""
        call = self.calls.settle(outcomes, claim, lease_ms, retention_ms, now, claim_id=claim_id)
        return (yield from self._sent(call, settled))

    @op
    def settle_leased(self, outcomes: Iterable[Outcome], claim: int, lease_ms: int,
                      retention_ms: int | None, now: int | None, *,
                      watch: bool = False,
                      claim_id: str | None = None
                      ) -> Program[tuple[list[Verdict], list[Job]]]:
        """``settle`` for a consumer's own round: the outcomes' jobs came from this queue's
        claims, so their ids and fences are not checked again. ``watch``: the queue's watch
        tokens go out in the same flush, after the call (``echomq.queue.parking``)."""
        call = self.calls.settle(outcomes, claim, lease_ms, retention_ms, now, leased=True,
                                 claim_id=claim_id)
        return (yield from self._sent(call, settled, watch=watch))

    @op
    def claim_many(self, count: int, lease_ms: int = DEFAULT_LEASE_MS, *,
                   now: int | None = None, claim_id: str | None = None) -> Program[list[Job]]:
        """Lease up to ``count`` (>= 1) pending jobs, oldest first, in one round trip
        (``claim_id``: as for ``claim``)."""
        call = self.calls.claim_many(count, lease_ms, now, claim_id)
        return (yield from self._sent(call, settled))[1]

    @op
    def extend_many(self, jobs: Iterable[Job], *, lease_ms: int = DEFAULT_LEASE_MS,
                    now: int | None = None) -> Program[list[Verdict]]:
        """Push each job's lease deadline to now + ``lease_ms`` in one round trip: EXTENDED or
        STALE per job, in order (not raised)."""
        return (yield from self._sent(self.calls.extend_many(jobs, lease_ms, now),
                                      produce.verdicts))

    # housekeeping ---------------------------------------------------------------------------

    @op
    def recover(self, *, now: int | None = None, limit: int = DEFAULT_BATCH_LIMIT,
                max_attempts: int | None = None) -> Program[int]:
        """Return expired leases (at most ``limit``) to where they came from; a job whose
        attempts are used up (``max_attempts``, None: the queue's) goes dead instead, its worker
        lost at its last attempt. How many leases were taken, back to run or dead."""
        return (yield from self._sent(self.calls.recover(now, limit, max_attempts), int))

    @op
    def promote(self, *, now: int | None = None,
                limit: int = DEFAULT_BATCH_LIMIT) -> Program[int]:
        """Move delayed jobs that are due (at most ``limit``) back to run; how many moved."""
        return (yield from self._sent(self.calls.promote(now, limit), int))

    @op
    def recover_due(self, *, now: int | None = None, max_attempts: int | None = None,
                    trim: bool = True) -> Program[Housekept]:
        """Recover expired leases, then promote due jobs, each in steps of at most
        HOUSEKEEPING_STEP until a step leaves none due; then (``trim``, the round's upkeep) end
        abandoned staging (``sweep_staging``) and trim dead jobs to the queue's bounds in such
        steps, at most TRIM_STEPS: (recovered, promoted, trimmed, abandoned)."""
        recovered = promoted = trimmed = 0
        while True:
            step = yield from self._sent(
                self.calls.recover(now, HOUSEKEEPING_STEP, max_attempts), int)
            recovered += step
            if not more_due(step):
                break
        while True:
            step = yield from self._sent(self.calls.promote(now, HOUSEKEEPING_STEP), int)
            promoted += step
            if not more_due(step):
                break
        abandoned = (yield from StagingSweep.sweep_staging.program(self, now=now)) if trim else 0
        for _ in range(TRIM_STEPS if trim else 0):
            step = yield from self._sent(self.calls.trim_dead(now, HOUSEKEEPING_STEP), int)
            trimmed += step
            if not more_due(step):
                break
        return Housekept(recovered, promoted, trimmed, abandoned)

    # parking --------------------------------------------------------------------------------

    @op
    def next_due(self) -> Program[int | None]:
        """The earliest time (ms) at which a delayed job falls due, a lease expires or a lane's
        rate window opens, if any."""
        heads = [method("execute_command", *head_read(self.key(role)))
                 for role in ("delayed", "active", "throttled")]
        return earliest((yield Reads(self.conn, heads)))

    @op
    def park(self, timeout_s: float) -> Program[bool]:
        """Block on the wake key for at most ``timeout_s`` (> 0); True when a token woke us."""
        popped = yield Invoke(self.conn, method("blpop", [self.key("wake")], timeout=timeout_s))
        return popped is not None

    # outcomes -------------------------------------------------------------------------------

    @op
    def outcome(self, job_id: str) -> Program[JobOutcome]:
        """Where ``job_id`` stands now, in one round trip: its state, the result its ack kept,
        its last error and its attempts (``state`` "unknown" when it has no row)."""
        reads = [method("execute_command", *command)
                 for command in self.calls.outcome_reads(job_id)]
        return outcome_of((yield Reads(self.conn, reads, raise_on_error=False)))

    @op
    def wait(self, job_id: str, timeout_s: float) -> Program[JobOutcome]:
        """Block until ``job_id`` is done or dead, or ``timeout_s`` passes (``math.inf``: as long
        as it takes); its outcome then.

        Never a polling loop: the transitions that end a job — an ack keeping a result, a retry
        or a recover sending it dead — leave a token in its ended key, and this blocks on that
        key (BLMOVE onto itself, so every waiter wakes). An ack without a result leaves none:
        such a job is seen done when the timeout passes. Each blocking call ends before the
        connection's socket timeout (``echomq.queue.waiting``), so any ``timeout_s`` works on any
        client."""
        deadline = time.monotonic() + timeout_s
        slice_s = wait_slice_s(self.conn)
        ended = self.key("ended", job_id)
        outcome = QueueMethods.outcome.program
        while True:
            now = yield from outcome(self, job_id)
            block_s = next_block_s(deadline, slice_s)
            if now.ended or block_s is None:
                return now
            moved = yield Invoke(self.conn, method("blmove", ended, ended, block_s, "LEFT",
                                                   "RIGHT"))
            if moved is None:
                continue  # the slice ran out: the loop reads the outcome again
            now = yield from outcome(self, job_id)
            if now.ended:
                return now
            # A token of an earlier life of the id (its row deleted behind the queue's back):
            # it tells this one nothing, so it goes, and the wait goes on.
            yield Invoke(self.conn, method("delete", ended))

    # inspection -----------------------------------------------------------------------------

    @op
    def counts(self) -> Program[dict[str, int]]:
        """How many jobs are pending, active, delayed and dead, and how many wait in lanes."""
        reads = [*(method("zcard", self.key(role)) for role in ZSETS), *ring_reads(self.key),
                 method("hkeys", self.key("parked"))]
        *sizes, entries, left, parked = yield Reads(self.conn, reads)
        counts = dict(zip(ZSETS, map(int, sizes), strict=True))
        groups = ring_in_turn(entries, left)
        depths = yield from QueueMethods.lane_depths.program(self, groups, parked)
        counts["lanes"] = sum(depths.values())
        return counts
