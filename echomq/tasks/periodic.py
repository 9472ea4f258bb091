"""Periodic jobs: cron schedules run by the workers themselves, with no single beat process.

Every scheduler that knows a schedule computes the same ticks from its cron expression, and
admits each tick under a job id made of the schedule's name and the tick's time
(``JOB:cron:<name>:<UTC time>``), so the queue's admit-once rule makes any number of schedulers
produce one job per tick. Beside that id each schedule keeps a mark: the zset
``emq:{q}:periodic`` of the queue the schedule is kept on holds, per schedule name, the time of
the latest tick admitted (ms). The mark grows (``ZADD GT``; it is lowered only when far ahead
of a clock, below), is written after the tick's admission, and is read again just before it, so:

- a tick at or before the mark is never admitted again, however late a scheduler (or its clock,
  within ``MARK_AHEAD_LIMIT_MS``) comes to it, and whether or not the job's tombstone is still
  there;
- two windows are left to the job's row (live, dead, or its tombstone, kept for the queue's
  retention, 24 h by default), which turns a second admission into a DUPLICATE: a scheduler
  that dies between a tick's admission and the mark's write (the next pass of any scheduler
  admits the tick again), and one that stalls between its last read of the mark and its
  enqueue. Only a window longer than the retention can run a tick twice.

Catch-up: a pass admits the ticks after the mark up to now, oldest first, but at most the latest
``catch_up`` of them (1 by default): after downtime the missed ticks are coalesced into the
latest one, which runs once however late (the ticks before it are skipped, and logged). A
schedule that has no mark yet starts at the first scheduler's pass: ticks after it are admitted,
none before.

Clocks: a scheduler reads the server's clock (``TIME``) unless given another, so every scheduler
of one server agrees on what is due and a skewed host clock only shifts when a scheduler wakes.
Should clocks disagree anyway (a failover to a server whose clock differs, or schedulers given
their own clocks), the id and the mark keep one job per tick: a scheduler ahead admits a tick
early (once: the id), one behind finds the mark past it. A skew longer than a schedule's period
looks like downtime to the scheduler behind, and the catch-up rule applies. A skew has a cost:
the ticks a clock ahead passed over as downtime never run, and the mark it leaves holds every
other scheduler back until their clocks reach it — for at most ``MARK_AHEAD_LIMIT_MS``. A mark
further ahead of a scheduler's clock than that is taken for a clock's error: the scheduler
lowers it to its own now (``ZADD XX LT``), as if the schedule were new there, and the ticks
after that are admitted as they come due; those of them before the schedule's first pass (a
clock that far behind lowers the mark below it) may run then, or not: a pass that read the mark
before it was lowered may raise it past them first. The ticks the clock ahead admitted early
keep their rows, so admitting them again when they come due is a DUPLICATE: under such a skew
it is the row, not the mark, that keeps a tick to one job, as long as the skew is shorter than
the queue's retention.

Time zones: a schedule's cron expression is read in its zone (UTC by default; any IANA name);
the job id always names the tick in UTC. In zones with daylight saving time the ticks follow
Debian cron's rules as cronsim implements them: a fixed-time tick in the skipped hour runs at
the end of the gap, and one in the repeated hour runs once.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from echomq.engine.calls import Payload
from echomq.engine.native import id_ok
from echomq.engine.server_time import server_ms
from echomq.queue.blocking import Queue

__all__ = ["MARK_AHEAD_LIMIT_MS", "Admission", "Periodic", "Schedule", "Scheduler"]

log = logging.getLogger("echomq.tasks.periodic")

MARK_ROLE = "periodic"
ID_PREFIX = "JOB:cron:"
STAMP = "%Y%m%dT%H%M%SZ"
NAME_RULE = "1 to 178 bytes of A-Z a-z 0-9 . _ : -"
# How far back a pass looks, widening until it has seen catch_up + 1 ticks or reached the mark:
# a minute, an hour, a day, 32 days, 400 days, 10 years; the mark itself after that.
PROBE_SPANS_MS = (60_000, 3_600_000, 86_400_000, 32 * 86_400_000, 400 * 86_400_000,
                  3653 * 86_400_000)
# A mark at most this far ahead of a scheduler's clock holds it back (a clock a little ahead
# admitted those ticks early); one further ahead is lowered to that scheduler's now.
MARK_AHEAD_LIMIT_MS = 300_000


@dataclass(frozen=True)
class Schedule:
    """When a periodic job falls due: a cron expression (5 fields, or 6 with seconds first) read
    in time zone ``tz``, under ``name``, which names its ticks' job ids and its mark.
    ``catch_up``: how many ticks missed while no scheduler ran are admitted (the latest ones)."""

    name: str
    cron: str
    tz: str = "UTC"
    catch_up: int = 1

    def __post_init__(self) -> None:
        if not self.name or not id_ok(self.job_id(0)):
            raise ValueError(f"schedule name must be {NAME_RULE}: {self.name!r}")
        if type(self.catch_up) is not int or self.catch_up < 1:
            raise ValueError(f"catch_up must be an int from 1: {self.catch_up!r}")
        try:
            self.zone  # noqa: B018  (reads the zone to check it)
            CronSim(self.cron, datetime.fromtimestamp(0, self.zone))
        except ZoneInfoNotFoundError as exc:
            raise ValueError(f"unknown time zone {self.tz!r}") from exc
        except (CronSimError, ValueError) as exc:
            raise ValueError(f"bad cron expression {self.cron!r}: {exc}") from exc

    @cached_property
    def zone(self) -> tzinfo:
        return UTC if self.tz == "UTC" else ZoneInfo(self.tz)

    def job_id(self, tick_ms: int) -> str:
        """The id every scheduler gives the tick at ``tick_ms``: the name and the UTC time."""
        stamp = datetime.fromtimestamp(tick_ms // 1000, UTC).strftime(STAMP)
        return f"{ID_PREFIX}{self.name}:{stamp}"

    def ticks(self, after_ms: int) -> Iterator[int]:
        """The ticks after ``after_ms`` (ms, whole seconds), in order; for ever, or until cron
        finds none for 50 years. A start inside a repeated hour can make cronsim answer a tick
        before it: such ticks are dropped, so every start agrees on the ticks after it."""
        start = datetime.fromtimestamp(after_ms // 1000, self.zone)
        for moment in CronSim(self.cron, start):
            tick = int(moment.timestamp()) * 1000
            if tick > after_ms:
                yield tick

    def next_tick(self, after_ms: int) -> int | None:
        """The first tick after ``after_ms``; None when there is none."""
        return next(self.ticks(after_ms), None)

    def due(self, mark_ms: int, now_ms: int) -> tuple[list[int], bool]:
        """The ticks after ``mark_ms`` up to ``now_ms`` to admit (the latest ``catch_up``,
        oldest first), and whether earlier ones are skipped. Looks back only as far as it must,
        so a mark years old costs no walk over all its ticks."""
        for span in (*PROBE_SPANS_MS, None):
            start = mark_ms if span is None else max(mark_ms, now_ms - span)
            seen = self._latest(start, now_ms)
            if len(seen) > self.catch_up or start == mark_ms:
                admit = list(seen)[-self.catch_up:]
                return admit, len(seen) > len(admit)
        raise AssertionError("unreachable: the last probe starts at the mark")

    def _latest(self, after_ms: int, now_ms: int) -> deque[int]:
        """The last catch_up + 1 ticks in (after_ms, now_ms]."""
        seen: deque[int] = deque(maxlen=self.catch_up + 1)
        for tick in self.ticks(after_ms):
            if tick > now_ms:
                break
            seen.append(tick)
        return seen


@dataclass(frozen=True)
class Admission:
    """One tick a scheduler's pass admitted (or found admitted: a DUPLICATE is one too)."""

    name: str
    tick_ms: int
    job_id: str


