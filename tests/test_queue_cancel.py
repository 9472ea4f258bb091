"""Cancel from the Python client, on both wires and both clients: a job waiting to run ends as
cancelled at once (its outcome, its waiters woken), a leased one is flagged, a done, dead or
unknown job answers so and changes nothing, and cancelling twice is idempotent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from echomq import Ack, Job, JobOutcome, KindError, Queue, Release, Retry, Verdict
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
    assert queue.conn.hget(row, "p") is None
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
    # its lane emptied, the group left the ring: its entry stays where it was, counted as left
    assert conn.lrange(lanes.key("ring"), 0, -1) == [b"a"]
    assert conn.hgetall(lanes.key("ringleft")) == {b"a": b"1"}
    lanes.enqueue("JOB:3", b"p", lane="a", now=NOW)  # and joins it once again, at the tail
    assert conn.lrange(lanes.key("ring"), 0, -1) == [b"a", b"a"]
    claimed = lanes.claim_lane(now=NOW)  # the left entry dropped, the live one served
    assert claimed is not None and claimed.id == "JOB:3"
    assert conn.exists(lanes.key("ring"), lanes.key("ringleft")) == 0


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


def test_a_flagged_lease_is_extended_and_told(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", now=NOW)
    queue.enqueue("JOB:2", b"p", now=NOW)
    first, second = queue.claim_many(2, lease_ms=1_000, now=NOW)
    assert queue.cancel(first.id, now=NOW) is Verdict.CANCELLING
    assert queue.extend(first, lease_ms=5_000, now=NOW + 10) is Verdict.CANCELLING
    assert queue.conn.zscore(queue.key("active"), first.id) == NOW + 5_010
    assert queue.extend_many([first, second], lease_ms=9_000, now=NOW + 20) == [
        Verdict.CANCELLING, Verdict.EXTENDED]
    assert queue.conn.zscore(queue.key("active"), first.id) == NOW + 9_020


def flagged_leases(queue: Queue, count: int) -> list[Job]:
    """``count`` jobs leased, each flagged by a cancel asked to keep its tombstone 7 s."""
    queue.enqueue_many([(f"JOB:{i}", b"p") for i in range(count)], now=NOW)
    jobs = queue.claim_many(count, lease_ms=1_000, now=NOW)
    for job in jobs:
        assert queue.cancel(job.id, retention_ms=7_000, now=NOW) is Verdict.CANCELLING
    return jobs


def assert_cancelled(queue: Queue, job: Job) -> None:
    row = queue.key("job", job.id)
    assert queue.outcome(job.id) == JobOutcome("cancelled", None, None, 1)
    assert 0 < queue.conn.pttl(row) <= 7_000
    assert queue.conn.lrange(queue.key("ended", job.id), 0, -1) == [b"1"]
    assert queue.conn.zscore(queue.key("active"), job.id) is None


def test_a_flagged_lease_ends_cancelled_whatever_its_settlement(queue: Queue) -> None:
    acked, kept, retried = flagged_leases(queue, 3)
    assert queue.ack(acked, retention_ms=0) is Verdict.CANCELLED
    assert queue.ack(kept, result=b"r") is Verdict.CANCELLED
    assert queue.retry(retried, max_attempts=1, now=NOW) is Verdict.CANCELLED  # never dead
    for job in (acked, kept, retried):
        assert_cancelled(queue, job)
    assert queue.conn.hget(queue.key("job", kept.id), "result") is None
    assert queue.counts() == {**queue.counts(), "dead": 0, "delayed": 0, "active": 0}
    # sent again after a lost reply: the same verdict, nothing changed
    assert queue.ack(acked) is Verdict.CANCELLED
    assert queue.retry(retried, max_attempts=1, now=NOW) is Verdict.CANCELLED


def test_settle_items_of_flagged_leases_end_cancelled(queue: Queue) -> None:
    jobs = flagged_leases(queue, 4)
    outcomes = [Ack(jobs[0]), Ack(jobs[1], result=b"r"), Retry(jobs[2]), Release(jobs[3])]
    verdicts, _ = queue.settle(outcomes, now=NOW)
    assert verdicts == [Verdict.CANCELLED] * 4
    for job in jobs:
        assert_cancelled(queue, job)
    assert queue.claim(now=NOW) is None  # the released one did not go back
    assert queue.settle(outcomes, now=NOW)[0] == [Verdict.CANCELLED] * 4


def test_recover_ends_an_expired_flagged_lease_cancelled(queue: Queue) -> None:
    (job,) = flagged_leases(queue, 1)
    assert queue.recover(now=NOW + 1_000, max_attempts=1) == 1
    assert_cancelled(queue, job)
    assert queue.conn.llen(queue.key("wake")) == 1  # the enqueue's token only


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
