"""Schedulers with skewed clocks pass, stall in the middle of a pass while others pass (between
reading the mark and admitting, or inside an admission), die in the middle of a pass and come
back, while a worker runs the ticks' jobs and their tombstones vanish: a hypothesis state machine
on an explicit clock.

What must hold, whatever the sequence:
- no tick is ever admitted twice (ENQUEUED once per job id), though a tombstone is deleted as
  soon as the schedule's mark is past its tick (and no stalled pass still holds it) — while the
  clocks agree within ``MARK_AHEAD_LIMIT_MS``; when one is further off, the tombstone is kept
  until every clock is past the tick (the retention must outlast the skew);
- the mark only grows, also under a pass overtaken inside its admission, but for a pass that
  finds it more than ``MARK_AHEAD_LIMIT_MS`` ahead of its clock and lowers it to that clock; and
  every tick after the schedule's start (its first mark) up to the mark was admitted (with a
  catch-up wide enough that nothing is coalesced), each a tick of the cron expression after the
  lowest mark. A mark lowered below the start lets a pass admit the ticks between the two (as
  for a schedule started at the lowered mark) but does not oblige one to: a pass that read the
  mark before it was lowered raises it past them again, and those ticks were never the
  schedule's (the ticks a lowering passes under that were, up to the mark it lowered, were
  admitted already);
- a pass that completes admits exactly the latest ``catch_up`` ticks after the mark up to its
  clock, and leaves the mark at the latest tick its clock has reached — or, finding the mark
  far ahead (a clock that far ahead wrote it, or its own clock is that far behind), admits
  nothing and lowers the mark to its clock, so a mark never holds a clock back longer than the
  limit; a stalled pass admits nothing the mark has passed meanwhile.

One scheduler's clock may be far off the others' (ahead or behind by more than the limit), and
may be set right in the middle of the run.
"""

from __future__ import annotations

from collections import Counter
from typing import cast

import pytest
import redis
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from echomq import Queue, Verdict
from echomq.embedded import EmbeddedValkey
from echomq.tasks.periodic import MARK_AHEAD_LIMIT_MS, Periodic, Schedule

START = 1_796_000_000_000
SCHEDULERS = 3
SKEW = st.integers(-90_000, 90_000)
FAR = st.integers(MARK_AHEAD_LIMIT_MS + 1, MARK_AHEAD_LIMIT_MS + 120_000)
FAR_SKEW = st.none() | FAR | FAR.map(lambda skew: -skew)
ALL = 10**6  # a catch-up no test run outgrows: nothing is coalesced
STEP = st.one_of(st.sampled_from([1, 999, 1_000, 60_000, 300_000]), st.integers(1, 300_000))


class Killed(Exception):
    """The scheduler's process died right after this admission reached the server."""


