"""Periodic schedules: ticks, ids, the catch-up rule, time zones, and several schedulers at once
(skewed clocks, one killed in the middle of a pass) making one job per tick. Clocks are explicit:
every scheduler here reads a function of the test's own time, never the wall clock."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from hypothesis import given, settings, strategies as st

from echomq import Queue, Verdict
from echomq.tasks.periodic import MARK_AHEAD_LIMIT_MS, Admission, Periodic, Schedule, Scheduler

MINUTE = 60_000


def ms(*parts: int, tz: str = "UTC") -> int:
    """The epoch ms of a wall-clock time in ``tz``."""
    return int(datetime(*parts, tzinfo=ZoneInfo(tz)).timestamp()) * 1000  # type: ignore[misc]


T0 = ms(2026, 11, 30, 7, 0)


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Iterator[Queue]:
    yield Queue(conn, "reports", wire=request.param)


class Recorder:
    """Admits each tick to ``queue`` and counts the verdicts by job id."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.verdicts: Counter[tuple[str, Verdict]] = Counter()

    def admit(self, job_id: str, tick_ms: int) -> Verdict:
        verdict = self.queue.enqueue(job_id, b"tick %d" % tick_ms)
        self.verdicts[job_id, verdict] += 1
        return verdict

    def enqueued(self) -> Counter[str]:
        return Counter({job_id: n for (job_id, verdict), n in self.verdicts.items()
                        if verdict is Verdict.ENQUEUED})


def fixed(now: int) -> Callable[[Any], int]:
    return lambda conn: now


# the schedule --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"name": "", "cron": "* * * * *"},
    {"name": "a b", "cron": "* * * * *"},
    {"name": "x" * 179, "cron": "* * * * *"},
    {"name": "ok", "cron": "61 * * * *"},
    {"name": "ok", "cron": "* * * *"},
    {"name": "ok", "cron": "* * * * *", "tz": "Mars/Olympus"},
    {"name": "ok", "cron": "* * * * *", "catch_up": 0},
])
def test_a_bad_schedule_is_refused_with_a_clear_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"schedule name|cron expression|time zone|catch_up"):
        Schedule(**kwargs)


def test_a_tick_id_names_the_schedule_and_the_utc_time() -> None:
    schedule = Schedule("nightly.report", "0 3 * * *", tz="Europe/Paris")
    tick = schedule.next_tick(T0)
    assert tick == ms(2026, 12, 1, 3, tz="Europe/Paris")
    assert schedule.job_id(tick) == "JOB:cron:nightly.report:20261201T020000Z"
    assert Schedule("x" * 178, "* * * * *").job_id(T0).startswith("JOB:cron:xxx")


def test_ticks_follow_the_zone_across_daylight_saving() -> None:
    berlin = Schedule("b", "30 2 * * *", tz="Europe/Berlin")
    spring = until(berlin.ticks(ms(2026, 3, 28, 12)), ms(2026, 3, 31))
    # 02:30 does not exist on 29 March: the tick runs at the end of the gap, 03:00 local
    assert list(spring) == [ms(2026, 3, 29, 1), ms(2026, 3, 30, 0, 30)]
    autumn = until(berlin.ticks(ms(2026, 10, 24, 12)), ms(2026, 10, 26))
    assert list(autumn) == [ms(2026, 10, 25, 0, 30)]  # 02:30 happens twice that day: one tick
    assert Schedule("u", "30 2 * * *").next_tick(ms(2026, 3, 28, 12)) == ms(2026, 3, 29, 2, 30)


@settings(max_examples=300, deadline=None)
@given(zone=st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
       cron=st.sampled_from(["30 2 * * *", "0 * * * *", "*/20 2 * * *", "30 1 * * *",
                             "15 1-3 * * *", "*/7 * * * *", "0 2 * * SUN"]),
       start=st.integers(ms(2026, 3, 1), ms(2026, 12, 1)))
