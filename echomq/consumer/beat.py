"""The beat of a consumer, written once: ``Beat``'s programs sequence a consumer's work as the
actions of ``echomq.consumer.actions``, which each shell performs — ``echomq.consumer.blocking``
with threads, ``echomq.consumer.aio`` with tasks. The decisions are the lineup's
(``echomq.consumer.loop``); this is their order.

A beat: housekeeping at this consumer's turn (recover + promote, with the queue's token), then
jobs until none is left (each: the pause checks due, a prefetched job or the next claim round —
the outcomes waiting sent with it —, the rounds that isolate a job claimed before, the handler,
its outcome recorded for the next round), the outcomes waiting sent (on a stop, with the jobs not
started handed back), then the park (read the heads, plan, BLPOP on the wake and watch keys).
The keeper, while anything is in hand: the heartbeat (every lease in one extend), the attempts
past their time limit, the outcomes that waited long enough, housekeeping when due. A run beats
until a stop, backing off after a transient error, and ends by handing back what it holds.

No I/O: the shell gives its monotonic clock (``Host.monotonic``) and performs every action.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from echomq.consumer.actions import (
    Block,
    CancelAsked,
    ClaimLane,
    Dropped,
    Extend,
    Failed,
    Housekeep,
    Idle,
    KeeperDone,
    LostLeases,
    NotHandedBack,
    Nudge,
    Overran,
    PauseAfter,
    PauseCheck,
    Program,
    Read,
    Report,
    Run,
    ServerTime,
    Settle,
    SettleInFlight,
    Spawn,
    StopAsked,
    TakeToken,
    TellOverrun,
    Unparked,
    WaitOne,
    Watch,
)
from echomq.consumer.core import LoopCore
from echomq.consumer.loop import Lineup
from echomq.consumer.settings import Clock, Round, Settings
from echomq.engine.calls import Job
from echomq.queue.parking import Sighting


class Host(Protocol):
    """What the programs read of the shell that performs them."""

    lineup: Lineup
    clock: Clock | None  # the ms clock of every transition (None: the server's)
    concurrency: int  # how many handlers run at once

    @property
    def stopping(self) -> bool: ...

    @property
    def parking_timeout_s(self) -> float | None:
        """The read timeout of the parking connection (None: none)."""

    def monotonic(self) -> float: ...


class Beat:
    """The programs of one consumer (``run``, ``beat``, ``drain``, ``park``, the keeper's
    ``keep``...), over its ``host``'s lineup."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.spawned = 0  # handlers running concurrently (``Spawn``), not finished yet

    @property
    def lineup(self) -> Lineup:
        return self.host.lineup

    @property
    def settings(self) -> Settings:
        return self.host.lineup.settings

    def now(self) -> float:
        return self.host.monotonic()

    # the loop ---------------------------------------------------------------------------------

    def run(self) -> Program[None]:
        """Beat until a stop; then let the handlers in flight finish, send what waits (handing
        back the jobs not started), and leave a watch token where this consumer knew when
        something falls due, so a consumer still parked watches in its place."""
        try:
            while not self.host.stopping:
                yield from self.guarded_beat()
        finally:
            yield from self.settle_in_flight()
            yield from self.hand_back_quietly()
            yield KeeperDone()
            for index, core in enumerate(self.lineup.cores):
                if core.due_at is not None:
                    yield from self.guarded("watch", self.watch(index))

    def guarded_beat(self) -> Program[None]:
        """A beat; after an error the shell waits (stop-aware) with back-off, or raises."""
        try:
            yield from self.beat(force=False)
        except Exception as exc:
            yield PauseAfter(exc)
            return
        self.lineup.cores[0].backoff.succeeded()

    def beat(self, *, force: bool, park: bool = True) -> Program[int]:
        """Housekeeping (at this consumer's turn and with the queue's token; ``force``: at once,
        without it), the jobs until none is left, then the park unless ``park`` is False or a
        stop was asked for. Returns how many jobs ran."""
        self.lineup.rested()
        yield from self.housekeep(force=force)
        handled = yield from self.drain()
        if park and not self.host.stopping:
            yield from self.park()
        return handled

    def drain(self) -> Program[int]:
        """Claim and run jobs (up to ``concurrency`` at once) until none is left and none runs,
        or a stop, with housekeeping in between whenever it is due; then every outcome is sent
        (on a stop, with the jobs not started handed back)."""
        handled = 0
        try:
            while not self.host.stopping:
                yield from self.housekeep()
                if self.spawned >= self.host.concurrency:
                    yield WaitOne(wake=False)
                    continue
                picked = yield from self.next_job()
                if picked is None:
                    if not self.spawned:
                        break
                    yield WaitOne(wake=True)
                    continue
                yield from self.start(*picked)
                handled += 1
        finally:
            yield from self.settle_in_flight()
        yield from self.wind_down()
        yield KeeperDone()
        return handled

    def settle_in_flight(self) -> Program[None]:
        if self.spawned:
            yield SettleInFlight()

    # one job ----------------------------------------------------------------------------------

    def start(self, index: int, job: Job) -> Program[None]:
        """Run ``job``'s handler: to its end with one handler at a time; else as a handler of its
        own, but a job claimed before waits for the handlers in flight, then runs alone."""
        core = self.lineup.cores[index]
        if job.attempt > 1 and self.host.concurrency > 1:
            core.held_back(job)
            yield from self.settle_in_flight()
            core.restarted(job, self.now())
            if self.settings.time_limit_ms is not None:
                yield Nudge()  # its time limit is a new deadline
            yield from self.process(index, job)
        elif self.host.concurrency == 1:
            yield from self.process(index, job)
        else:
            self.spawned += 1
            yield Spawn(index, job)

    def spawned_process(self, index: int, job: Job) -> Program[None]:
        """``process`` as a handler of its own (``Spawn``)."""
        try:
            yield from self.process(index, job)
        finally:
            self.spawned -= 1

    def process(self, index: int, job: Job) -> Program[None]:
        """Run the handler on ``job`` of queue ``index`` (its lease in hand), then record its
        settlement for the next round."""
        core = self.lineup.cores[index]
        try:
            returned, failure = yield Run(index, job)
        finally:
            mine = core.finished(job)
        settlement = core.settlement(failure, returned, job.attempt)
        if mine and core.record(job, settlement, self.now()):
            yield Nudge()  # the first outcome waiting: a new deadline for the keeper
        if not mine:
            yield Dropped(job)
        if core.stops_loop(failure):
            yield StopAsked(job, failure)

    # rounds -----------------------------------------------------------------------------------

    def next_job(self) -> Program[tuple[int, Job] | None]:
        """The next job to run with its queue's index, its lease in hand: a prefetched one, else
        one of the batch the next round claims (sending the outcomes waiting with it). The rounds
        that leave a job claimed before alone in hand go first (one that fails is logged: the job
        runs all the same)."""
        yield from self.check_pauses()
        picked = self.lineup.next_job(self.now())
        if picked is None:
            yield from self.claim_round()
            picked = self.lineup.next_job(self.now())
        if self.lineup.isolating:
            for index, round_ in self.lineup.take_isolations():
                yield from self.guarded("send", self.send(index, round_))
        if picked is not None and self.settings.time_limit_ms is not None:
            yield Nudge()  # its time limit is a new deadline
        return picked

    def check_pauses(self) -> Program[None]:
        """Ask each queue whose prefetched jobs may start next and whose last word on a pause is
        too old whether it is paused; a paused one's prefetched jobs go back."""
        for index in self.lineup.pause_checks_due(self.now()):
            sent_at = self.now()
            paused = yield PauseCheck(index)
            self.lineup.cores[index].pause_checked(paused, sent_at)

    def claim_round(self) -> Program[None]:
        """One settle call per queue, in priority order, each claiming what the queues before it
        left of the round (the lineup's rule). A lane consumer takes one job: a queue's lanes,
        then its flat jobs, then the next queue's."""
        wanted = self.lineup.round_size()
        taken = 0
        for index, core in enumerate(self.lineup.cores):
            asked = self.lineup.ask(wanted, taken)
            if asked and self.settings.lanes:
                sent_at = self.now()
                watch, claim_id = core.watches(Round([], 1)), core.next_claim_id(sent_at)
                job = yield ClaimLane(index, watch, claim_id)
                sent_at = core.claim_answered(claim_id, sent_at)
                if job is not None:
                    yield from self.took(index, [job], sent_at)
                    taken += 1
                    continue
            claimed = yield from self.send(index, core.take_round(asked, now=self.now()))
            taken += len(claimed)
        self.lineup.round_claimed(wanted, taken)

    def send(self, index: int, round_: Round) -> Program[list[Job]]:
        """One settle call for ``round_`` on queue ``index``; what it claimed goes into hand (and
        is returned). If it fails, its outcomes wait for the next round."""
        if not round_.outcomes and not round_.claim:
            return []
        core = self.lineup.cores[index]
        sent_at = self.now()
        try:
            verdicts, jobs = yield Settle(index, round_, core.watches(round_))
        except Exception:
            core.unsent(round_, self.now())
            raise
        yield from self.took(index, jobs, core.claim_answered(round_.claim_id, sent_at))
        yield Report(round_.outcomes, verdicts)
        return list(jobs)

    def took(self, index: int, jobs: Sequence[Job], sent_at: float) -> Program[None]:
        """``jobs`` of queue ``index``, claimed by a call sent at ``sent_at``, are in hand (a
        claim with nothing of the queue in hand sent its watch tokens in its own flush)."""
        core = self.lineup.cores[index]
        core.sent()
        core.claimed(jobs, self.now(), sent_at)
        if jobs:
            yield Nudge()  # leases to extend: the keeper looks

    def send_all(self, *, hand_back: bool) -> Program[None]:
        """Send every queue's outcomes waiting (with ``hand_back``, its jobs not started); a
        failure is raised after every queue had its try."""
        failure: Exception | None = None
        for index, core in enumerate(self.lineup.cores):
            try:
                yield from self.send(index, core.take_round(hand_back=hand_back))
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def wind_down(self) -> Program[None]:
        """Send the outcomes waiting; on a stop, hand back the jobs not started with them."""
        yield from self.send_all(hand_back=self.host.stopping)

    def hand_back_quietly(self) -> Program[None]:
        """The last round of a loop that ends: what it cannot send is logged; those leases run
        out and recover puts their jobs back."""
        try:
            yield from self.wind_down()
        except Exception as exc:
            yield NotHandedBack(exc)

    def watch(self, index: int) -> Program[None]:
        yield Watch(index)

    # housekeeping -----------------------------------------------------------------------------

    def housekeep(self, *, force: bool = False) -> Program[None]:
        """Recover + promote each queue at this consumer's turn, when it takes the queue's
        housekeeping token (``force``: every queue now, without the token)."""
        for index, core in enumerate(self.lineup.cores):
            if not core.take_housekeeping(self.now(), force=force):
                continue
            if force:
                yield from self.housekeep_now(index)
            else:
                yield from self.housekeep_queue(index)

    def housekeep_queue(self, index: int) -> Program[None]:
        """Recover + promote queue ``index`` if this consumer takes its housekeeping token."""
        try:
            taken = yield TakeToken(index)
        finally:
            self.lineup.cores[index].token_answered(self.now())
        if taken:
            yield from self.housekeep_now(index)

    def housekeep_now(self, index: int) -> Program[None]:
        """Recover + promote queue ``index``, trimming its dead jobs when the core's schedule
        says (``echomq.queue.bounds.DeadTrims``)."""
        trims = self.lineup.cores[index].dead_trims
        trim = trims.wanted()
        trims.done(trim, (yield Housekeep(index, trim)))

    # parking ----------------------------------------------------------------------------------

    def park(self) -> Program[bool]:
        """Park on every queue's wake and watch keys until a wake token or a stop. Before each
        park the heads are read: when what they show has fallen due at this consumer's turn to
        housekeep, False (the next beat housekeeps); else the park lasts until then. A watch
        token or the end of a park reads again and parks on (the read after a park's end also
        counts the jobs waiting: True when there are some). True when woken for work."""
        try:
            return (yield from self.parked())
        finally:
            yield Unparked()

    def parked(self) -> Program[bool]:
        ready = False
        while not self.host.stopping:
            sightings = yield Read(ready)
            if any(sighting.ready for sighting in sightings):
                self.woke(self.now())
                return True
            timeout_ms = yield from self.plan(sightings)
            now = self.now()
            if any(core.housekeeping_wanted(now) for core in self.lineup.cores):
                self.woke(now)
                return False
            if self.host.stopping:  # asked while the heads were read
                return False
            popped = yield Block(timeout_ms / 1000)
            if popped == "wake":
                self.woke(self.now())
                return True
            ready = popped is None
        return False

    def park_timeout(self) -> Program[int]:
        """How long a park would last (ms), from a read of the heads."""
        sightings = yield Read(ready=False, before_park=False)
        return (yield from self.plan(sightings))

    def plan(self, sightings: Sequence[Sighting]) -> Program[int]:
        """The park for what each queue's read saw (each core learns its due time): until the
        earliest lease deadline, retry or rate window, no sooner than this consumer's next turn
        to housekeep, within [park_floor_ms, the park cap below the parking socket's timeout]."""
        due = min((s.due for s in sightings if s.due is not None), default=None)
        now: int | None = None
        if due is not None:
            clock = self.host.clock
            now = clock() if clock is not None else (yield ServerTime())
        mono = self.now()
        timeout_s = self.host.parking_timeout_s
        pairs = list(zip(self.lineup.cores, sightings, strict=True))
        for core, sighting in pairs:
            core.learned_due(sighting.due, now, mono)
        return min(core.park_ms(sighting.due, now, timeout_s, mono) for core, sighting in pairs)

    def woke(self, now: float) -> None:
        for core in self.lineup.cores:
            core.woke(now)

    # the keeper -------------------------------------------------------------------------------

    def keep(self) -> Program[None]:
        """While anything is in hand: extend the leases in hand, fail overrun attempts, send the
        outcomes that waited long enough, run due housekeeping; ends when nothing is in hand."""
        while self.lineup.in_hand:
            now = self.now()
            wait = self.lineup.next_tick(now)
            if wait > 0:
                yield Idle(wait)
                continue
            for index, core in enumerate(self.lineup.cores):
                yield from self.keep_queue(index, core, now)

    def keep_queue(self, index: int, core: LoopCore, now: float) -> Program[None]:
        """The keeper's work for queue ``index`` due at ``now``; errors are logged (the loop
        itself meets them on its next call)."""
        extends = core.heartbeat(now)
        overruns = core.take_overruns(now)
        due = core.take_round() if core.outbox_due(now) else None
        housekeep = core.take_housekeeping(now)
        if extends:
            yield from self.guarded("heartbeat", self.heartbeat(index, extends))
        for job in overruns:
            yield from self.guarded("overrun", self.overrun(index, job))
        if due is not None:
            yield from self.guarded("send", self.send(index, due))
        if housekeep:
            yield from self.guarded("housekeep_queue", self.housekeep_queue(index))

    def guarded(self, what: str, program: Program[object]) -> Program[None]:
        try:
            yield from program
        except Exception as exc:
            yield Failed(what, exc)

    def heartbeat(self, index: int, jobs: list[Job]) -> Program[None]:
        """Extend every lease in hand of queue ``index`` in one call; a lease found lost is let
        go of; the handler of a job found cancelled is told (``CancelAsked``)."""
        core = self.lineup.cores[index]
        verdicts = None
        sent_at = self.now()
        try:
            verdicts = yield Extend(index, jobs)
        finally:
            lost = core.heartbeat_done(jobs, verdicts, self.now(), sent_at)
        if lost:
            yield LostLeases(lost)
        told = [] if verdicts is None else core.cancels(jobs, verdicts, self.now())
        if told:
            yield CancelAsked(index, told)

    def overrun(self, index: int, job: Job) -> Program[None]:
        """Fail an attempt past its time limit (its handler cancelled when it can be); with one
        handler at a time, hand back the jobs prefetched behind it in every queue (its handler
        may never return), its queue's round first. Then tell ``on_overrun``."""
        yield Overran(job)
        core = self.lineup.cores[index]
        alone = self.host.concurrency == 1
        round_ = core.take_round(hand_back=alone)
        round_.outcomes.insert(0, core.overrun_settlement().outcome(job))
        try:
            yield from self.send(index, round_)
            if alone:
                yield from self.send_all(hand_back=True)
        finally:
            yield TellOverrun(job)
