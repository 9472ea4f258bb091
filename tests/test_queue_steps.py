"""Durable steps on both wires: recorded under the current lease only (a zombie's write refused
and nothing changed), once per name, read back by a later attempt in one read, bounded in size
with the server's words, gone with the job's row; and ``echomq.step`` inside and outside a
task."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

import echomq
from echomq import App, ArgumentError, LaneError, Queue, StaleLease, Verdict
from echomq.engine.steps import MAX_JOB_STEPS_BYTES, MAX_STEP_BYTES
from tests import test_queue
from tests.test_queue import NOW
from tests.test_queue_progress import lease

conn = test_queue.conn
queue = test_queue.queue


def row(conn: redis.Redis, job_id: str = "JOB:1") -> dict[bytes, bytes]:
    return conn.hgetall(f"emq:{{emails}}:job:{job_id}")


def test_a_step_is_recorded_once_and_read_back_by_the_next_attempt(queue: Queue,
                                                                    conn: redis.Redis) -> None:
    first = lease(queue)
    assert queue.recorded_steps(first) == {}
    assert queue.record_step(first, "charge", b"ch_1") is Verdict.RECORDED
    assert queue.record_step(first, "charge", b"ch_2") is Verdict.KEPT  # the first stands
    assert queue.retry(first, delay_ms=0, now=NOW) is Verdict.RETRYING
    assert queue.promote(now=NOW) == 1
    second = queue.claim(now=NOW)
    assert second is not None and second.attempt == 2
    assert queue.recorded_steps(second) == {"charge": b"ch_1"}
    assert row(conn)[b"steps"] == b"4"


def test_a_zombies_step_is_refused_and_changes_nothing(queue: Queue, conn: redis.Redis) -> None:
    zombie = lease(queue)
    assert queue.recover(now=NOW + 60_000) == 1  # its lease expired: the job runs again
    live = queue.claim(now=NOW + 60_000)
    assert live is not None and live.fence != zombie.fence
    before = row(conn)
    with pytest.raises(StaleLease):
        queue.record_step(zombie, "charge", b"zombie")
    with pytest.raises(StaleLease):  # its read at a first step says so before a step runs
        queue.recorded_steps(zombie)
    assert row(conn) == before
    assert queue.record_step(live, "charge", b"live") is Verdict.RECORDED
    assert queue.recorded_steps(live) == {"charge": b"live"}


def test_sizes_and_names_are_refused_before_anything_is_sent(queue: Queue,
                                                             conn: redis.Redis) -> None:
    job = lease(queue)
    before = row(conn)
    with pytest.raises(ArgumentError, match=f"^EMQSIZE output must be at most {MAX_STEP_BYTES}"):
        queue.record_step(job, "big", b"x" * (MAX_STEP_BYTES + 1))
    with pytest.raises(LaneError, match=r"^EMQLANE step must be 1 to 200 bytes"):
        queue.record_step(job, "a/b", b"x")
    assert row(conn) == before
    assert queue.record_step(job, "big", b"x" * MAX_STEP_BYTES) is Verdict.RECORDED


def test_a_jobs_steps_are_capped_in_all_and_the_refusal_writes_nothing(
        queue: Queue, conn: redis.Redis) -> None:
    job = lease(queue)
    for n in range(MAX_JOB_STEPS_BYTES // MAX_STEP_BYTES):
        assert queue.record_step(job, f"s{n}", b"x" * MAX_STEP_BYTES) is Verdict.RECORDED
    before = row(conn)
    with pytest.raises(ArgumentError, match=r"^EMQSIZE a job's steps must be at most"):
        queue.record_step(job, "one-more", b"x")
    assert row(conn) == before
    assert queue.record_step(job, "empty", b"") is Verdict.RECORDED


def test_the_steps_go_with_the_row(queue: Queue, conn: redis.Redis) -> None:
    """An ack with no retention deletes them with the row; a tombstone keeps them until it
    expires, with the row."""
    job = lease(queue)
    queue.record_step(job, "charge", b"ch_1")
    queue.ack(job, retention_ms=0)
    assert conn.exists("emq:{emails}:job:JOB:1") == 0
    kept = lease(queue, "JOB:2")
    queue.record_step(kept, "charge", b"ch_1")
    queue.ack(kept, retention_ms=60_000)
    assert 0 < conn.pttl("emq:{emails}:job:JOB:2") <= 60_000
    assert row(conn, "JOB:2")[b"step:charge"] == b"ch_1"
    assert conn.keys("*step*") == []  # no key of its own


def test_step_outside_a_task_says_where_it_belongs() -> None:
    with pytest.raises(RuntimeError, match=r"echomq.step\(\) records a step of the job"):
        echomq.step("charge", lambda: 1)
    with pytest.raises(RuntimeError, match=r"echomq.step\(\) records a step of the job"):
        asyncio.run(echomq.astep("charge", lambda: 1))


@pytest.mark.parametrize("wire", [5, 6])
def test_a_task_replays_its_recorded_steps_and_reads_them_once(conn: redis.Redis,
                                                               wire: int) -> None:
    """A retried task: its first attempt's steps come back without their functions, a step
    that raised was not recorded and runs again, and the row is read once an attempt."""
    app = App(conn, "emails", wire=wire)
    calls: list[str] = []

    def effect(name: str) -> dict[str, Any]:
        calls.append(name)
        if name == "flaky" and calls.count("flaky") == 1:
            raise OSError("down")
        return {"done": name}

    @app.task(max_attempts=3)
    def work() -> list[Any]:
        return [echomq.step(name, effect, name) for name in ("charge", "flaky", "email")]

    handle = work.enqueue()
    job = app.queue.claim(now=NOW)
    assert job is not None
    reads = _hgetalls(conn)
    assert type(app.handler(job)).__name__ == "RetryIn"  # flaky raised: retried
    assert calls == ["charge", "flaky"]
    app.queue.retry(job, delay_ms=0, now=NOW)
    app.queue.promote(now=NOW)
    again = app.queue.claim(now=NOW)
    assert again is not None
    done = app.handler(again)
    assert calls == ["charge", "flaky", "flaky", "email"]  # charge not run again
    assert getattr(done, "result", None) is not None
    assert _hgetalls(conn) - reads == 2  # one read of the row an attempt
    app.queue.ack(again)
    assert handle.id == again.id


def _hgetalls(conn: redis.Redis) -> int:
    return int(conn.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))