class SchedulerFleet(RuleBasedStateMachine):
    def __init__(self, port: int) -> None:
        super().__init__()
        self.conn = redis.Redis(port=port)
        self.conn.flushall()
        self.queue = Queue(self.conn, "cron", check_policy=False)
        self.time = START
        self.alive = [True] * SCHEDULERS
        self.plans: list[list[int]] = [[] for _ in range(SCHEDULERS)]
        self.enqueued: Counter[str] = Counter()
        self.last_mark: int | None = None
        self.start: int | None = None
        self.lowest_mark: int | None = None
        self.marks_seen: list[int | None] = []
        self.schedule = Schedule("s", "* * * * *")
        self.skews = [0] * SCHEDULERS
        self.apart = False  # have two clocks ever been further apart than the limit?

    @initialize(cron=st.sampled_from(["* * * * *", "*/5 * * * *", "*/2 * * * * *",
                                      "17 * * * *"]),
                catch_up=st.sampled_from([1, 3, ALL]),
                skews=st.lists(SKEW, min_size=SCHEDULERS, max_size=SCHEDULERS),
                far=FAR_SKEW)
    def setup(self, cron: str, catch_up: int, skews: list[int], far: int | None) -> None:
        self.schedule = Schedule("s", cron, catch_up=catch_up)
        self.skews = skews if far is None else [far, *skews[1:]]
        self.apart = max(self.skews) - min(self.skews) > MARK_AHEAD_LIMIT_MS

    def teardown(self) -> None:
        self.conn.close()

    # the world ---------------------------------------------------------------------------------

    def entry(self, die: bool = False, overtaken_by: int | None = None) -> Periodic:
        def admit(job_id: str, tick_ms: int) -> object:
            if overtaken_by is not None:
                self.entry().run_due(self.clock(overtaken_by))
                self.marks_seen.append(self.mark())
            verdict = self.queue.enqueue(job_id, b"")
            if verdict is Verdict.ENQUEUED:
                self.enqueued[job_id] += 1
            if die:
                raise Killed(job_id)
            return verdict

        return Periodic(self.schedule, self.queue, admit)

    def clock(self, index: int) -> int:
        return self.time + self.skews[index]

    def mark(self) -> int | None:
        return self.entry().mark()

    def slowest_clock(self) -> int:
        return min(self.clock(i) for i in range(SCHEDULERS))

    # rules -------------------------------------------------------------------------------------

    @rule(step=STEP)
    def time_passes(self, step: int) -> None:
        self.time += step

    def idle(self) -> list[int]:
        """The live schedulers with no pass under way."""
        return [i for i in range(SCHEDULERS) if self.alive[i] and not self.plans[i]]

    def stalled(self) -> list[int]:
        return [i for i in range(SCHEDULERS) if self.plans[i]]

    @precondition(lambda self: self.idle())
    @rule(data=st.data())
    def a_pass(self, data: st.DataObject) -> None:
        """A whole pass, its mark read and its ticks admitted with nothing in between."""
        index = data.draw(st.sampled_from(self.idle()))
        now = self.clock(index)
        before = self.mark()
        admitted = self.entry().run_due(now)
        assert len(admitted) <= self.schedule.catch_up
        mark = self.mark()
        assert mark is not None
        if before is None or before > now + MARK_AHEAD_LIMIT_MS:
            assert (admitted, mark) == ([], now), "a new or far-ahead mark restarts at the pass"
        else:
            ticks = [admission.tick_ms for admission in admitted]
            assert ticks == self.schedule.due(before, now)[0], "a due tick was held back"
        latest = Schedule("latest", self.schedule.cron).due(START - 10**9, now)[0]
        assert not latest or mark >= latest[-1], "a completed pass leaves the mark at its tick"

    @precondition(lambda self: self.idle())
    @rule(data=st.data())
    def a_pass_reads_the_mark(self, data: st.DataObject) -> None:
        """A pass that stalls after reading the mark: others may pass before it admits."""
        index = data.draw(st.sampled_from(self.idle()))
        self.plans[index] = self.entry().plan(self.clock(index))
        assert len(self.plans[index]) <= self.schedule.catch_up

    @precondition(lambda self: self.stalled())
    @rule(data=st.data())
    def a_stalled_pass_admits_its_next_tick(self, data: st.DataObject) -> None:
        """It finds the mark again first: a tick others admitted meanwhile is left alone."""
        index = data.draw(st.sampled_from(self.stalled()))
        tick = self.plans[index].pop(0)
        mark = self.mark()
        admitted = self.entry().admit_tick(tick)
        assert (admitted is None) == (mark is not None and mark >= tick)

    @precondition(lambda self: self.idle())
    @rule(data=st.data(), other=st.integers(0, SCHEDULERS - 1))
    def a_pass_overtaken_in_its_admission(self, data: st.DataObject, other: int) -> None:
        """Between a pass's last look at the mark and its enqueue, another whole pass runs (on
        its own clock): the row makes the late enqueue a DUPLICATE, and the mark stays up."""
        index = data.draw(st.sampled_from(self.idle()))
        self.marks_seen = []
        self.entry(overtaken_by=other).run_due(self.clock(index))
        mark = self.mark()
        assert all(seen is not None and mark is not None and mark >= seen
                   for seen in self.marks_seen), "the late admission moved the mark down"

    @precondition(lambda self: any(self.alive))
    @rule(data=st.data())
    def dies_right_after_an_admission(self, data: st.DataObject) -> None:
        """Dies between a tick's admission and its mark (mid-pass), or idle when its pass has
        nothing left to admit."""
        index = data.draw(st.sampled_from([i for i in range(SCHEDULERS) if self.alive[i]]))
        self.alive[index] = False
        plan = self.plans[index] or self.entry().plan(self.clock(index))
        self.plans[index] = []
        mark = self.mark()
        plan = [tick for tick in plan if mark is None or tick > mark]
        if plan:
            with pytest.raises(Killed):
                self.entry(die=True).admit_tick(plan[0])

    @precondition(lambda self: not all(self.alive))
    @rule(data=st.data())
    def comes_back(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from([i for i in range(SCHEDULERS) if not self.alive[i]]))
        self.alive[index] = True

    @precondition(lambda self: self.skews[0] != self.skews[1])
    @rule()
    def the_clock_far_off_is_set_right(self) -> None:
        """The first scheduler's clock is set to the second's (a clock ahead goes back, one
        behind jumps forward); the slowest clock never goes back."""
        self.skews[0] = self.skews[1]

    @rule()
    def a_worker_runs_the_jobs(self) -> None:
        """Runs what is pending. A done job's tombstone vanishes once the mark is past its tick
        and no stalled pass still means to admit it: the shortest retention the design allows
        (the row is what guards a death before the mark, and a stall after reading it). Once a
        clock has been further off than the limit, the row is what guards a tick after a mark
        lowered to a clock: it is kept until the slowest clock is past its tick too."""
        mark = self.mark() or 0
        while (job := self.queue.claim(now=self.time)) is not None:
            self.queue.ack(job)
        planned = {self.schedule.job_id(tick) for plan in self.plans for tick in plan}
        # ids of one schedule sort as their ticks do
        kept_after = self.schedule.job_id(min(mark, self.slowest_clock()) if self.apart
                                          else mark)
        for job_id in self.enqueued:
            if job_id <= kept_after and job_id not in planned:
                self.conn.delete(self.queue.key("job", job_id))

    # invariants --------------------------------------------------------------------------------

    @invariant()
    def no_tick_admitted_twice(self) -> None:
        assert all(n == 1 for n in self.enqueued.values()), self.enqueued

    @invariant()
    def the_mark_only_grows_but_when_far_ahead_of_a_clock(self) -> None:
        mark = self.mark()
        if self.last_mark is not None:
            assert mark is not None
            assert mark >= self.last_mark or any(
                self.last_mark > self.clock(i) + MARK_AHEAD_LIMIT_MS and mark >= self.clock(i)
                for i in range(SCHEDULERS)), (self.last_mark, mark)
        self.last_mark = mark

    @invariant()
    def every_tick_up_to_the_mark_was_admitted(self) -> None:
        mark = self.mark()
        if mark is None:
            return
        if self.start is None:
            self.start = mark  # the first pass: no step writes the mark twice before this
        if self.lowest_mark is None or mark < self.lowest_mark:
            self.lowest_mark = mark  # the start, or a clock a far-ahead mark was lowered to
        admissible = self.ticks_up_to_the_mark(self.lowest_mark, mark)
        assert set(self.enqueued) <= admissible | self.beyond_mark(mark)
        if self.schedule.catch_up == ALL:
            assert self.ticks_up_to_the_mark(self.start, mark) <= set(self.enqueued)

    def ticks_up_to_the_mark(self, after: int, mark: int) -> set[str]:
        """The ids of the ticks in (after, mark]."""
        upto = set()
        for tick in self.schedule.ticks(after):
            if tick > mark:
                break
            upto.add(self.schedule.job_id(tick))
        return upto

    def beyond_mark(self, mark: int) -> set[str]:
        """Ticks admitted by a pass that died before its mark moved past them."""
        return {job_id for job_id in self.enqueued if job_id > self.schedule.job_id(mark)}


