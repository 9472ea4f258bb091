"""Lane limits across worker processes: ``echomq worker --lanes --concurrency 4`` drains lanes
with a concurrency limit, a rate and a weight while every job writes its start and end to a
ledger (tests/lane_ledger.py). Counted from the ledger: the capped lane never ran more jobs at
once than its limit, the rated lane's claims took at least the windows its rate needs, every job
ran once and was acked once."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from echomq import Queue
from echomq.embedded import EmbeddedValkey
from tests.test_worker import (
    Workers,
    assert_each_acked_once,
    blocked_clients,
    reaches,
    wait_until,
)

CAPPED, CAP = "capped", 2
RATED, RATE, WINDOW_MS = "rated", 5, 400
HEAVY, WEIGHT = "heavy", 3
JOBS = {CAPPED: 40, RATED: 20, HEAVY: 40, "plain-0": 20, "plain-1": 20}
# How much later a first window's start line may come after its claim than a last window's does
# (a loaded machine schedules the processes late): under a window, so one window short still fails.
START_SLACK_MS = 300
RUN_MS = {CAPPED: 25, RATED: 5, HEAVY: 5, "plain-0": 5, "plain-1": 5}


@pytest.fixture
def supervisor(valkey: EmbeddedValkey, conn: redis.Redis, tmp_path: Path) -> Iterator[Workers]:
    workers = Workers(valkey, tmp_path / "workers.log", "ledger", "--lanes", "--concurrency",
                      "4", "--lease-ms", "10000", "--grace", "5",
                      handler="tests.lane_ledger:run")
    yield workers
    workers.close()


def ledger(conn: redis.Redis) -> list[tuple[str, str, str, int, int]]:
    lines = [line.decode().split() for line in conn.lrange("test:ledger", 0, -1)]
    return [(what, lane, job_id, int(pid), int(at)) for what, lane, job_id, pid, at in lines]


def most_at_once(lines: list[tuple[str, str, str, int, int]], lane: str) -> int:
    running = most = 0
    for what, group, *_ in lines:
        if group == lane:
            running += 1 if what == "start" else -1
            most = max(most, running)
    return most


def test_limits_hold_across_worker_processes(conn: redis.Redis, supervisor: Workers) -> None:
    queue = Queue(conn, "ledger")
    queue.set_lane(CAPPED, concurrency=CAP)
    queue.set_lane(RATED, rate=RATE, window_ms=WINDOW_MS)
    queue.set_lane(HEAVY, weight=WEIGHT)
    assert wait_until(lambda: blocked_clients(conn) >= 4, 20), supervisor.log()
    items = [(f"JOB:{lane}-{n:03d}", str(RUN_MS[lane]).encode(), lane)
             for n in range(max(JOBS.values())) for lane, count in JOBS.items() if n < count]
    queue.enqueue_many(items)
    total = sum(JOBS.values())
    assert reaches(lambda: int(conn.hlen("test:acked")), total, 30), supervisor.log()
    assert supervisor.terminate(within=6) == 0
    assert_each_acked_once(conn, queue, [job_id for job_id, _, _ in items])

    lines = ledger(conn)
    starts = Counter(job_id for what, _, job_id, _, _ in lines if what == "start")
    assert starts == dict.fromkeys(starts, 1) and len(starts) == total  # each ran once
    assert len({pid for *_, pid, _ in lines}) > 1  # served by more than one process
    assert most_at_once(lines, CAPPED) <= CAP
    # The rated lane's claims span at least the windows its rate needs after the first; its
    # first start line comes a moment after its claim opened the first window (the slack).
    rated = sorted(at for what, lane, _, _, at in lines if what == "start" and lane == RATED)
    windows = math.ceil(JOBS[RATED] / RATE)
    assert rated[-1] - rated[0] >= (windows - 1) * WINDOW_MS - START_SLACK_MS
    assert queue.leased_by_lane() == {}
