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

from echomq import admin

log = logging.getLogger("echomq.dashboard")


@dataclass(frozen=True)
class Sample:
    at_ms: int
    pending: int
    active: int
    delayed: int
    dead: int
    in_lanes: int

    @property
    def backlog(self) -> int:
        """Jobs ready to run: pending plus those waiting in lanes."""
        return self.pending + self.in_lanes

    def as_row(self) -> list[int]:
        return [self.at_ms, self.pending, self.active, self.delayed, self.dead, self.in_lanes]


def sample_of(stats: admin.QueueStats) -> Sample:
    return Sample(stats.server_time_ms, stats.pending, stats.active, stats.delayed, stats.dead,
                  sum(stats.lanes.values()))


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

    def sample(self, found: list[admin.QueueStats] | None = None) -> None:
        """Record one sample of every queue (read now unless ``found`` is given)."""
        if found is None:
            found = [admin.stats(self.conn, name) for name in admin.queue_names(self.conn)]
        with self._lock:
            for stats in found:
                series = self._series.setdefault(stats.name, deque(maxlen=self._maxlen))
                series.append(sample_of(stats))

    def series(self) -> dict[str, list[list[int]]]:
        """Every queue's samples as rows ``[at_ms, pending, active, delayed, dead, in_lanes]``."""
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