STATEFUL = settings(max_examples=200, stateful_step_count=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_skewed_schedulers_dying_mid_pass_admit_each_tick_once(valkey: EmbeddedValkey) -> None:
    run_state_machine_as_test(lambda: SchedulerFleet(valkey.port), settings=STATEFUL)


class Pick:
    """Stands in for hypothesis's data in a rule run by hand: every draw is this scheduler."""

    def __init__(self, index: int) -> None:
        self.index = index

    def draw(self, strategy: object) -> int:
        return self.index


def pick(index: int) -> st.DataObject:
    return cast(st.DataObject, Pick(index))


def holds(fleet: SchedulerFleet) -> None:
    fleet.every_tick_up_to_the_mark_was_admitted()
    fleet.no_tick_admitted_twice()
    fleet.the_mark_only_grows_but_when_far_ahead_of_a_clock()


def test_a_stalled_pass_raises_a_mark_a_clock_far_behind_lowered_below_the_start(
        valkey: EmbeddedValkey) -> None:
    """A tick every 2 s, clocks at the true time but the first, 355.213 s behind. The first pass
    (a true clock) starts the schedule at START; 35.21 s on, another true clock reads the mark
    and stalls with the 17 ticks due; the clock behind finds the mark 320.003 s ahead and lowers
    it to its now, 320 s before the start; the stalled pass then admits its first tick and
    raises the mark past the 160 ticks between the lowered mark and the start. Those ticks were
    never the schedule's (they are before its first pass), so passing over them loses nothing:
    what is promised is every tick from the start up to the mark, each once, and the lowered
    mark holding no true clock back. The ticks after a lowered mark that a pass does admit (as
    for a schedule started there) are admitted once too, the ones already run DUPLICATEs."""
    fleet = SchedulerFleet(valkey.port)
    try:
        fleet.setup(cron="*/2 * * * * *", skews=[0, 0, 0], far=-355_213, catch_up=ALL)
        holds(fleet)
        fleet.a_pass_reads_the_mark(pick(2))  # the first pass: the schedule starts at START
        assert fleet.mark() == START and fleet.plans[2] == []
        holds(fleet)
        fleet.time_passes(35_210)
        holds(fleet)
        fleet.a_pass_reads_the_mark(pick(1))  # stalls with the ticks due on the true clock
        assert fleet.plans[1] == [START + 2_000 * n for n in range(1, 18)]
        holds(fleet)
        lowered = fleet.clock(0)
        fleet.a_pass(pick(0))  # the clock behind: the mark is 320 s ahead of it
        assert fleet.mark() == lowered == START - 320_003
        holds(fleet)
        fleet.a_stalled_pass_admits_its_next_tick(pick(1))
        assert fleet.mark() == START + 2_000
        assert fleet.enqueued == {fleet.schedule.job_id(START + 2_000): 1}
        holds(fleet)  # the ticks in (START - 320_003, START] are not owed
        while fleet.plans[1]:
            fleet.a_stalled_pass_admits_its_next_tick(pick(1))
            holds(fleet)
        assert fleet.mark() == START + 34_000
        fleet.a_pass(pick(0))  # lowered again: its clock is still 355 s behind
        holds(fleet)
        fleet.a_pass(pick(2))  # a true clock admits every tick after it, each once
        assert set(fleet.enqueued) == fleet.ticks_up_to_the_mark(lowered, START + 34_000)
        assert len(fleet.enqueued) == 161 + 17  # those of the start and before it, then the rest
        holds(fleet)
        fleet.the_clock_far_off_is_set_right()
        for _ in range(3):
            fleet.time_passes(2_000)
            fleet.a_pass(pick(0))
            holds(fleet)
        assert fleet.mark() == START + 40_000  # the true time is START + 41.21 s
    finally:
        fleet.teardown()
