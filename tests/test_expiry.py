"""Expiry end to end (docs/PROTOCOL.md, "Expiry"; docs/GUIDE.md, "A deadline to start by"): a
job not started by its deadline is dead with the error "expired" when a claim meets it — a real
Consumer on each wire, its clock given so no test waits for time to pass — one started in time
runs; bad deadlines are refused before anything is sent."""

from __future__ import annotations

import datetime
import math
import time
from typing import Any

import pytest
import redis

from echomq import App, ArgumentError, Consumer, Queue
from echomq.ops.admin import dead_jobs, requeue
from echomq.ops.metrics import QueueDepths
from echomq.queue.blocking import ShardedQueue

NOW = 1_700_000_000_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def drained(queue: Any, handler: Any, clock: Any) -> int:
    consumer = Consumer(queue, handler, clock=clock)
    try:
        return int(consumer.drain())
    finally:
        consumer.close()


def test_a_job_a_busy_worker_reaches_past_its_deadline_is_dead_and_one_in_time_runs(
        conn: redis.Redis, wire: int) -> None:
    """The first task keeps the worker ten seconds (on the consumer's clock, which its run
    moves on): the job behind it with five seconds to start is dead as expired when the worker
    gets to it, the one with a minute runs."""
    app = App(conn, "default", wire=wire)
    busy_ms = [0]

    @app.task(name="slow", keep_result=True)
    def slow() -> str:
        busy_ms[0] += 10_000
        return "slow"

    @app.task(name="quick", keep_result=True)
    def quick(n: int) -> int:
        return n

    first = slow.enqueue()
    late = quick.with_options(expires_in=5).enqueue(1)
    in_time = quick.with_options(expires_in=60).enqueue(2)
    assert drained(app.queue, app.handler, lambda: wall_ms() + busy_ms[0]) == 2
    assert first.result(timeout=5) == "slow"
    assert in_time.result(timeout=5) == 2
    outcome = late.outcome()
    assert (outcome.state, outcome.error, outcome.attempts) == ("dead", "expired", 0)
    assert [(job.id, job.error) for job in dead_jobs(conn, "default")] == [(late.id, "expired")]
    assert app.queue.expired_count() == 1


def test_a_job_whose_deadline_passed_while_no_worker_ran_is_dead_when_one_starts(
        conn: redis.Redis, wire: int) -> None:
    """Admitted at NOW with 5 s to start; the worker starts at NOW + 5 s (the deadline
    reached, at it exactly), then a job admitted with a deadline a millisecond later runs."""
    queue = Queue(conn, "q", wire=wire)
    ran: list[str] = []
    queue.enqueue("JOB:late", b"x", now=NOW, expires_in_ms=5_000)
    queue.enqueue("JOB:edge", b"x", now=NOW + 1, expires_at_ms=NOW + 5_001)
    queue.enqueue("JOB:plain", b"x", now=NOW + 2)
    assert drained(queue, lambda job: ran.append(job.id), lambda: NOW + 5_000) == 2
    assert ran == ["JOB:edge", "JOB:plain"]
    assert queue.outcome("JOB:late").error == "expired"
    assert conn.hget("emq:{q}:job:JOB:late", "error") == b"expired"
    assert conn.zscore("emq:{q}:dead", "JOB:late") == NOW + 5_000
    assert conn.hgetall("emq:{q}:counts") == {b"expired": b"1"}
    expired = {sample.labels["queue"]: sample.value
               for family in QueueDepths(conn, ["q"]).collect()
               if family.name == "echomq_jobs_expired" for sample in family.samples
               if sample.name == "echomq_jobs_expired_total"}
    assert expired == {"q": 1}


def test_a_delayed_job_keeps_its_deadline_through_promote(conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "q", wire=wire)
    queue.enqueue("JOB:1", b"x", now=NOW, delay_ms=1_000, expires_in_ms=2_000)
    assert queue.promote(now=NOW + 3_000) == 1
    assert queue.claim(now=NOW + 3_000) is None
    assert queue.outcome("JOB:1").error == "expired"


def test_an_expired_job_requeued_by_the_operator_runs(conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "q", wire=wire)
    queue.enqueue("JOB:1", b"x", now=NOW, expires_in_ms=1_000)
    assert queue.claim(now=NOW + 1_000) is None
    assert requeue(conn, "q", "JOB:1", now=NOW + 2_000)
    assert conn.hget("emq:{q}:job:JOB:1", "expires_at") is None
    job = queue.claim(now=NOW + 3_000)
    assert job is not None and job.id == "JOB:1"


def test_a_sharded_queue_keeps_the_deadline_on_the_jobs_shard(conn: redis.Redis) -> None:
    queue = ShardedQueue(conn, "s", shards=2)
    queue.enqueue("JOB:1", b"x", now=NOW, expires_in_ms=1_000)
    queue.enqueue("JOB:2", b"x", now=NOW, expires_at_ms=NOW + 9_000)
    shard = queue.shard_queues[queue.shard_of("JOB:1", None)]
    assert conn.hget(shard.calls.key("job", "JOB:1"), "expires_at") == str(NOW + 1_000).encode()
    ran: list[str] = []
    assert drained(queue, lambda job: ran.append(job.id), lambda: NOW + 1_000) == 1
    assert ran == ["JOB:2"]
    assert queue.expired_count() == 1


