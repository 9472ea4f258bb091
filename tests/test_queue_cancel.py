"""Cancel from the Python client, on both wires and both clients: a job waiting to run ends as
cancelled at once (its outcome, its waiters woken), a leased one is flagged, a done, dead or
unknown job answers so and changes nothing, and cancelling twice is idempotent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from echomq import JobOutcome, KindError, Queue, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.engine.clients import async_twin
from tests import test_queue
from tests.test_queue import NOW

conn = test_queue.conn
queue = test_queue.queue


def test_a_pending_job_cancelled_ends_at_once(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", now=NOW)
    queue.enqueue("JOB:2", b"p", now=NOW + 1)
    assert queue.cancel("JOB:1", now=NOW + 2) is Verdict.CANCELLED
    row = queue.key("job", "JOB:1")
    assert queue.conn.hget(row, "payload") is None
    assert queue.conn.hget(row, "cancelled") == str(NOW + 2).encode()
    assert 0 < queue.conn.pttl(row) <= queue.retention_ms
    assert queue.conn.lrange(queue.key("ended", "JOB:1"), 0, -1) == [b"1"]
    assert queue.outcome("JOB:1") == JobOutcome("cancelled", None, None, 0)
    assert queue.wait("JOB:1", 5.0).state == "cancelled"  # its token wakes a waiter
    # never claimed afterwards: the next claim is the other job, then nothing
    job = queue.claim(now=NOW + 3)
    assert job is not None and job.id == "JOB:2"
    assert queue.claim(now=NOW + 3) is None
    # idempotent, and the id stays taken while its tombstone lives
    assert queue.cancel("JOB:1", now=NOW + 4) is Verdict.CANCELLED
    assert queue.enqueue("JOB:1", b"p", now=NOW + 5) is Verdict.DUPLICATE


def test_a_delayed_job_cancelled_is_never_promoted(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", delay_ms=100, now=NOW)
    assert queue.cancel("JOB:1", retention_ms=5_000, now=NOW + 1) is Verdict.CANCELLED
    assert 0 < queue.conn.pttl(queue.key("job", "JOB:1")) <= 5_000
    assert queue.promote(now=NOW + 200) == 0
    assert queue.claim(now=NOW + 200) is None
    assert queue.counts()["delayed"] == 0


def test_a_lane_job_cancelled_leaves_its_lane(conn: redis.Redis) -> None:
    lanes = Queue(conn, "emails", wire=5)
    lanes.enqueue("JOB:1", b"p", lane="a", now=NOW)
    lanes.enqueue("JOB:2", b"p", lane="a", now=NOW)
    for wire in (5, 6):
        queue = Queue(conn, "emails", wire=wire)
        job_id = f"JOB:{wire - 4}"
        assert queue.cancel(job_id, now=NOW) is Verdict.CANCELLED
        assert queue.outcome(job_id).state == "cancelled"
    assert conn.llen(lanes.key("lane", lane="a")) == 0
    assert lanes.claim_lane(now=NOW) is None  # the stale group is dropped from the ring


def test_a_leased_job_is_flagged_and_stays_active(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    assert queue.cancel("JOB:1", retention_ms=7_000, now=NOW + 1) is Verdict.CANCELLING
    row = queue.key("job", "JOB:1")
    assert queue.conn.hmget(row, "cancel", "cancelled") == [b"7000", str(NOW + 1).encode()]
    assert queue.outcome("JOB:1").state == "active"
    # asked again: the flag stands as it was
    assert queue.cancel("JOB:1", retention_ms=1, now=NOW + 2) is Verdict.CANCELLING
    assert queue.conn.hget(row, "cancel") == b"7000"


def test_done_dead_and_unknown_jobs_answer_so_and_change_nothing(queue: Queue) -> None:
    queue.enqueue("JOB:done", b"p", now=NOW)
    queue.enqueue("JOB:dead", b"p", now=NOW + 1)
    done = queue.claim(now=NOW)
    dead = queue.claim(now=NOW)
    assert done is not None and dead is not None
    queue.ack(done, retention_ms=60_000)
    queue.retry(dead, max_attempts=1, now=NOW)
    before = {key: queue.conn.dump(key) for key in queue.conn.keys("*")}
    assert queue.cancel("JOB:done") is Verdict.DONE
    assert queue.cancel("JOB:dead") is Verdict.DEAD
    assert queue.cancel("JOB:none") is Verdict.UNKNOWN
    assert {key: queue.conn.dump(key) for key in queue.conn.keys("*")} == before


def test_no_retention_deletes_the_row(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", now=NOW)
    assert queue.cancel("JOB:1", retention_ms=0, now=NOW) is Verdict.CANCELLED
    assert queue.conn.exists(queue.key("job", "JOB:1"), queue.key("ended", "JOB:1")) == 0
    assert queue.enqueue("JOB:1", b"p", now=NOW) is Verdict.ENQUEUED


def test_a_bad_id_is_refused_before_sending(queue: Queue) -> None:
    with pytest.raises(KindError):
        queue.cancel("job:1")
    with pytest.raises(KindError):
        queue.cancel("JOB:a b")
    assert queue.conn.dbsize() == 0


def test_the_async_queue_cancels(conn: redis.Redis) -> None:
    async def main() -> tuple[Any, ...]:
        client = async_twin(conn)
        try:
            queue = AsyncQueue(client, "emails", wire=6)
            await queue.enqueue("JOB:1", b"p", now=NOW)
            await queue.enqueue("JOB:2", b"p", now=NOW)
            await queue.claim(now=NOW)
            return (await queue.cancel("JOB:2"), await queue.cancel("JOB:1"),
                    (await queue.outcome("JOB:2")).state)
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (Verdict.CANCELLED, Verdict.CANCELLING, "cancelled")