def test_every_start_agrees_on_the_ticks_after_it(zone: str, cron: str, start: int) -> None:
    """Schedulers start their walks at different times (their marks, their nows): each must see
    the same ticks, or one tick could get two ids. Starts inside a repeated hour included."""
    schedule = Schedule("s", cron, tz=zone)
    day_before = start - start % 86_400_000 - 86_400_000
    horizon = start + 3 * 86_400_000
    reference = [t for t in until(schedule.ticks(day_before), horizon) if t > start]
    assert list(until(schedule.ticks(start), horizon)) == reference


def until(ticks: Iterator[int], end: int) -> Iterator[int]:
    for tick in ticks:
        if tick > end:
            return
        yield tick


def test_catch_up_admits_the_latest_missed_ticks_only() -> None:
    every_minute = Schedule("m", "* * * * *")
    assert every_minute.due(T0, T0 + 10 * MINUTE + 5) == ([T0 + 10 * MINUTE], True)
    assert every_minute.due(T0, T0 + MINUTE) == ([T0 + MINUTE], False)
    assert every_minute.due(T0, T0 + MINUTE - 1) == ([], False)
    three = Schedule("m", "* * * * *", catch_up=3)
    assert three.due(T0, T0 + 10 * MINUTE) == ([T0 + m * MINUTE for m in (8, 9, 10)], True)
    assert three.due(T0, T0 + 2 * MINUTE) == ([T0 + MINUTE, T0 + 2 * MINUTE], False)
    assert three.due(T0 + 5 * MINUTE, T0) == ([], False)  # a mark ahead of this clock


@pytest.mark.timeout(20)
def test_catch_up_after_years_looks_back_only_as_far_as_it_must() -> None:
    """A per-second schedule whose mark is ten years old: walking its 315 million ticks would
    take minutes; the pass looks back a minute, sees enough, and stops."""
    every_second = Schedule("s", "* * * * * *", catch_up=2)
    ten_years_ago = T0 - 3653 * 86_400_000
    assert every_second.due(ten_years_ago, T0 + 500) == ([T0 - 1000, T0], True)
    yearly = Schedule("y", "0 0 1 1 *", catch_up=2)
    assert yearly.due(ms(2001, 6, 1), T0) == ([ms(2025, 1, 1), ms(2026, 1, 1)], True)
    assert yearly.due(ms(2025, 6, 1), T0) == ([ms(2026, 1, 1)], False)


# one scheduler on a real queue -----------------------------------------------------------

def test_a_new_schedule_starts_at_its_first_pass_and_admits_each_tick_once(
        queue: Queue) -> None:
    recorder = Recorder(queue)
    entry = Periodic(Schedule("r", "*/5 * * * *"), queue, recorder.admit)
    assert entry.run_due(T0 + 30_000) == []  # first seen: nothing before now is admitted
    assert entry.mark() == T0 + 30_000
    assert entry.run_due(T0 + 4 * MINUTE) == []
    tick = T0 + 5 * MINUTE
    job_id = "JOB:cron:r:20261130T070500Z"
    assert entry.run_due(tick) == [Admission("r", tick, job_id)]
    assert entry.run_due(tick + 1) == []
    assert entry.mark() == tick
    assert recorder.enqueued() == {job_id: 1}
    assert queue.conn.zscore(queue.key("periodic"), "r") == tick
    assert queue.conn.hget(queue.key("job", job_id), "p") == b"tick %d" % tick


def test_of_payload_admits_the_payload_to_the_queue_or_a_lane(conn: redis.Redis) -> None:
    queue = Queue(conn, "q")
    flat = Periodic.of_payload(Schedule("flat", "* * * * *"), queue, b"p")
    laned = Periodic.of_payload(Schedule("laned", "* * * * *"), queue, b"l", lane="t1")
    scheduler = Scheduler([flat, laned], clock=fixed(T0))
    assert scheduler.run_due() == []
    scheduler.clock = fixed(T0 + MINUTE)
    assert [a.name for a in scheduler.run_due()] == ["flat", "laned"]
    assert queue.counts()["pending"] == 1
    assert queue.lane_depths() == {"t1": 1}