Admit = Callable[[str, int], object]


@dataclass(frozen=True)
class Periodic:
    """A schedule bound to its queue (where its mark lives) and to ``admit(job_id, tick_ms)``,
    which admits one tick's job under that id (idempotent: enqueue, or a task's enqueue)."""

    schedule: Schedule
    queue: Queue
    admit: Admit

    @classmethod
    def of_payload(cls, schedule: Schedule, queue: Queue, payload: Payload, *,
                   lane: str | None = None) -> Periodic:
        """Each tick admits ``payload`` to ``queue`` (to ``lane`` when given)."""
        def admit(job_id: str, tick_ms: int) -> object:
            return queue.enqueue(job_id, payload, lane=lane)
        return cls(schedule, queue, admit)

    @classmethod
    def of_task(cls, schedule: Schedule, task: Any, args: Sequence[Any] = (),
                kwargs: Mapping[str, Any] | None = None) -> Periodic:
        """Each tick enqueues ``task(*args, **kwargs)`` (an ``echomq.App`` task) under the
        tick's id, to the task's queue, where the mark lives too."""
        fixed_kwargs = dict(kwargs or {})

        def admit(job_id: str, tick_ms: int) -> object:
            return task.with_options(job_id=job_id).enqueue(*args, **fixed_kwargs)
        return cls(schedule, task.app.queue_named(task.queue), admit)

    @property
    def mark_key(self) -> str:
        return self.queue.key(MARK_ROLE)

    def mark(self) -> int | None:
        """The latest tick admitted (ms); None for a schedule never seen."""
        score = self.queue.conn.zscore(self.mark_key, self.schedule.name)
        return None if score is None else int(score)

    def run_due(self, now_ms: int) -> list[Admission]:
        """One pass at ``now_ms``: admit the due ticks, each followed by the mark's advance."""
        admitted = (self.admit_tick(tick) for tick in self.plan(now_ms))
        return [admission for admission in admitted if admission is not None]

    def plan(self, now_ms: int) -> list[int]:
        """The ticks a pass at ``now_ms`` admits, by the mark as it reads now. A schedule never
        seen before is marked at ``now_ms`` and has none; so has one whose mark is more than
        ``MARK_AHEAD_LIMIT_MS`` ahead of ``now_ms``, which is lowered to ``now_ms`` (never
        raised: another pass may have lowered it further, or admitted a tick since)."""
        name = self.schedule.name
        mark = self.mark()
        if mark is None:
            self.queue.conn.zadd(self.mark_key, {name: now_ms}, nx=True)
            return []
        if mark > now_ms + MARK_AHEAD_LIMIT_MS:
            log.warning("schedule %s: its mark is %.0f s ahead of this scheduler's clock (a "
                        "clock ahead wrote it); lowered to now", name, (mark - now_ms) / 1000)
            self.queue.conn.zadd(self.mark_key, {name: now_ms}, xx=True, lt=True)
            return []
        ticks, skipped = self.schedule.due(mark, now_ms)
        if skipped:
            log.warning("schedule %s: ticks missed before %s are skipped (catch_up=%d)",
                        name, self.schedule.job_id(ticks[0]), self.schedule.catch_up)
        return ticks

    def admit_tick(self, tick_ms: int) -> Admission | None:
        """Admit the tick's job, then move the mark up to it; None, admitting nothing, when the
        mark is already there (another scheduler's pass got there first). The mark never moves
        down: another pass may move it further between the read and the write."""
        mark = self.mark()
        if mark is not None and mark >= tick_ms:
            return None
        job_id = self.schedule.job_id(tick_ms)
        self.admit(job_id, tick_ms)
        self.queue.conn.zadd(self.mark_key, {self.schedule.name: tick_ms}, gt=True)
        return Admission(self.schedule.name, tick_ms, job_id)


