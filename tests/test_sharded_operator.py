"""The operator's tools see a sharded queue as one queue: ``admin.stats`` (summed, the oldest
age the largest of the shards'), dead jobs merged by time of death, requeue and purge, the
command line's stats, pause and resume, the metrics' depth gauges and the dashboard's queue
list — one row for the logical queue, never one per shard."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import redis
import redis.cluster

from echomq import Queue, Verdict
from echomq.embedded import EmbeddedValkey
from echomq.ops import admin
from echomq.ops.dashboard import create_app
from echomq.ops.metrics import QueueDepths
from tests.cluster import three_primaries
from tests.command_line import cli
from tests.reliability.servers import owner
from tests.test_dashboard import serve
from tests.test_metrics import collected, depth

NOW = 1_700_000_000_000


def made(conn: Any) -> Queue:
    """A queue of 4 shards: 30 flat jobs, 2 delayed, 6 of them dead (killed in order)."""
    queue = Queue(conn, "orders", shards=4, max_attempts=1, check_policy=False)
    assert queue.enqueue_many([(f"JOB:{n}", b"x") for n in range(30)],
                              now=NOW) == [Verdict.ENQUEUED] * 30
    queue.enqueue("JOB:later", b"x", delay_ms=60_000, now=NOW)
    queue.enqueue("JOB:later2", b"x", delay_ms=60_000, now=NOW)
    for at, job in enumerate(queue.claim_many(6, now=NOW)):
        assert queue.retry(job, error=f"boom {at}", now=NOW + at) is Verdict.DEAD
    return queue


def test_stats_are_one_row_summed_over_the_shards(conn: redis.Redis) -> None:
    made(conn)
    assert admin.queue_names(conn) == ["orders"]
    found = admin.stats(conn, "orders")
    assert (found.name, found.pending, found.active, found.delayed, found.dead) == (
        "orders", 24, 0, 2, 6)
    parts = [admin._stats_of(conn, calls, "orders") for calls in admin.queue_calls(conn,
                                                                                   "orders")]
    assert len(parts) == 4 and sum(part.pending for part in parts) == 24
    assert found.oldest_pending_age_ms == found.server_time_ms - NOW  # the largest age


def test_dead_jobs_requeue_and_purge_over_the_shards(conn: redis.Redis) -> None:
    queue = made(conn)
    dead = admin.dead_jobs(conn, "orders", 100)
    assert [job.error for job in dead] == [f"boom {at}" for at in range(6)]  # by time of death
    assert [job.id for job in admin.dead_jobs(conn, "orders", 2, start=3)] == [
        job.id for job in dead[3:5]]
    assert admin.inspect(conn, "orders", dead[0].id)["state"] == "dead"  # type: ignore[index]
    assert admin.requeue(conn, "orders", dead[0].id, now=NOW) is True
    assert queue.outcome(dead[0].id).state == "pending"
    assert admin.requeue(conn, "orders", "JOB:never") is False
    assert admin.purge(conn, "orders", limit=3) == 3
    assert admin.purge(conn, "orders") == 2
    assert queue.counts()["dead"] == 0


def test_the_command_line_sees_one_queue(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = made(conn)
    rows = json.loads(cli(valkey, "stats", "--json"))
    listed = rows if isinstance(rows, list) else rows["queues"]
    assert [(row["name"], row["pending"], row["dead"]) for row in listed] == [("orders", 24, 6)]
    cli(valkey, "pause", "orders")
    assert all(shard.is_paused() for shard in queue.shard_queues)
    cli(valkey, "resume", "orders")
    assert not any(shard.is_paused() for shard in queue.shard_queues)
    assert "JOB:" in cli(valkey, "dead", "list", "orders")


def test_the_depth_gauges_are_the_logical_queues(conn: redis.Redis) -> None:
    made(conn)
    found = collected(QueueDepths(conn))
    assert depth(found, "orders", "pending") == 24 and depth(found, "orders", "dead") == 6
    assert not any("{" in dict(labels).get("queue", "") for _, labels in found)


def test_the_dashboards_queue_list_has_one_row(conn: redis.Redis) -> None:
    made(conn)
    with serve(create_app(conn)) as base, urllib.request.urlopen(base + "api/queues") as answer:
        rows = json.loads(answer.read())
    assert [(row["name"], row["pending"], row["dead"]) for row in rows] == [("orders", 24, 6)]


def test_the_operators_tools_through_a_cluster() -> None:
    with three_primaries() as nodes:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=nodes[0].port)
        try:
            queue = made(client)
            slots = {int(client.keyslot(shard.key("pending"))) for shard in queue.shard_queues}
            assert len({owner(nodes, slot).port for slot in slots}) >= 2
            assert admin.queue_names(client) == ["orders"]
            found = admin.stats(client, "orders")
            assert (found.pending, found.delayed, found.dead) == (24, 2, 6)
            assert [job.error for job in admin.dead_jobs(client, "orders")] == [
                f"boom {at}" for at in range(6)]
            assert admin.purge(client, "orders") == 6
            assert admin.stats(client, "orders").dead == 0
        finally:
            client.close()
