"""The dashboard's memory: depths of every queue sampled on a fixed beat and kept for an hour, so
the charts have a past when a page opens, and rates can be told from the change between samples.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from echomq.consumer.roster import WorkerInfo, live_workers
from echomq.ops import admin

log = logging.getLogger("echomq.ops.dashboard")


@dataclass(frozen=True)
class Sample:
    at_ms: int
    pending: int
    active: int
    delayed: int
    dead: int
    in_lanes: int
    done: int = 0  # jobs done and attempts failed so far by the live workers serving the queue
    failed: int = 0

    @property
    def backlog(self) -> int:
        """Jobs ready to run: pending plus those waiting in lanes."""
        return self.pending + self.in_lanes

    def as_row(self) -> list[int]:
        return [self.at_ms, self.pending, self.active, self.delayed, self.dead, self.in_lanes,
                self.done, self.failed]


COLUMNS = ["at_ms", "pending", "active", "delayed", "dead", "in_lanes", "done", "failed"]


def sample_of(stats: admin.QueueStats, counts: tuple[int, int] = (0, 0)) -> Sample:
    return Sample(stats.server_time_ms, stats.pending, stats.active, stats.delayed, stats.dead,
                  sum(stats.lanes.values()), *counts)


def worker_counts(workers: list[WorkerInfo]) -> dict[str, tuple[int, int]]:
    """Each queue's jobs done and attempts failed, summed over the live workers serving it
    (a worker of several queues counts for each): the page reads throughput and failures per
    minute from how these grow between samples."""
    counts: dict[str, tuple[int, int]] = {}
    for worker in workers:
        for queue in worker.queues or [worker.queue]:
            done, failed = counts.get(queue, (0, 0))
            counts[queue] = (done + worker.done, failed + worker.failed)
    return counts


class History:
    """The last ``keep_s`` seconds of samples per queue, one every ``interval_s`` seconds, taken
    by a daemon thread (``start``) or by calling ``sample`` (tests pass their own stats)."""

    def __init__(self, conn: Any, *, interval_s: float = 5.0, keep_s: float = 3600.0) -> None:
        self.conn = conn
        self.interval_s = interval_s
        self._maxlen = max(2, int(keep_s / interval_s) + 1)
        self._series: dict[str, deque[Sample]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self, found: list[admin.QueueStats] | None = None,
               workers: list[WorkerInfo] | None = None) -> None:
        """Record one sample of every queue (read now unless ``found`` is given), with the
        counts of ``workers`` (the live ones, read now, unless given with ``found``)."""
        if found is None:
            found = [admin.stats(self.conn, name) for name in admin.queue_names(self.conn)]
            workers = live_workers(self.conn) if workers is None else workers
        counts = worker_counts(workers or [])
        with self._lock:
            for stats in found:
                series = self._series.setdefault(stats.name, deque(maxlen=self._maxlen))
                series.append(sample_of(stats, counts.get(stats.name, (0, 0))))

    def series(self) -> dict[str, list[list[int]]]:
        """Every queue's samples as rows of ``COLUMNS``."""
        with self._lock:
            return {name: [s.as_row() for s in samples] for name, samples in self._series.items()}

    def rates(self, name: str, window_ms: int = 60_000) -> dict[str, float | None]:
        """Per minute over the last ``window_ms``: how the backlog changed (negative: it drains)
        and how many jobs went dead (rises of the dead set only; a purge is not a negative
        failure). None until two samples span some time."""
        with self._lock:
            samples = list(self._series.get(name, ()))
        if len(samples) < 2:
            return {"backlog_per_min": None, "dead_per_min": None}
        last = samples[-1]
        start = next(n for n, s in enumerate(samples) if s.at_ms >= last.at_ms - window_ms)
        window = samples[min(start, len(samples) - 2):]  # at least two samples
        minutes = max(last.at_ms - window[0].at_ms, 1) / 60_000
        died = sum(max(0, later.dead - earlier.dead)
                   for earlier, later in pairwise(window))
        return {"backlog_per_min": round((last.backlog - window[0].backlog) / minutes, 2),
                "dead_per_min": round(died / minutes, 2)}

    def start(self) -> None:
        """Sample now and then every ``interval_s`` in a daemon thread (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="echomq-dashboard-sampler",
                                            daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # the sampler outlives a server that is briefly away
                log.warning("dashboard sampler could not read the queues", exc_info=True)
            if self._stop.wait(self.interval_s):
                return
