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

from echomq.consumer.actions import (
    Block,
    CancelAsked,
    Dropped,
    Extend,
    Housekeep,
    Idle,
    KeeperDone,
    LostLeases,
    Nudge,
    Overran,
    PauseAfter,
    PauseCheck,
    Program,
    Read,
    Run,
    ServerTime,
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
from echomq.consumer.rounds import Host, Rounds
from echomq.engine.calls import Job, Verdict
from echomq.engine.errors import error_reply
from echomq.queue.notices import Notice
from echomq.queue.parking import Sighting


class Beat(Rounds):
    """The programs of one consumer (``run``, ``beat``, ``drain``, ``park``, the keeper's
    ``keep``...), over its ``host``'s lineup."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.spawned = 0  # handlers running concurrently (``Spawn``), not finished yet
        # Until when (monotonic s) the keeper idles, unless nudged; None: it may not be idling
        # (so a change in hand nudges it). A change with a later deadline needs no nudge.
        self.keeper_until: float | None = None

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
                if self.lineup.housekeeping_due(self.now()):
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
        now = self.now()
        if mine and core.record(job, settlement, now):
            # the first outcome waiting: a new deadline for the keeper
            yield from self.nudge(now + self.settings.settle_delay_ms / 1000)
        if not mine:
            yield Dropped(job)
        if core.stops_loop(failure):
            yield StopAsked(job, failure)

    # rounds -----------------------------------------------------------------------------------

    def next_job(self) -> Program[tuple[int, Job] | None]:
        """The next job to run with its queue's index, its lease in hand: a prefetched one, else
        one of the batch the round sent ahead brought, else of the batch the next claim round
        brings (sending the outcomes waiting with it). The rounds that leave a job claimed before
        alone in hand go first, after the reply of a round sent ahead (its jobs go back too; one
        that fails is logged: the job runs all the same). Else, while the queue is busy, the
        next round goes out ahead as this job starts (``Lineup.read_ahead``)."""
        lineup = self.lineup
        if lineup.pause_checks_due(self.now()):
            yield from self.check_pauses()
        picked = lineup.next_job(self.now())
        if picked is None:
            yield from self.next_batch()
            picked = lineup.next_job(self.now())
        if lineup.isolating:
            yield from self.isolate()
        elif picked is not None and not self.host.stopping:
            ahead = lineup.read_ahead(self.now())
            if ahead is not None:
                yield from self.guarded("send", self.send_ahead(ahead))
        if picked is not None and self.settings.time_limit_ms is not None:
            yield Nudge()  # its time limit is a new deadline
        return picked

    def next_batch(self) -> Program[None]:
        """The batch sent ahead, its reply read (and the pause checked again: its word on a
        pause is as old as its sending), else the batch of a claim round."""
        if self.lineup.ahead is None:
            yield from self.claim_round()
            return
        yield from self.collect()
        if self.lineup.pause_checks_due(self.now()):
            yield from self.check_pauses()

    def isolate(self) -> Program[None]:
        """Leave the job claimed before that starts alone in hand: the reply of a round sent
        ahead read, then every queue's rounds handing back the jobs not started."""
        yield from self.guarded("send", self.collect())
        rounds = self.lineup.take_isolations()
        if self.lineup.spread is not None:  # the shards' rounds in one round trip
            yield from self.guarded("send", self.send_rounds(rounds))
            return
        for index, round_ in rounds:
            yield from self.guarded("send", self.send(index, round_))

    def check_pauses(self) -> Program[None]:
        """Ask each queue whose prefetched jobs may start next and whose last word on a pause is
        too old whether it is paused; a paused one's prefetched jobs go back."""
        for index in self.lineup.pause_checks_due(self.now()):
            sent_at = self.now()
            paused = yield PauseCheck(index)
            self.lineup.cores[index].pause_checked(paused, sent_at)

    def watch(self, index: int) -> Program[None]:
        yield Watch(index)

    # housekeeping -----------------------------------------------------------------------------

    def housekeep(self, *, force: bool = False) -> Program[None]:
        """Recover + promote each queue at this consumer's turn, when it takes the queue's
        housekeeping token (``force``: every queue now, without the token). A spread consumer's
        shard whose housekeeping fails by an error that heals is left to its next turn."""
        for index, core in enumerate(self.lineup.cores):
            if not core.take_housekeeping(self.now(), force=force):
                continue
            try:
                if force:
                    yield from self.housekeep_now(index)
                else:
                    yield from self.housekeep_queue(index)
            except Exception as exc:
                # a spread consumer's shard on a node that is down (an error that heals): its
                # housekeeping waits for its next turn, the other shards' goes on
                if self.lineup.spread is None or not self.host.heals(exc):
                    raise

    def housekeep_queue(self, index: int) -> Program[None]:
        """Recover + promote queue ``index`` if this consumer takes its housekeeping token."""
        try:
            taken = yield TakeToken(index)
        except Exception as exc:
            if error_reply(exc).code != "OOM":
                raise
            # a server over its maxmemory refuses the token's SET; recover and promote run when
            # it is full, so this consumer housekeeps without the token and the queue drains
            taken = True
        finally:
            self.lineup.cores[index].token_answered(self.now())
        if taken:
            yield from self.housekeep_now(index)

    def housekeep_now(self, index: int) -> Program[None]:
        """Recover + promote queue ``index``, sweeping abandoned staging and trimming its dead
        jobs when the core's schedule
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
        try:
            yield from self.kept()
        finally:
            self.keeper_until = None

    def kept(self) -> Program[None]:
        while self.lineup.in_hand:
            now = self.now()
            wait = self.lineup.next_tick(now)
            if wait > 0:
                self.keeper_until = now + wait
                try:
                    yield Idle(wait)
                finally:
                    self.keeper_until = None
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
        if index == 0 and self.lineup.report_due(now):
            yield from self.guarded("send", self.report_ahead())
        for job in overruns:
            yield from self.guarded("overrun", self.overrun(index, job))
        if due is not None:
            yield from self.guarded("send", self.send(index, due))
        if housekeep:
            yield from self.guarded("housekeep_queue", self.housekeep_queue(index))

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

    def noticed(self, notices: Sequence[Sequence[Notice]]) -> Program[None]:
        """Cancel notices read while jobs are in hand (``echomq.queue.notices``), a list a
        queue: the leases in hand they name (id and fence) are found cancelled as a heartbeat
        answering CANCELLING finds them (``LoopCore.cancels``), a running one's handler told at
        once."""
        now = self.now()
        for index, core in enumerate(self.lineup.cores):
            named = set(notices[index])
            jobs = [job for job in core.leases if (job.id, job.fence) in named]
            told = core.cancels(jobs, [Verdict.CANCELLING] * len(jobs), now) if jobs else []
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