def test_the_same_schedule_twice_on_one_queue_is_refused(conn: redis.Redis) -> None:
    queue = Queue(conn, "q")
    scheduler = Scheduler([Periodic.of_payload(Schedule("a", "* * * * *"), queue, b"")])
    with pytest.raises(ValueError, match="already added"):
        scheduler.add(Periodic.of_payload(Schedule("a", "0 * * * *"), queue, b""))
    scheduler.add(Periodic.of_payload(Schedule("a", "0 * * * *"), Queue(conn, "other"), b""))


def test_downtime_is_coalesced_into_the_latest_tick(queue: Queue,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder(queue)
    entry = Periodic(Schedule("r", "* * * * *"), queue, recorder.admit)
    entry.run_due(T0)
    with caplog.at_level(logging.WARNING, "echomq.tasks.periodic"):
        admitted = entry.run_due(T0 + 90 * MINUTE + 7_000)  # back after an hour and a half
    assert [a.tick_ms for a in admitted] == [T0 + 90 * MINUTE]
    assert "ticks missed before JOB:cron:r:20261130T083000Z are skipped" in caplog.text
    assert entry.run_due(T0 + 91 * MINUTE) == [Admission("r", T0 + 91 * MINUTE,
                                                         "JOB:cron:r:20261130T083100Z")]


def test_a_mark_far_ahead_of_a_clock_is_lowered_to_it_and_holds_back_no_due_tick(
        queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    """A clock an hour ahead passes for 3 s, then one on the true time: it lowers the mark to its
    now and admits every second from there; the ticks admitted an hour early are DUPLICATEs
    when they come due."""
    recorder = Recorder(queue)
    every_second = Schedule("r", "* * * * * *")
    entry = Periodic(every_second, queue, recorder.admit)
    hour = 60 * MINUTE
    entry.run_due(T0 + hour)
    early = [a.tick_ms for s in (1, 2, 3) for a in entry.run_due(T0 + hour + s * 1000)]
    assert early == [T0 + hour + s * 1000 for s in (1, 2, 3)]
    with caplog.at_level(logging.WARNING, "echomq.tasks.periodic"):
        assert entry.run_due(T0 + 3_500) == []
    assert "its mark is 3600 s ahead of this scheduler's clock" in caplog.text
    assert entry.mark() == T0 + 3_500
    on_time = [a.tick_ms for s in range(4, 12) for a in entry.run_due(T0 + s * 1000)]
    assert on_time == [T0 + s * 1000 for s in range(4, 12)]
    entry.run_due(T0 + hour + 1000)
    assert recorder.verdicts[every_second.job_id(T0 + hour + 1000), Verdict.DUPLICATE] == 1
    assert set(recorder.enqueued().values()) == {1}


def test_a_pass_stalled_across_a_lowering_by_a_clock_far_behind_admits_each_tick_once(
        queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    """A tick every 2 s; one clock 355.213 s behind the true one. The first pass, on the true
    clock, starts the schedule at T0; 35.21 s on, a pass on the true clock reads the mark and
    stalls with the 17 ticks due; the clock behind finds the mark 320.003 s ahead and lowers it
    to its now; then the stalled pass admits its ticks, none held back by the lowered mark, and
    raises the mark past the ticks between the lowered mark and the start, which never run: they
    are before the schedule's first pass. A later lowering lets a true clock admit every tick
    after the lowered mark, as for a schedule started there: the ones run already are
    DUPLICATEs, each tick is one job."""
    recorder = Recorder(queue)
    schedule = Schedule("r", "*/2 * * * * *", catch_up=1000)
    entry = Periodic(schedule, queue, recorder.admit)
    behind = -355_213
    assert entry.run_due(T0) == []
    true_now = T0 + 35_210
    stalled = entry.plan(true_now)
    due = [T0 + 2_000 * n for n in range(1, 18)]
    assert stalled == due
    with caplog.at_level(logging.WARNING, "echomq.tasks.periodic"):
        assert entry.run_due(true_now + behind) == []
    assert "its mark is 320 s ahead of this scheduler's clock" in caplog.text
    assert entry.mark() == true_now + behind == T0 - 320_003
    admitted = [entry.admit_tick(tick) for tick in stalled]
    assert [a.tick_ms for a in admitted if a is not None] == due  # the true clock held back none
    assert entry.mark() == due[-1]
    assert entry.run_due(true_now) == []
    assert recorder.enqueued() == {schedule.job_id(tick): 1 for tick in due}

    true_now += 1_000
    assert entry.run_due(true_now + behind) == []  # lowered again, to 319.003 s before the start
    lowered = T0 - 319_003
    assert entry.mark() == lowered
    again = [a.tick_ms for a in entry.run_due(true_now)]
    assert again == list(until(schedule.ticks(lowered), true_now))
    assert {job_id for (job_id, verdict) in recorder.verdicts
            if verdict is Verdict.DUPLICATE} == {schedule.job_id(tick) for tick in due}
    assert set(recorder.enqueued().values()) == {1}


def test_a_mark_ahead_within_the_limit_holds_a_clock_back(queue: Queue) -> None:
    entry = Periodic(Schedule("r", "* * * * * *"), queue, Recorder(queue).admit)
    entry.run_due(T0 + MARK_AHEAD_LIMIT_MS)
    assert entry.run_due(T0) == []
    assert entry.mark() == T0 + MARK_AHEAD_LIMIT_MS
    assert entry.run_due(T0 - 1) == []  # one ms further behind: lowered
    assert entry.mark() == T0 - 1


# many schedulers ---------------------------------------------------------------------------

class Killed(Exception):
    """The scheduler's process died right after this admission reached the server."""


class Fleet:
    """Schedulers of one schedule, each with its own clock: the true time plus its skew."""

    def __init__(self, queue: Queue, cron: str, skews_ms: list[int]) -> None:
        self.queue = queue
        self.recorder = Recorder(queue)
        self.schedule = Schedule("report", cron)
        self.skews = skews_ms
        self.alive = [True] * len(skews_ms)
        self.time = T0
        self.kill_after_admit: int | None = None

    def scheduler(self, index: int) -> Scheduler:
        def admit(job_id: str, tick_ms: int) -> object:
            verdict = self.recorder.admit(job_id, tick_ms)
            if self.kill_after_admit == index:
                self.alive[index] = False
                raise Killed(job_id)
            return verdict
        clock = lambda conn: self.time + self.skews[index]  # noqa: E731
        return Scheduler([Periodic(self.schedule, self.queue, admit)], clock=clock)

    def step(self, to_ms: int) -> None:
        """Advance the true time, let every live scheduler pass, then a worker runs what is
        pending (its tombstones expire at once once the mark is past them)."""
        self.time = to_ms
        for index, alive in enumerate(self.alive):
            if alive:
                try:
                    self.scheduler(index).run_due()
                except Killed:
                    self.kill_after_admit = None
        self.work()

    def work(self) -> None:
        mark = Periodic(self.schedule, self.queue, self.recorder.admit).mark() or 0
        while (job := self.queue.claim(now=self.time)) is not None:
            self.queue.ack(job)
            if tick_of(job.id) <= mark:
                self.queue.conn.delete(self.queue.key("job", job.id))


def tick_of(job_id: str) -> int:
    stamp = job_id.rsplit(":", 1)[1]
    return int(datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()) * 1000


def test_three_skewed_schedulers_one_killed_mid_pass_make_one_job_per_tick(
        queue: Queue) -> None:
    """Clocks 40 s behind, exact, and 25 s ahead; every 7 s of true time each live scheduler
    passes. At 08:00 the one ahead, which admitted every tick so far, dies right after admitting
    a tick, before its mark: the exact one admits that tick again and its row answers
    DUPLICATE. Tombstones vanish as soon as the
    mark is past their tick, so the scheduler behind never finds one to lean on: the mark alone
    keeps it from admitting a tick twice."""
    fleet = Fleet(queue, "* * * * *", [-40_000, 0, 25_000])
    fleet.step(T0)  # the clock behind passes first: the schedule starts at 06:59:20
    for now in range(T0 + 7_000, T0 + 2 * 60 * MINUTE, 7_000):
        if now == T0 + 60 * MINUTE - 23_000:  # its clock reads 08:00:02
            fleet.kill_after_admit = 2
        fleet.step(now)
    assert fleet.alive == [True, True, False]
    enqueued = fleet.recorder.enqueued()
    last = fleet.time  # the exact clock is the one ahead now
    expected = until(fleet.schedule.ticks(T0 - 40_000), last)
    assert list(enqueued) == [fleet.schedule.job_id(t) for t in expected]
    assert set(enqueued.values()) == {1}
    again = [j for (j, v) in fleet.recorder.verdicts if v is Verdict.DUPLICATE]
    assert again == [fleet.schedule.job_id(T0 + 60 * MINUTE)]  # the killed one's last tick


def test_the_tombstone_covers_a_death_between_admission_and_mark(queue: Queue) -> None:
    """The one window the mark does not cover: it is the row (kept for the retention) that
    turns the survivor's admission into a DUPLICATE."""
    fleet = Fleet(queue, "* * * * *", [0, 0])
    fleet.step(T0)
    fleet.kill_after_admit = 0
    fleet.time = T0 + MINUTE
    with pytest.raises(Killed):
        fleet.scheduler(0).run_due()
    job = queue.claim(now=fleet.time)
    assert job is not None
    queue.ack(job)  # done, its tombstone kept
    assert [a.job_id for a in fleet.scheduler(1).run_due()] == [job.id]
    assert fleet.recorder.enqueued() == {job.id: 1}


# the loop ------------------------------------------------------------------------------------

def test_run_waits_until_each_next_tick(conn: redis.Redis) -> None:
    queue = Queue(conn, "q")
    now = [T0 + 10_000]
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        now[0] += int(seconds * 1000)
        return len(waits) == 4

    entry = Periodic.of_payload(Schedule("m", "* * * * *"), queue, b"")
    Scheduler([entry], clock=lambda c: now[0], max_wait_s=45).run(wait)
    # 07:00:10 first seen, the next tick 50 s off (wait capped at 45); 07:00:55, 5 s to go;
    # 07:01:00 admits a tick, next 60 s off (45); 07:01:45, 15 s to go
    assert waits == [45, 5, 45, 15]
    assert queue.counts()["pending"] == 1


def test_a_failing_pass_is_logged_and_retried_never_raised(
        conn: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(conn, "q")
    calls = []

    def admit(job_id: str, tick_ms: int) -> object:
        calls.append(job_id)
        raise RuntimeError("enqueue exploded")

    scheduler = Scheduler([Periodic(Schedule("m", "* * * * *"), queue, admit)],
                          clock=fixed(T0), retry_s=0.25)
    scheduler.run_due()
    scheduler.clock = fixed(T0 + MINUTE)
    with caplog.at_level(logging.ERROR, "echomq.tasks.periodic"):
        assert scheduler.beat() == 0.25
    assert "enqueue exploded" in caplog.text
    assert calls == ["JOB:cron:m:20261130T070100Z"]
    conn.set(queue.key("periodic"), "not a zset")  # a server error: WRONGTYPE
    assert Scheduler([Periodic.of_payload(Schedule("m", "* * * * *"), queue, b"")],
                     clock=fixed(T0), retry_s=0.5).beat() == 0.5


def test_start_and_stop_a_scheduler_thread(conn: redis.Redis) -> None:
    queue = Queue(conn, "q")
    passed = threading.Event()
    scheduler = Scheduler([Periodic.of_payload(Schedule("h", "0 * * * *"), queue, b"")],
                          clock=lambda c: (passed.set(), T0)[1])
    thread = scheduler.start()
    assert passed.wait(10)
    scheduler.stop(timeout_s=10)
    assert not thread.is_alive()
    assert Periodic.of_payload(Schedule("h", "0 * * * *"), queue, b"").mark() == T0
