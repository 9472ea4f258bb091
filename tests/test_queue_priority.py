"""Flat priority as a queue meets it, on both wires: a higher priority is claimed first whatever
waits before it, FIFO within one priority, and a job keeps its priority wherever it goes back to
run (retried, delayed, recovered, released, requeued). Explicit ``now`` values throughout: the
order is the server's, never a race."""

from __future__ import annotations

import itertools

import pytest
import redis
from hypothesis import HealthCheck, given, settings, strategies as st

from echomq import Queue, Release, Verdict
from echomq.ops.admin import requeue

NOW = 1_700_000_000_000
NAMES = itertools.count()


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    wire_number: int = request.param
    return wire_number


def fresh(conn: redis.Redis, wire: int) -> Queue:
    """A queue of its own (a new name each time, so examples never share keys)."""
    return Queue(conn, f"prio{wire}-{next(NAMES)}", wire=wire)


def admit(queue: Queue, job_id: str, priority: int, now: int | None,
          delay_ms: int = 0) -> Verdict:
    """Admit ``job_id`` (an empty payload) at ``priority``."""
    return queue.enqueue(job_id, b"", priority=priority, delay_ms=delay_ms, now=now)


def claimed_id(queue: Queue, now: int, lease_ms: int = 30_000) -> str | None:
    job = queue.claim(lease_ms, now=now)
    return None if job is None else job.id


def test_a_higher_priority_job_behind_ten_thousand_is_the_next_claim(
        conn: redis.Redis, wire: int) -> None:
    queue = fresh(conn, wire)
    queue.enqueue_many([(f"JOB:{n}", b"") for n in range(10_000)], now=NOW)
    assert admit(queue, "JOB:urgent", 10, NOW + 1) is Verdict.ENQUEUED
    assert claimed_id(queue, NOW + 2) == "JOB:urgent"
    assert claimed_id(queue, NOW + 2) == "JOB:0"  # then the oldest of the rest
    assert conn.hget(queue.key("job", "JOB:urgent"), "priority") == b"10"
    assert conn.hget(queue.key("job", "JOB:0"), "priority") is None


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(priorities=st.lists(st.sampled_from([0, 0, 1, 5, -3, 100, -100]), min_size=1,
                           max_size=12))
def test_claims_follow_priority_then_fifo(conn: redis.Redis, wire: int,
                                          priorities: list[int]) -> None:
    queue = fresh(conn, wire)
    for n, priority in enumerate(priorities):
        assert admit(queue, f"JOB:{n}", priority, NOW + n) is Verdict.ENQUEUED
    expected = [f"JOB:{n}" for n, _ in sorted(enumerate(priorities), key=lambda p: -p[1])]
    claimed = [claimed_id(queue, NOW + 100) for _ in priorities]
    assert claimed == expected
    assert claimed_id(queue, NOW + 100) is None


def test_a_retried_job_keeps_its_priority(conn: redis.Redis, wire: int) -> None:
    queue = fresh(conn, wire)
    admit(queue, "JOB:high", 7, NOW)
    job = queue.claim(30_000, now=NOW)
    assert job is not None and job.id == "JOB:high"
    queue.retry(job, delay_ms=1_000, error="boom", now=NOW + 1)
    admit(queue, "JOB:low", 0, NOW + 2)  # waiting since before the retry falls due
    assert queue.promote(now=NOW + 1_001) == 1
    assert claimed_id(queue, NOW + 1_002) == "JOB:high"
    assert claimed_id(queue, NOW + 1_002) == "JOB:low"


def test_a_delayed_job_keeps_its_priority(conn: redis.Redis, wire: int) -> None:
    queue = fresh(conn, wire)
    assert admit(queue, "JOB:later", 3, NOW, delay_ms=500) is Verdict.ENQUEUED
    admit(queue, "JOB:older", 0, NOW + 1)
    admit(queue, "JOB:lower", -3, NOW + 2)
    assert queue.promote(now=NOW + 500) == 1
    assert [claimed_id(queue, NOW + 501) for _ in range(3)] == ["JOB:later", "JOB:older",
                                                                  "JOB:lower"]


def test_a_recovered_job_keeps_its_priority_and_its_place(conn: redis.Redis, wire: int) -> None:
    queue = fresh(conn, wire)
    admit(queue, "JOB:first", 5, NOW)
    assert claimed_id(queue, NOW, lease_ms=100) == "JOB:first"  # its worker is then lost
    admit(queue, "JOB:second", 5, NOW + 1)
    admit(queue, "JOB:low", 0, NOW - 50)
    assert queue.recover(now=NOW + 200) == 1
    assert [claimed_id(queue, NOW + 201) for _ in range(3)] == ["JOB:first", "JOB:second",
                                                                  "JOB:low"]


def test_a_released_job_keeps_its_priority_and_its_place(conn: redis.Redis, wire: int) -> None:
    queue = fresh(conn, wire)
    admit(queue, "JOB:first", -2, NOW)
    admit(queue, "JOB:zero", 0, NOW + 5)
    job = queue.claim(30_000, now=NOW + 6)
    assert job is not None and job.id == "JOB:zero"
    admit(queue, "JOB:second", -2, NOW + 7)
    verdicts, _ = queue.settle([Release(job)], now=NOW + 8)
    assert [v.name for v in verdicts] == ["RELEASED"]
    assert [claimed_id(queue, NOW + 9) for _ in range(3)] == ["JOB:zero", "JOB:first",
                                                              "JOB:second"]


def test_a_requeued_job_keeps_its_priority(conn: redis.Redis, wire: int) -> None:
    queue = fresh(conn, wire)
    admit(queue, "JOB:high", 9, NOW)
    job = queue.claim(30_000, now=NOW)
    assert job is not None
    queue.retry(job, error="boom", max_attempts=1, now=NOW + 1)  # dead at once
    admit(queue, "JOB:low", 0, NOW + 2)
    assert requeue(conn, queue.name, "JOB:high", now=NOW + 3)
    assert claimed_id(queue, NOW + 4) == "JOB:high"
