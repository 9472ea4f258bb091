"""The Python client on both wires: results kept by the ack, delayed admission, outcomes and
waiting for them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import redis

from echomq import (
    Ack,
    ArgumentError,
    Job,
    JobOutcome,
    KindError,
    LaneError,
    Queue,
    Retry,
    Verdict,
    Wire6Unsupported,
)
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.engine.calls import MAX_RESULT_BYTES
from echomq.engine.clients import async_twin
from echomq.engine.transitions import SCRIPT_ONLY
from echomq.ops import admin
from tests import test_queue
from tests.test_queue import NOW, commands_sent, executor_transition

# The queue tests' fixtures: every test here runs on both clients and, given a queue, both wires.
conn = test_queue.conn
queue = test_queue.queue

# ---- results kept by the ack ------------------------------------------------------------------


def test_ack_with_a_result_keeps_it_in_the_tombstone(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"payload", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    assert queue.ack(job, result=b"\x00forty-two\r\n", retention_ms=60_000) is Verdict.ACKED
    row = queue.key("job", "JOB:1")
    assert queue.conn.hget(row, "result") == b"\x00forty-two\r\n"
    assert queue.conn.hget(row, "p") is None
    assert 0 < queue.conn.pttl(row) <= 60_000
    ended = queue.key("ended", "JOB:1")  # its waiters' token expires with the tombstone
    assert queue.conn.lrange(ended, 0, -1) == [b"1"]
    expiry = [queue.conn.execute_command("PEXPIRETIME", key) for key in (row, ended)]
    assert expiry[0] == expiry[1] > 0
    assert queue.counts()["active"] == 0
    # The same ack again (a reply lost) is a replay: ACKED, the result it kept untouched.
    assert queue.ack(job, result=b"again") is Verdict.ACKED
    assert queue.conn.hget(row, "result") == b"\x00forty-two\r\n"


def test_ack_without_a_result_sends_the_plain_ack(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"payload", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    transition, _keys, args = queue.calls.ack(job, None)
    assert transition.name == "ack" and len(args) == 3
    assert queue.ack(job) is Verdict.ACKED
    assert queue.conn.hget(queue.key("job", "JOB:1"), "result") is None


def test_settle_keeps_the_results_of_its_acks(queue: Queue) -> None:
    for n in (1, 2, 3):
        queue.enqueue(f"JOB:{n}", b"p", now=NOW + n)
    one, two, three = queue.claim_many(3, now=NOW)
    verdicts, _ = queue.settle([Ack(one, result=b"first"), Ack(two), Ack(three, result=b"")])
    assert verdicts == [Verdict.ACKED] * 3
    results = [queue.conn.hget(queue.key("job", f"JOB:{n}"), "result") for n in (1, 2, 3)]
    assert results == [b"first", None, b""]


def test_a_result_over_the_cap_is_refused_before_sending(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    before = commands_sent(queue.conn)
    too_long = b"r" * (MAX_RESULT_BYTES + 1)
    with pytest.raises(ArgumentError) as client_side:
        queue.ack(job, result=too_long)
    with pytest.raises(ArgumentError):
        queue.settle([Ack(job), Ack(job, result=too_long)])
    with pytest.raises(ArgumentError):
        queue.settle_leased([Ack(job, result=too_long)], 0, 30_000, None, None)
    assert commands_sent(queue.conn) == before
    keys = [queue.key("active"), queue.key("job", "JOB:1")]
    with pytest.raises(ArgumentError) as server_side:
        queue.executor.call(queue.conn, executor_transition("ack_result"), keys,
                            ["JOB:1", str(job.fence), "1000", too_long])
    assert str(client_side.value) == str(server_side.value)
    assert queue.ack(job, result=b"r" * MAX_RESULT_BYTES) is Verdict.ACKED


# ---- delayed admission ------------------------------------------------------------------------


def test_enqueue_with_a_delay_waits_in_delayed_until_promoted(queue: Queue) -> None:
    assert queue.enqueue("JOB:1", b"later", delay_ms=5_000, now=NOW) is Verdict.ENQUEUED
    assert queue.conn.zscore(queue.key("delayed"), "JOB:1") == NOW + 5_000
    assert queue.claim(now=NOW + 10_000) is None
    assert queue.promote(now=NOW + 4_999) == 0
    assert queue.promote(now=NOW + 5_000) == 1
    job = queue.claim(now=NOW + 5_000)
    assert job is not None and (job.id, job.payload, job.attempt) == ("JOB:1", b"later", 1)


def test_delayed_enqueue_is_idempotent(queue: Queue) -> None:
    assert queue.enqueue("JOB:1", b"a", delay_ms=5_000, now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:1", b"b", delay_ms=1, now=NOW) is Verdict.DUPLICATE
    assert queue.enqueue("JOB:1", b"c", now=NOW) is Verdict.DUPLICATE
    queue.enqueue("JOB:2", b"now", now=NOW)
    assert queue.enqueue("JOB:2", b"later", at_ms=NOW + 9, now=NOW) is Verdict.DUPLICATE
    assert queue.conn.zscore(queue.key("delayed"), "JOB:1") == NOW + 5_000
    assert queue.counts() == {"pending": 1, "active": 0, "delayed": 1, "dead": 0, "lanes": 0}


def test_enqueue_at_runs_at_the_later_of_the_delay_and_the_time(queue: Queue) -> None:
    queue.enqueue("JOB:at", b"p", at_ms=NOW + 60_000, now=NOW)
    queue.enqueue("JOB:past", b"p", at_ms=NOW - 60_000, now=NOW)
    queue.enqueue("JOB:both", b"p", delay_ms=10, at_ms=NOW + 5, now=NOW)
    delayed = dict(queue.conn.zrange(queue.key("delayed"), 0, -1, withscores=True))
    assert delayed == {b"JOB:past": NOW, b"JOB:both": NOW + 10, b"JOB:at": NOW + 60_000}


def test_enqueue_at_on_the_servers_clock(queue: Queue) -> None:
    seconds, micros = queue.conn.time()
    server_now = seconds * 1000 + micros // 1000
    queue.enqueue("JOB:1", b"p", delay_ms=3_600_000)
    due = queue.conn.zscore(queue.key("delayed"), "JOB:1")
    assert due is not None and server_now + 3_600_000 <= due < server_now + 3_660_000


def test_a_bad_delay_is_refused_before_sending(queue: Queue) -> None:
    before = commands_sent(queue.conn)
    with pytest.raises(ArgumentError, match=r"^EMQNUM delay_ms "):
        queue.enqueue("JOB:1", b"p", delay_ms=-1)
    with pytest.raises(ArgumentError, match=r"^EMQNUM at_ms "):
        queue.enqueue("JOB:1", b"p", at_ms=-5)
    assert commands_sent(queue.conn) == before


def test_a_delayed_lane_job_is_promoted_to_its_lane(conn: redis.Redis) -> None:
    queue = Queue(conn, "emails", wire=5)
    assert queue.enqueue("JOB:a1", b"p", lane="a", delay_ms=100, now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:a1", b"p", lane="a", now=NOW) is Verdict.DUPLICATE
    assert queue.lane_depths() == {}
    assert queue.promote(now=NOW + 100) == 1
    assert queue.lane_depths() == {"a": 1}
    job = queue.claim_lane(now=NOW + 100)
    assert job is not None and (job.id, job.lane) == ("JOB:a1", "a")


def test_a_delayed_lane_job_is_refused_on_wire6(conn: redis.Redis) -> None:
    with pytest.raises(Wire6Unsupported):
        Queue(conn, "emails", wire=6).enqueue("JOB:a1", b"p", lane="a", delay_ms=100)
    assert conn.dbsize() == 0


def test_the_async_queue_delays_and_keeps_results(conn: redis.Redis,
                                                   valkey: EmbeddedValkey) -> None:
    async def main() -> tuple[Any, Any]:
        client = async_twin(conn)
        try:
            queue = AsyncQueue(client, "emails", wire=6)
            await queue.enqueue("JOB:1", b"p", delay_ms=50, now=NOW)
            await queue.promote(now=NOW + 50)
            job = await queue.claim(now=NOW + 50)
            assert job is not None
            await queue.ack(job, result=b"ok")
            return (await client.hget(queue.key("job", "JOB:1"), "result"),
                    await client.zscore(queue.key("pending"), "JOB:1"))
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (b"ok", None)


# ---- outcomes and waiting ---------------------------------------------------------------------


def lease(queue: Queue, job_id: str, *, now: int = NOW) -> Job:
    queue.enqueue(job_id, b"p", now=now)
    job = queue.claim(now=now)
    assert job is not None and job.id == job_id
    return job


def test_outcome_names_every_state(queue: Queue) -> None:
    assert queue.outcome("JOB:none") == JobOutcome("unknown", None, None, 0)
    queue.enqueue("JOB:later", b"p", delay_ms=1_000, now=NOW)
    assert queue.outcome("JOB:later").state == "delayed"
    ran = lease(queue, "JOB:ran")
    assert queue.outcome("JOB:ran") == JobOutcome("active", None, None, 1)
    queue.ack(ran, result=b"\x00out")
    assert queue.outcome("JOB:ran") == JobOutcome("done", b"\x00out", None, 1)
    failed = lease(queue, "JOB:failed")
    queue.retry(failed, error="boom \xe9", max_attempts=1, now=NOW)
    assert queue.outcome("JOB:failed") == JobOutcome("dead", None, "boom \xe9", 1)
    plain = lease(queue, "JOB:plain")
    queue.ack(plain)
    assert queue.outcome("JOB:plain") == JobOutcome("done", None, None, 1)
    queue.enqueue("JOB:waiting", b"p", now=NOW + 5)
    assert queue.outcome("JOB:waiting") == JobOutcome("pending", None, None, 0)
    queue.conn.set(queue.key("job", "JOB:odd"), "x")
    assert queue.outcome("JOB:odd").state == "unknown"
    with pytest.raises(KindError):
        queue.outcome("job:1")


def test_outcome_of_a_lane_job_waiting_in_its_lane(conn: redis.Redis) -> None:
    queue = Queue(conn, "emails", wire=5)
    queue.enqueue("JOB:a1", b"p", lane="a", now=NOW)
    assert queue.outcome("JOB:a1") == JobOutcome("pending", None, None, 0)


def blocked_clients(conn: redis.Redis) -> int:
    return int(conn.info("clients")["blocked_clients"])


def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Returns once ``condition`` holds; fails the test when it does not within the bound."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def waiting_for(queue: Queue, job_id: str, waiters: int = 1) -> list[Future[JobOutcome]]:
    """``waiters`` threads blocked in ``queue.wait(job_id, 30)``, each on its own connection."""
    pool = ThreadPoolExecutor(waiters)
    conns = [type(queue.conn)(port=queue.conn.connection_pool.connection_kwargs["port"])
             for _ in range(waiters)]
    futures = [pool.submit(Queue(c, queue.name, wire=queue.wire, check_policy=False).wait,
                           job_id, 30.0) for c in conns]
    pool.shutdown(wait=False)
    until(lambda: blocked_clients(queue.conn) >= waiters)
    return futures


def test_wait_returns_at_once_when_the_job_has_ended(queue: Queue) -> None:
    queue.ack(lease(queue, "JOB:1"), result=b"r")
    started = time.monotonic()
    assert queue.wait("JOB:1", 30.0) == JobOutcome("done", b"r", None, 1)
    assert time.monotonic() - started < 5


def test_an_ack_keeping_a_result_wakes_every_waiter(queue: Queue) -> None:
    job = lease(queue, "JOB:1")
    futures = waiting_for(queue, "JOB:1", waiters=3)
    started = time.monotonic()
    queue.ack(job, result=b"42")
    outcomes = [future.result(timeout=10) for future in futures]
    assert outcomes == [JobOutcome("done", b"42", None, 1)] * 3
    assert time.monotonic() - started < 10
    ended = queue.key("ended", "JOB:1")
    assert queue.conn.lrange(ended, 0, -1) == [b"1"]
    assert 0 < queue.conn.pttl(ended) <= queue.retention_ms


def test_settle_wakes_the_waiters_of_its_done_and_dead_items(queue: Queue) -> None:
    one, two = lease(queue, "JOB:1"), lease(queue, "JOB:2")
    done, dead = waiting_for(queue, "JOB:1"), waiting_for(queue, "JOB:2", waiters=2)
    queue.settle([Ack(one, result=b"r"), Retry(two, error="gone", max_attempts=1)], now=NOW)
    assert done[0].result(timeout=10) == JobOutcome("done", b"r", None, 1)
    assert [f.result(timeout=10) for f in dead] == [JobOutcome("dead", None, "gone", 1)] * 2


def test_a_retry_to_dead_wakes_the_waiter(queue: Queue) -> None:
    job = lease(queue, "JOB:1")
    (future,) = waiting_for(queue, "JOB:1")
    queue.retry(job, error="no more", max_attempts=1, now=NOW)
    assert future.result(timeout=10) == JobOutcome("dead", None, "no more", 1)


def test_a_retry_that_runs_again_wakes_no_one(queue: Queue) -> None:
    job = lease(queue, "JOB:1")
    assert queue.retry(job, delay_ms=5, max_attempts=3, now=NOW) is Verdict.RETRYING
    assert queue.conn.exists(queue.key("ended", "JOB:1")) == 0


def test_recover_of_a_spent_lease_wakes_the_waiter(queue: Queue) -> None:
    lease(queue, "JOB:1")
    (future,) = waiting_for(queue, "JOB:1")
    assert queue.recover(now=NOW + 60_000, max_attempts=1) == 1
    outcome = future.result(timeout=10)
    assert (outcome.state, outcome.error) == (
        "dead", "lease expired during attempt 1: the worker was lost")


def test_wait_does_not_poll(queue: Queue) -> None:
    lease(queue, "JOB:1")
    before = commands_sent(queue.conn)
    started = time.monotonic()
    assert queue.wait("JOB:1", 0.5).state == "active"
    assert time.monotonic() - started >= 0.5
    # two outcome reads (nine commands each), one BLMOVE (and the INFO of commands_sent)
    reads = len(queue.calls.outcome_reads("JOB:1"))
    assert reads == 9
    assert commands_sent(queue.conn) - before <= 2 * reads + 2


def test_a_token_left_by_an_earlier_life_of_the_id_does_not_spin_the_waiter(
        queue: Queue) -> None:
    queue.conn.rpush(queue.key("ended", "JOB:1"), "1")
    queue.enqueue("JOB:1", b"p", now=NOW)
    before = commands_sent(queue.conn)
    assert queue.wait("JOB:1", 0.3).state == "pending"
    # woken once by the stale token (two reads, the BLMOVE, its DEL), then blocked to the end
    # (a read, the BLMOVE, the last read), and the INFO of commands_sent: four reads of nine
    reads = len(queue.calls.outcome_reads("JOB:1"))
    assert commands_sent(queue.conn) - before <= 4 * reads + 4
    assert queue.conn.exists(queue.key("ended", "JOB:1")) == 0


def test_requeue_and_purge_take_the_token_with_the_dead_job(queue: Queue) -> None:
    for job_id in ("JOB:1", "JOB:2"):
        queue.retry(lease(queue, job_id), max_attempts=1, now=NOW)
        assert queue.conn.exists(queue.key("ended", job_id)) == 1
    assert admin.requeue(queue.conn, queue.name, "JOB:1", now=NOW)
    assert admin.purge(queue.conn, queue.name) == 1
    assert queue.conn.exists(queue.key("ended", "JOB:1"), queue.key("ended", "JOB:2")) == 0
    assert queue.outcome("JOB:1").state == "pending"


def test_the_async_queue_waits_for_an_outcome(conn: redis.Redis,
                                              valkey: EmbeddedValkey) -> None:
    sync = Queue(conn, "emails", wire=6)
    job = lease(sync, "JOB:1")

    async def main() -> tuple[JobOutcome, JobOutcome]:
        client = async_twin(conn)
        try:
            queue = AsyncQueue(client, "emails", wire=6)
            waiter = asyncio.create_task(queue.wait("JOB:1", 30.0))
            while blocked_clients(conn) < 1:
                await asyncio.sleep(0.005)
            await queue.ack(job, result=b"async")
            return await asyncio.wait_for(waiter, 10), await queue.outcome("JOB:2")
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (JobOutcome("done", b"async", None, 1), JobOutcome(
        "unknown", None, None, 0))


def test_a_delayed_lane_job_with_a_bad_group_is_refused_alike(conn: redis.Redis) -> None:
    queue = Queue(conn, "emails", wire=5)
    before = commands_sent(conn)
    with pytest.raises(LaneError) as client_side:
        queue.enqueue("JOB:a1", b"p", lane="a b", delay_ms=100)
    assert commands_sent(conn) == before
    transition = next(t for t in SCRIPT_ONLY if t.name == "lane_enqueue_delayed")
    keys = [queue.key("job", "JOB:a1"), queue.key("delayed"), queue.key("wake")]
    with pytest.raises(LaneError) as server_side:
        queue.executor.call(conn, transition, keys, ["JOB:a1", b"p", "a b", "*", "100", "0"])
    assert str(client_side.value) == str(server_side.value)
    with pytest.raises(ArgumentError, match=r"^EMQARITY EMQ\.LANE_ENQUEUE_DELAYED takes 3 keys "):
        queue.executor.call(conn, transition, keys, ["JOB:a1", b"p", "a", "*", "100"])
    assert conn.dbsize() == 0