@pytest.mark.parametrize("options, words", [
    ({"expires_in_ms": -1}, "expires_in_ms must be an integer from 0"),
    ({"expires_at_ms": 0}, "expires_at_ms must be an integer from 1"),
    ({"expires_in_ms": 5, "expires_at_ms": NOW}, "not both"),
    ({"expires_in_ms": 5, "lane": "tenant-a"}, "flat job"),
    ({"expires_in_ms": 5, "dedupe": "k1"}, "dedupe= takes no expires_in"),
])
def test_a_bad_deadline_on_the_queue_is_refused_before_anything_is_sent(
        conn: redis.Redis, options: dict[str, Any], words: str) -> None:
    with pytest.raises(ArgumentError, match=words):
        Queue(conn, "q").enqueue("JOB:1", b"x", now=NOW, **options)
    assert conn.dbsize() == 0


@pytest.mark.parametrize("options, words", [
    ({"expires_in": -0.5}, "expires_in must be a finite number of seconds from 0"),
    ({"expires_in": math.nan}, "expires_in must be a finite"),
    ({"expires_in": math.inf}, "expires_in must be a finite"),
    ({"expires_in": True}, "expires_in must be a finite"),
    ({"expires_at": math.nan}, "expires_at must be a time after the epoch"),
    ({"expires_at": -5}, "expires_at must be a time after the epoch"),
    ({"expires_at": datetime.datetime(2030, 1, 1)}, "timezone-aware"),
    ({"expires_at": "tomorrow"}, "expires_at takes a datetime or epoch seconds"),
    ({"expires_in": 5, "expires_at": 2e9}, "not both"),
])
def test_a_bad_deadline_on_a_task_is_refused_before_anything_is_sent(
        conn: redis.Redis, options: dict[str, Any], words: str) -> None:
    app = App(conn, "default")

    @app.task(name="quick")
    def quick(n: int) -> int:
        return n

    with pytest.raises(ArgumentError, match=words):
        quick.with_options(**options).enqueue(1)
    assert conn.dbsize() == 0


def test_a_task_deadline_is_stored_as_asked(conn: redis.Redis) -> None:
    """``expires_at`` as an aware datetime or epoch seconds, ``expires_in`` rounded up to the
    millisecond from the enqueue (never earlier than asked)."""
    app = App(conn, "default", wire=5)

    @app.task(name="quick")
    def quick(n: int) -> int:
        return n

    at = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    by_date = quick.with_options(expires_at=at).enqueue(1)
    by_epoch = quick.with_options(expires_at=1_900_000_000.0005).enqueue(2)
    before = wall_ms()
    by_delay = quick.with_options(expires_in=0.0015).enqueue(3)
    after = wall_ms()

    def deadline(job_id: str) -> int:
        return int(conn.hget(f"emq:{{default}}:job:{job_id}", "expires_at") or 0)

    assert deadline(by_date.id) == 1_893_456_000_000
    assert deadline(by_epoch.id) == 1_900_000_000_001
    assert before + 2 <= deadline(by_delay.id) <= after + 2
    with pytest.raises(ValueError, match="expiry"):
        quick.with_options(expires_in=5, after=[by_date.id])
    with pytest.raises(ValueError, match="job_id and priority only"):
        quick.with_options(expires_in=5).s(1)
    with pytest.raises(ValueError, match="expires_in and expires_at take one enqueue at a time"):
        quick.with_options(expires_in=5).enqueue_many([(4,)])
    assert conn.zcard("emq:{default}:pending") == 3


def test_a_worker_gets_past_more_expired_jobs_than_one_claim_ends(
        conn: redis.Redis, wire: int) -> None:
    """250 jobs past their deadline ahead of a live one: each claim ends at most 100 of them,
    replying nothing when it ends only those and leaving a wake token (a parked worker claims
    again at once); the third claim leases the live job."""
    queue = Queue(conn, "q", wire=wire)
    queue.enqueue_many([(f"JOB:old-{n:03d}", b"x") for n in range(250)], now=NOW)
    for n in range(250):  # the batch takes no deadline: each row gets one behind its back
        conn.hset(f"emq:{{q}}:job:JOB:old-{n:03d}", "expires_at", NOW + 1)
    queue.enqueue("JOB:live", b"x", now=NOW + 1)
    conn.delete("emq:{q}:wake")  # the admissions' tokens
    assert queue.claim(now=NOW + 5) is None  # the bound: 100 ended, nothing leased
    assert (queue.expired_count(), conn.zcard("emq:{q}:pending")) == (100, 151)
    assert conn.lrange("emq:{q}:wake", 0, -1) == [b"1"]
    assert queue.claim(now=NOW + 5) is None
    job = queue.claim(now=NOW + 5)
    assert job is not None and job.id == "JOB:live"
    assert (queue.expired_count(), conn.zcard("emq:{q}:dead")) == (250, 250)
    assert conn.llen("emq:{q}:wake") == 2  # the third walk ended 50: under the bound
