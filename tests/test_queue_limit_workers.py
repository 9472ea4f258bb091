"""Queue-wide limits across worker processes: 8 ``echomq worker`` processes drain one flat
queue while every job writes its start and end to a ledger (tests/queue_ledger.py). Counted from
the ledger: never more jobs ran at once than the queue's concurrency limit; counted from the
queue's events stream (each claim's ``at``, the server's clock of the claim): no window of the
rate limit saw more claims than its rate. Every job ran once and was acked once."""

from __future__ import annotations

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

PROCESSES = 8
CAP, CAP_JOBS, CAP_RUN_MS = 3, 48, 40
RATE, WINDOW_MS, RATE_JOBS = 4, 300, 20


def workers(valkey: EmbeddedValkey, tmp_path: Path, queue: str) -> Workers:
    return Workers(valkey, tmp_path / "workers.log", queue, "--concurrency", str(PROCESSES),
                   "--lease-ms", "10000", "--grace", "5", "--events",
                   handler="tests.queue_ledger:run")


@pytest.fixture
def capped(valkey: EmbeddedValkey, conn: redis.Redis, tmp_path: Path) -> Iterator[Workers]:
    Queue(conn, "capped").set_limits(concurrency=CAP)
    running = workers(valkey, tmp_path, "capped")
    yield running
    running.close()


@pytest.fixture
def rated(valkey: EmbeddedValkey, conn: redis.Redis, tmp_path: Path) -> Iterator[Workers]:
    Queue(conn, "rated").set_limits(rate=RATE, window_ms=WINDOW_MS)
    running = workers(valkey, tmp_path, "rated")
    yield running
    running.close()


def ledger(conn: redis.Redis) -> list[tuple[str, str, int, int]]:
    lines = [line.decode().split() for line in conn.lrange("test:ledger", 0, -1)]
    return [(what, job_id, int(pid), int(at)) for what, job_id, pid, at in lines]


def most_at_once(lines: list[tuple[str, str, int, int]]) -> int:
    running = most = 0
    for what, *_ in lines:
        running += 1 if what == "start" else -1
        most = max(most, running)
    return most


def drain(conn: redis.Redis, supervisor: Workers, queue: Queue, count: int,
          run_ms: int) -> list[str]:
    assert wait_until(lambda: blocked_clients(conn) >= PROCESSES, 30), supervisor.log()
    items = [(f"JOB:{n:03d}", str(run_ms).encode()) for n in range(count)]
    queue.enqueue_many(items)
    assert reaches(lambda: int(conn.hlen("test:acked")), count, 30), supervisor.log()
    assert supervisor.terminate(within=60) == 0  # a bound on waiting: not what this tests
    ids = [job_id for job_id, _ in items]
    assert_each_acked_once(conn, queue, ids)
    lines = ledger(conn)
    starts = Counter(job_id for what, job_id, _, _ in lines if what == "start")
    assert starts == dict.fromkeys(ids, 1)  # each ran once
    assert len({pid for _, _, pid, _ in lines}) > 1  # served by more than one process
    return ids


def test_a_concurrency_limit_holds_across_eight_processes(conn: redis.Redis,
                                                         capped: Workers) -> None:
    queue = Queue(conn, "capped")
    drain(conn, capped, queue, CAP_JOBS, CAP_RUN_MS)
    most = most_at_once(ledger(conn))
    assert 1 < most <= CAP


def test_a_rate_limit_holds_across_eight_processes(conn: redis.Redis, rated: Workers) -> None:
    queue = Queue(conn, "rated")
    drain(conn, rated, queue, RATE_JOBS, 1)
    claims = sorted(event.at_ms for event in queue.events(count=1000) if event.kind == "claimed")
    assert len(claims) == RATE_JOBS
    # The windows as the claims kept them: one opens at a claim when the last has passed.
    start, count = claims[0], 0
    for at in claims:
        if at >= start + WINDOW_MS:
            start, count = at, 0
        count += 1
        assert count <= RATE, (claims, at)
    assert claims[-1] - claims[0] >= (RATE_JOBS // RATE - 1) * WINDOW_MS
