"""The operator's tools: stats, inspect, dead jobs, requeue and purge."""

from __future__ import annotations

import pytest
import redis

from echomq import KindError, Queue, Verdict
from echomq.engine.calls import QueueCalls
from echomq.engine.executors import executor_for
from echomq.engine.transitions import PURGE, REQUEUE
from echomq.ops import admin
from echomq.ops.dashboard import job_detail

NOW = 1_700_000_000_000


def kill(queue: Queue, job_id: str, lane: str | None = None, error: str = "boom",
         at: int = NOW + 5) -> None:
    queue.enqueue(job_id, b"payload", lane=lane, now=NOW)
    job = queue.claim_lane(now=NOW) if lane else queue.claim(now=NOW)
    assert job is not None and job.id == job_id
    assert queue.retry(job, error=error, max_attempts=1, now=at) is Verdict.DEAD


def test_stats_and_queue_names(conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue_many([("JOB:1", b""), ("JOB:2", b""), ("JOB:3", b"", "t1")], now=NOW)
    queue.claim(now=NOW)
    Queue(conn, "other").enqueue("JOB:9", b"")
    stats = admin.stats(conn, "mail")
    assert (stats.pending, stats.active, stats.delayed, stats.dead) == (1, 1, 0, 0)
    assert stats.lanes == {"t1": 1}
    assert stats.oldest_pending_age_ms == stats.server_time_ms - NOW
    assert admin.queue_names(conn) == ["mail", "other"]


def test_inspect_says_where_a_job_is(conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue_many([("JOB:1", b"one"), ("JOB:2", b"two", "t1")], now=NOW)
    assert admin.inspect(conn, "mail", "JOB:1") == {
        "id": "JOB:1", "state": "pending", "score": NOW, "expires_in_ms": None,
        "fields": {"payload": b"one", "attempts": "0", "enqueued_at": str(NOW)}}
    info = admin.inspect(conn, "mail", "JOB:2")
    assert info is not None and info["state"] == "lane:t1"
    job = queue.claim(lease_ms=100, now=NOW)
    assert job is not None
    queue.ack(job, retention_ms=60_000)
    done = admin.inspect(conn, "mail", "JOB:1")
    assert done is not None and done["state"] == "completed" and done["expires_in_ms"] > 0
    assert admin.inspect(conn, "mail", "JOB:404") is None


def test_dead_jobs_requeue_and_purge(conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    kill(queue, "JOB:flat", error="flat failed")
    kill(queue, "JOB:laned", lane="t1", error="lane failed", at=NOW + 6)
    kill(queue, "JOB:gone", at=NOW + 7)
    dead = admin.dead_jobs(conn, "mail")
    assert [(d.id, d.attempts, d.error, d.lane) for d in dead] == [
        ("JOB:flat", 1, "flat failed", None), ("JOB:laned", 1, "lane failed", "t1"),
        ("JOB:gone", 1, "boom", None)]
    assert admin.requeue(conn, "mail", "JOB:flat", now=NOW + 10)
    assert admin.requeue(conn, "mail", "JOB:laned", now=NOW + 10)
    assert not admin.requeue(conn, "mail", "JOB:flat")  # not dead any more
    again = queue.claim(now=NOW + 11)
    assert again is not None and again.id == "JOB:flat" and again.attempt == 1
    assert queue.claim_lane(now=NOW + 11) is not None
    assert admin.purge(conn, "mail") == 1
    assert not conn.exists(queue.key("job", "JOB:gone"))
    assert queue.enqueue("JOB:gone", b"fresh") is Verdict.ENQUEUED
    assert admin.dead_jobs(conn, "mail") == []


def test_requeue_and_purge_refuse_bad_input_and_change_nothing(conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    kill(queue, "JOB:1")
    before = {key: conn.dump(key) for key in conn.scan_iter()}
    with pytest.raises(KindError):
        admin.requeue(conn, "mail", "nope")
    calls = QueueCalls("mail")
    scripts = executor_for(5)
    transition, keys, _ = calls.requeue("JOB:1", NOW)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        conn.set(queue.key("ring"), "x")
        scripts.call(conn, REQUEUE, keys, ["JOB:1", str(NOW)])
    conn.delete(queue.key("ring"))
    with pytest.raises(Exception, match="EMQKEYS"):
        scripts.call(conn, transition, [*keys[:-1], queue.key("job", "JOB:2")], ["JOB:1", "1"])
    with pytest.raises(Exception, match="EMQNUM limit"):
        scripts.call(conn, PURGE, [queue.key("dead")], ["0"])
    assert {key: conn.dump(key) for key in conn.scan_iter()} == before


@pytest.mark.parametrize("wire", [5, 6])
def test_inspect_shows_a_result_dropped_for_memory(conn: redis.Redis, wire: int) -> None:
    """An ack with a result on a server over its maxmemory keeps no result: the job view (the
    CLI's inspect, the dashboard's detail) says so."""
    queue = Queue(conn, "mail", wire=wire)
    queue.enqueue("JOB:1", b"one", now=NOW)
    job = queue.claim(lease_ms=60_000, now=NOW)
    assert job is not None
    try:
        conn.config_set("maxmemory", "1")  # below any use: the server is over it
        assert queue.ack(job, retention_ms=60_000, result=b"r" * 1000) is Verdict.ACKED
    finally:
        conn.config_set("maxmemory", "0")
    found = admin.inspect(conn, "mail", "JOB:1")
    assert found is not None and found["state"] == "completed"
    assert found["fields"] == {"attempts": "1", "enqueued_at": str(NOW), "fence": "1",
                               "result": "dropped (memory)"}
    assert job_detail(found)["fields"]["result"] == "dropped (memory)"