Clock = Callable[[Any], int]


class Scheduler:
    """Runs periodic schedules: ``run_due`` once, or ``run`` until stopped (in a thread with
    ``start``). Any number of schedulers may run the same schedules: each tick is one job.

    ``clock(conn)`` gives a schedule's now in ms (the server's clock by default); ``max_wait_s``
    bounds the wait between passes (so a clock that jumps is noticed), ``retry_s`` the wait after
    a pass that failed."""

    def __init__(self, entries: Iterable[Periodic] = (), *, clock: Clock = server_ms,
                 max_wait_s: float = 60.0, retry_s: float = 1.0) -> None:
        self.entries: list[Periodic] = []
        self.clock = clock
        self.max_wait_s = max_wait_s
        self.retry_s = retry_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for entry in entries:
            self.add(entry)

    def add(self, entry: Periodic) -> None:
        """Run ``entry`` too; ValueError if a schedule of that name has its mark on that queue."""
        if any(e.schedule.name == entry.schedule.name and e.mark_key == entry.mark_key
               for e in self.entries):
            raise ValueError(f"schedule {entry.schedule.name!r} is already added")
        self.entries.append(entry)

    def run_due(self) -> list[Admission]:
        """One pass over every schedule at its clock's now."""
        return [a for entry in self.entries for a in entry.run_due(self.clock(entry.queue.conn))]

    def seconds_to_next(self) -> float:
        """How long until the earliest next tick (at most ``max_wait_s``)."""
        waits = [self.max_wait_s]
        for entry in self.entries:
            now = self.clock(entry.queue.conn)
            tick = entry.schedule.next_tick(now)
            if tick is not None:
                waits.append(max(0.0, (tick - now) / 1000))
        return min(waits)

    def beat(self) -> float:
        """One pass, then how long to wait before the next. Never raises: a server error or a
        failing admit is logged, and the pass is tried again after ``retry_s`` (the worker the
        scheduler runs in must not die of it)."""
        try:
            self.run_due()
            return self.seconds_to_next()
        except Exception:
            log.exception("periodic pass failed; trying again in %ss", self.retry_s)
            return self.retry_s

    def run(self, wait: Callable[[float], bool] | None = None) -> None:
        """Pass, wait until the next tick, repeat, until ``stop``. ``wait(seconds)`` returns
        True to stop (default: the stop event's wait)."""
        wait = wait or self._stop.wait
        while not self._stop.is_set():
            if wait(self.beat()):
                return

    def start(self) -> threading.Thread:
        """Run in a daemon thread; ``stop`` ends it."""
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="echomq-periodic", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout_s: float = 5.0) -> None:
        """End ``run`` at its next wait, and join the thread ``start`` began."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
