"""``LoopCore``: the decisions of a consumer for one queue it serves, with no I/O — the leases in
hand (prefetched, running, finished and not sent), when housekeeping is due, which leases to
extend, which attempt ran past its time limit, how an outcome is settled, and how long to park.
``echomq.consumer.loop`` states the rules; ``Lineup`` orders a core per queue."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from echomq.consumer.directives import Done, Reject, RetryIn
from echomq.consumer.settings import (
    BACKOFF_CAP_S,
    BACKOFF_FIRST_S,
    MAX_RESULT_BYTES,
    SETTLE_PAUSE_CAP_S,
    STOPPING_TYPES,
    Ack,
    Backoff,
    Lease,
    ResultTooLarge,
    Retry,
    Round,
    Settings,
    Settlement,
    directive_error,
    error_text,
    park_window,
)
from echomq.engine import calls
from echomq.engine.calls import Job, Outcome, Verdict
from echomq.queue.bounds import DeadTrims, park_cap_for


@dataclass
class LoopCore:
    """The state of one consumer loop: leases in hand and when housekeeping is next due."""

    settings: Settings
    leases: dict[Job, Lease] = field(default_factory=dict)
    running: set[Job] = field(default_factory=set)
    housekeeping_at: float = 0.0  # due at once
    # When (monotonic s) the earliest thing read before the last park falls due: a lease runs
    # out, a retry is due or a lane's rate window opens. None: nothing can fall due.
    due_at: float | None = None
    backoff: Backoff = field(init=False)
    # Jobs claimed and not started, in claim order (each also in ``leases``).
    prefetched: deque[Job] = field(default_factory=deque)
    # Outcomes of finished attempts not sent yet, and since when the oldest waits.
    outbox: list[Outcome] = field(default_factory=list)
    outbox_since: float | None = None
    unsent_rounds: int = 0  # consecutive rounds that could not be sent
    # A round to send before the job just started runs: see ``isolate``.
    isolating: bool = False
    # When the last call was sent whose reply showed the queue not paused (monotonic s).
    unpaused_at: float = float("-inf")
    # The claim sent whose reply has not come (its id, and when it was first sent): the next
    # claim is sent under the same id, so it answers the leases that one recorded, if it ran.
    claim_id: str | None = None
    claim_sent_at: float = 0.0
    # Leases in hand whose job was cancelled (a heartbeat answered CANCELLING): their handlers
    # are told (``cancel_requested``), their outcomes end them cancelled on the server.
    cancel_asked: set[Job] = field(default_factory=set)
    # When housekeeping trims the queue's dead jobs to their bounds.
    dead_trims: DeadTrims = field(default_factory=DeadTrims)

    def __post_init__(self) -> None:
        self.backoff = Backoff(min(max(self.settings.park_cap_ms / 1000, BACKOFF_FIRST_S),
                                   BACKOFF_CAP_S, self.pause_cap_s))
        self._ack = Ack(self.settings.retention_ms)

    @property
    def pause_cap_s(self) -> float:
        """The longest pause after an error: half a lease at most, so a consumer that lost a
        reply tries again (its replays are safe) while the leases it holds are still its own."""
        return self.settings.lease_ms / 2000

    # housekeeping ---------------------------------------------------------------------------

    def take_housekeeping(self, now: float, *, force: bool = False) -> bool:
        """Whether this consumer's turn to try recover + promote has come at ``now`` (or is
        ``force``d); if so it counts as taken from now, so two callers never both take one. The
        shell then asks for the queue's housekeeping token
        (``echomq.consumer.shell.take_token``): of all its consumers, one a ``housekeeping_ms``
        runs the round."""
        if not force and now < self.housekeeping_at:
            return False
        self.housekeeping_at = now + self.settings.housekeeping_ms / 1000
        return True

    def token_answered(self, now: float) -> None:
        """The token's ``SET`` answered at ``now``: this consumer's next try comes a whole
        interval later, when the token it may have taken has expired on the server."""
        self.housekeeping_at = max(self.housekeeping_at,
                                   now + self.settings.housekeeping_ms / 1000)

    def learned_due(self, due: int | None, now: int | None, mono: float) -> None:
        """The queue was read at ``mono`` (monotonic s): the earliest thing that can fall due is
        at ``due`` (ms on the clock of ``now``), or nothing (None)."""
        if due is None or now is None:
            self.due_at = None
        else:
            self.due_at = mono + max(0, due - now) / 1000

    def due_passed(self, now: float) -> bool:
        """Whether what was known due before the park has fallen due by ``now``."""
        return self.due_at is not None and now >= self.due_at

    def housekeeping_wanted(self, now: float) -> bool:
        """Whether what was read due has fallen due by ``now`` and this consumer's turn to
        housekeep has come: then it ends its park for a beat, which housekeeps."""
        return self.due_passed(now) and now >= self.housekeeping_at

    def woke(self, now: float) -> None:
        """The park ended at ``now``. Something known due has fallen due: housekeeping is due at
        this consumer's turn. Else (a wake token) its first round waits one interval, so a
        short wake costs no housekeeping, and a longer drain still has it every interval."""
        if not self.due_passed(now):
            self.housekeeping_at = max(self.housekeeping_at,
                                       now + self.settings.housekeeping_ms / 1000)

    # claims ---------------------------------------------------------------------------------

    def room(self) -> int:
        """How many more jobs the shell may take into hand."""
        return max(0, self.settings.capacity - len(self.leases))

    def took(self, job: Job, now: float) -> None:
        """``job`` was claimed at ``now`` and its handler starts: its lease is in hand."""
        self.leases[job] = Lease(job, now, now + self.settings.extend_every_s,
                                 now + self.settings.lease_s)
        self.running.add(job)

    def claimed(self, jobs: Sequence[Job], now: float, sent_at: float | None = None) -> None:
        """A claim sent at ``sent_at`` (None: ``now``) returned ``jobs`` at ``now``: their
        leases are in hand, queued to run in claim order, each running out ``lease_ms`` after
        ``sent_at`` at the earliest. A claim that returned jobs shows the queue was not paused."""
        granted = now if sent_at is None else sent_at
        every = now + self.settings.extend_every_s
        expires = granted + self.settings.lease_s
        for job in jobs:
            self.leases[job] = Lease(job, now, every, expires)
        self.prefetched.extend(jobs)
        if jobs:
            self.unpaused_at = max(self.unpaused_at, granted)

    def next_job(self, now: float) -> Job | None:
        """The next prefetched job still in hand, its handler starting at ``now``; None when
        none is left (a lease lost at its heartbeat, or handed back, is skipped). A job whose
        lease has run out by this consumer's clock, or is within ``lapse_margin_s`` of it, is
        never started: it is let go of and released with the next round (if the server took
        it back meanwhile, the release is refused and whoever holds it now runs it). A job
        claimed before (a suspect) is isolated first: see ``isolate``."""
        while self.prefetched:
            job = self.prefetched.popleft()
            lease = self.leases.get(job)
            if lease is None:
                continue
            if self.lapsed(lease, now):
                self.release_later(job, now)
                continue
            lease.started = now
            self.running.add(job)
            if job.attempt > 1:
                self.isolate()
            return job
        return None

    def lapsed(self, lease: Lease, now: float) -> bool:
        """Whether ``lease`` has run out by ``now``, or will within ``lapse_margin_s``."""
        return now >= lease.expires - self.settings.lapse_margin_s

    def release_later(self, job: Job, now: float) -> None:
        """Let go of prefetched ``job``: a release of it waits for the next round."""
        if self.leases.pop(job, None) is not None:
            self.outbox.append(calls.Release(job))
            if self.outbox_since is None:
                self.outbox_since = now

    # pauses ---------------------------------------------------------------------------------

    def pause_check_due(self, now: float) -> bool:
        """Whether the shell asks if the queue is paused before the next prefetched job starts:
        jobs are prefetched and no reply has shown the queue unpaused within ``pause_check_ms``
        (a claim that returned jobs is such a reply)."""
        return bool(self.prefetched) \
            and now - self.unpaused_at >= self.settings.pause_check_ms / 1000

    def pause_checked(self, paused: bool, sent_at: float) -> None:
        """The shell asked, at ``sent_at``, whether the queue is paused: if so, every job
        prefetched and not started is released with the next round."""
        if not paused:
            self.unpaused_at = max(self.unpaused_at, sent_at)
            return
        for job in list(self.prefetched):
            self.release_later(job, sent_at)
        self.prefetched.clear()

    def isolate(self) -> None:
        """The job about to start was claimed before (a retry, or a lease that ran out: perhaps
        its handler killed the worker), so it runs with nothing else in hand. The jobs
        prefetched behind it are handed back (their attempt uncounted) and the outcomes waiting
        go out, in ``take_isolation``: a round the shell sends before the handler starts (after
        reading the reply of a round sent ahead, whose jobs go back too). A worker lost to it
        then charges no other job an attempt."""
        self.isolating = True

    def take_isolation(self) -> Round | None:
        """The round to send before the job just started runs (see ``isolate``), if any."""
        isolating, self.isolating = self.isolating, False
        if isolating and (self.prefetched or self.outbox):
            return self.take_round(hand_back=True)
        return None

    def held_back(self, job: Job) -> None:
        """``job``, taken to start, waits for the handlers running to finish first (it runs
        alone): its time limit does not run meanwhile; its lease is still extended."""
        self.running.discard(job)

    def restarted(self, job: Job, now: float) -> None:
        """``job``'s handler starts at ``now`` after all (``held_back`` until then)."""
        lease = self.leases.get(job)
        self.running.add(job)
        if lease is not None:
            lease.started = now

    def take_prefetched(self) -> list[Job]:
        """Let go of the jobs prefetched and not started: the caller hands them back."""
        jobs = [job for job in self.prefetched if self.leases.pop(job, None) is not None]
        self.prefetched.clear()
        return jobs

    @property
    def in_hand(self) -> bool:
        """A lease is held or an outcome waits to be sent: the keeper stays awake."""
        return bool(self.leases or self.outbox or self.running)

    def finished(self, job: Job) -> bool:
        """``job``'s handler returned: let go of its lease; True if it was still in hand, so the
        caller settles the outcome (False: its time limit or a lost lease settled it)."""
        self.running.discard(job)
        return self.release(job)

    @property
    def busy(self) -> bool:
        """A handler is running (its lease in hand, or given up at its time limit while the
        handler goes on): the keeper stays awake for housekeeping."""
        return bool(self.running)

    def release(self, job: Job) -> bool:
        """Let go of ``job``'s lease; False if it was no longer in hand (lost, or settled by its
        time limit): then nobody else settles it."""
        self.cancel_asked.discard(job)
        return self.leases.pop(job, None) is not None

    def holds(self, job: Job) -> bool:
        return job in self.leases

    # while jobs run -------------------------------------------------------------------------

    def extends_due(self, now: float) -> list[Job]:
        """Leases in hand whose heartbeat is due (none without a heartbeat)."""
        if not self.settings.heartbeat:
            return []
        return [lease.job for lease in self.leases.values() if now >= lease.extend_at]

    def heartbeat(self, now: float) -> list[Job]:
        """Every lease in hand — prefetched, running, and finished with its outcome not sent —
        when any of them is due an extend (one call for all); else none."""
        if not self.extends_due(now):
            return []
        return [*self.leases, *(outcome.job for outcome in self.outbox
                                if not isinstance(outcome, calls.Release))]

    def heartbeat_done(self, jobs: Iterable[Job], verdicts: Sequence[Verdict] | None,
                       now: float, sent_at: float | None = None) -> list[Job]:
        """The heartbeat of ``jobs``, sent at ``sent_at`` (None: ``now``), replied ``verdicts``
        (None: it failed). Schedules the next extends; returns the jobs whose lease was found
        lost, let go of here."""
        lost: list[Job] = []
        for n, job in enumerate(jobs):
            stale = verdicts is not None and verdicts[n] is Verdict.STALE
            if stale and self.release(job):
                lost.append(job)
            else:
                self.extended(job, now, ok=verdicts is not None, sent_at=sent_at)
        return lost

    def cancels(self, jobs: Iterable[Job], verdicts: Sequence[Verdict], now: float) -> list[Job]:
        """The jobs a heartbeat found cancelled (CANCELLING) that are newly so: one prefetched
        never starts (its release with the next round ends it cancelled); one running (or held
        back to run) is returned, for its handler to be told. A finished one's outcome, waiting
        to be sent, ends it cancelled as it is."""
        told: list[Job] = []
        for job, verdict in zip(jobs, verdicts, strict=True):
            if verdict is not Verdict.CANCELLING or job in self.cancel_asked \
                    or job not in self.leases:
                continue
            if job in self.prefetched:
                self.prefetched.remove(job)
                self.release_later(job, now)
            else:
                self.cancel_asked.add(job)
                told.append(job)
        return told

    def extended(self, job: Job, now: float, *, ok: bool, sent_at: float | None = None) -> None:
        """An extend of ``job`` sent at ``sent_at`` (None: ``now``) returned (``ok``: its lease
        runs ``lease_ms`` from then at the earliest) or failed; schedule the next one — sooner
        after a failure, so a passing error does not cost the lease."""
        lease = self.leases.get(job)
        if lease is not None:
            every = self.settings.extend_every_s
            lease.extend_at = now + (every if ok else max(every / 4, 0.01))
            if ok:
                lease.expires = (now if sent_at is None else sent_at) + self.settings.lease_s

    def overruns(self, now: float) -> list[Job]:
        """Running attempts in hand that have run past the time limit."""
        limit = self.settings.time_limit_ms
        if limit is None:
            return []
        return [job for job in self.running
                if (lease := self.leases.get(job)) and now - lease.started >= limit / 1000]

    def take_overruns(self, now: float) -> list[Job]:
        """Release and return the leases that ran past the time limit: the caller settles them
        (and nobody else will)."""
        over = self.overruns(now)
        for job in over:
            self.release(job)
        return over

    def next_tick(self, now: float) -> float:
        """Seconds until the keeper (heartbeat, housekeeping, time limit, an outcome waiting)
        has work to do."""
        due = [self.housekeeping_at]
        if self.settings.heartbeat:
            due.extend(lease.extend_at for lease in self.leases.values())
        if self.settings.time_limit_ms is not None:
            due.extend(self.leases[job].started + self.settings.time_limit_ms / 1000
                       for job in self.running if job in self.leases)
        if self.outbox_since is not None:
            due.append(self.outbox_since + self.settings.settle_delay_ms / 1000)
        return max(0.0, min(due) - now)

    # claim records ----------------------------------------------------------------------------

    def next_claim_id(self, now: float) -> str:
        """The id the claim sent at ``now`` goes under: the last claim's while its reply has not
        come — a claim whose reply was lost, sent again under its id, answers the leases it
        recorded (their attempts counted once) and leases nothing more (docs/PROTOCOL.md, "Claim
        records") — else a new one, as after a lease or more: that record has expired, and the
        claim sent now leases afresh."""
        if self.claim_id is None or now - self.claim_sent_at >= self.settings.lease_s:
            self.claim_id, self.claim_sent_at = calls.new_claim_id(), now
        return self.claim_id

    def claim_answered(self, claim_id: str | None, sent_at: float) -> float:
        """The claim sent under ``claim_id`` at ``sent_at`` was answered: the next one goes
        under a new id. Returns when the claim was first sent (its leases count from then)."""
        if claim_id is None or claim_id != self.claim_id:
            return sent_at
        self.claim_id = None
        return min(self.claim_sent_at, sent_at)

    # rounds ---------------------------------------------------------------------------------

    def record(self, job: Job, settlement: Settlement, now: float) -> bool:
        """Queue ``job``'s outcome for the next round; True when it is the first waiting (the
        keeper then has a new deadline)."""
        outcome: Outcome
        if settlement is self._ack:
            outcome = calls.Ack(job)
        elif isinstance(settlement, Ack):
            outcome = calls.Ack(job, result=settlement.result)
        else:
            outcome = settlement.outcome(job)
        self.outbox.append(outcome)
        if self.outbox_since is None:
            self.outbox_since = now
            return True
        return False

    def outbox_due(self, now: float) -> bool:
        """Whether the oldest outcome waiting has waited ``settle_delay_ms``."""
        since = self.outbox_since
        return since is not None and now - since >= self.settings.settle_delay_ms / 1000

    def take_round(self, claim: int = 0, hand_back: bool = False,
                   now: float = 0.0) -> Round:
        """The next settle call: every outcome waiting (and, when ``hand_back``, a release of
        each job prefetched and not started), with a claim of ``claim`` jobs, sent at ``now``
        under ``next_claim_id``."""
        outcomes = self.outbox
        self.outbox, self.outbox_since = [], None
        if hand_back:
            outcomes += [calls.Release(job) for job in self.take_prefetched()]
        return Round(outcomes, claim, self.next_claim_id(now) if claim > 0 else None)

    def unsent(self, round_: Round, now: float) -> None:
        """``round_`` could not be sent: its outcomes wait again, ahead of newer ones, and go
        out after a pause that grows with each failure in a row (its releases are dropped: those
        leases run out and recover puts the jobs back)."""
        self.unsent_rounds += 1
        kept = [outcome for outcome in round_.outcomes if not isinstance(outcome, calls.Release)]
        if kept:
            self.outbox[:0] = kept
            pause = self.settle_pause(self.unsent_rounds, 0.0) or self.pause_cap_s
            self.outbox_since = now + pause - self.settings.settle_delay_ms / 1000

    def watches(self, round_: Round) -> bool:
        """Whether ``round_`` sends the queue's watch tokens in its flush: it claims with
        nothing of the queue in hand, so the leases it takes may be the only ones the parked
        consumers do not know of (``echomq.queue.parking``)."""
        return round_.claim > 0 and not round_.outcomes and not self.in_hand

    def sent(self) -> None:
        """A round went out."""
        self.unsent_rounds = 0

    # settling -------------------------------------------------------------------------------

    def settlement(self, failure: BaseException | None, returned: object = None,
                   attempt: int = 1) -> Settlement:
        """How to settle attempt number ``attempt`` whose handler returned ``returned``
        (``failure`` None) or raised ``failure``: a directive (``Done``, ``RetryIn``,
        ``Reject``) as it says, any other value by ack, an exception by retry."""
        if failure is not None:
            return self.failed(failure)
        if returned is None:
            return self._ack  # the common case, first
        if isinstance(returned, Done):
            return self.done(returned)
        if isinstance(returned, RetryIn):
            limit = self.settings.max_attempts if returned.max_attempts is None \
                else returned.max_attempts
            return Retry(returned.delay_ms, directive_error(returned.error), limit)
        if isinstance(returned, Reject):
            return Retry(0, directive_error(returned.error), max(attempt, 1))
        return self._ack

    def failed(self, failure: BaseException) -> Retry:
        """How to settle an attempt that raised ``failure``."""
        return Retry(self.settings.retry_delay_ms, error_text(failure), self.settings.max_attempts)

    def done(self, done: Done) -> Settlement:
        """An ack keeping ``done.result``; a result over MAX_RESULT_BYTES fails the attempt
        instead (the server would refuse the whole round that carried it)."""
        if done.result is None:
            return self._ack
        if len(done.result) > MAX_RESULT_BYTES:
            return self.failed(ResultTooLarge(f"the result is {len(done.result)} bytes, over "
                                              f"the cap of {MAX_RESULT_BYTES}"))
        return Ack(self.settings.retention_ms, done.result)

    def overrun_settlement(self) -> Retry:
        """How to settle an attempt that ran past its time limit."""
        error = f"TimeLimitExceeded: time limit of {self.settings.time_limit_ms} ms exceeded"
        return Retry(self.settings.retry_delay_ms, error, self.settings.max_attempts)

    def settle_pause(self, failures: int, elapsed_s: float) -> float | None:
        """After ``failures`` transient errors sending a settlement (``elapsed_s`` since the
        first try): how long to wait before sending it again; None to give up, once a lease's
        length has passed (recover then runs the job again)."""
        if elapsed_s >= self.settings.lease_ms / 1000:
            return None
        return float(min(BACKOFF_FIRST_S * 2.0 ** max(failures - 1, 0), SETTLE_PAUSE_CAP_S,
                         self.pause_cap_s))

    @staticmethod
    def stops_loop(failure: BaseException | None) -> bool:
        """A handler that raised SystemExit or KeyboardInterrupt asks the loop to stop (after its
        attempt is settled as failed)."""
        return isinstance(failure, STOPPING_TYPES)

    # parking --------------------------------------------------------------------------------

    def park_cap_ms(self, socket_timeout_s: float | None) -> int:
        """The longest park: ``park_cap_ms``, below the socket timeout of the parking
        connection. A park ends sooner when something falls due (``park_ms``), and a lease
        taken while the consumers park wakes one of them to look (the watch token)."""
        return park_cap_for(socket_timeout_s, self.settings.park_cap_ms)

    def park_ms(self, due: int | None, now: int | None, socket_timeout_s: float | None,
                mono: float | None = None) -> int:
        """How long to park: until ``due`` (a lease deadline, a retry or a rate window, ms on
        the clock of ``now``), and (given ``mono``, the monotonic now) no sooner than this
        consumer's next turn to housekeep, for only housekeeping acts on what fell due; within
        [park_floor_ms, the park cap]."""
        cap = self.park_cap_ms(socket_timeout_s)
        if due is None or now is None:
            return cap
        if mono is not None:
            due = max(due, now + math.ceil((self.housekeeping_at - mono) * 1000))
        return park_window(due, now, min(self.settings.park_floor_ms, cap), cap)
