"""The readers of a lane's depth count both its keys: the list of its priority-0 jobs and the
``prio:<group>`` zset of its others (lane_depths, the operator's lane report, admin's stats and
inspect, the dashboard's paused lanes); the oldest waiting lane job is read from either head."""

from __future__ import annotations

import redis

from echomq import Queue
from echomq.engine.priority import pending_score
from echomq.engine.server_time import server_ms
from echomq.ops import admin
from echomq.queue.lanes import lane_report

LONG_AGO = 1_000_000


def seed(conn: redis.Redis, queue: Queue) -> None:
    """Group a: one listed job, two prioritised ones; group b: one prioritised job only. Both in
    the ring."""
    for job_id, group, priority in (("JOB:a0", "a", 0), ("JOB:a1", "a", 5), ("JOB:a2", "a", -5),
                                    ("JOB:b1", "b", 9)):
        at = LONG_AGO if job_id == "JOB:b1" else LONG_AGO * 2
        conn.hset(queue.key("job", job_id), mapping={"p": "p", "a": "0",
                                                      "t": str(at), "lane": group})
        if priority:
            conn.hset(queue.key("job", job_id), "priority", str(priority))
            conn.zadd(queue.key("prio", lane=group), {job_id: pending_score(priority, at)})
        else:
            conn.rpush(queue.key("lane", lane=group), job_id)
    conn.rpush(queue.key("ring"), "a", "b")


def test_lane_depths_count_both_keys(conn: redis.Redis) -> None:
    queue = Queue(conn, "readers", check_policy=False)
    seed(conn, queue)
    assert queue.lane_depths() == {"a": 3, "b": 1}
    waiting = {row["group"]: row["waiting"] for row in lane_report(queue)}
    assert waiting == {"a": 3, "b": 1}


def test_a_paused_group_of_prioritised_jobs_is_shown(conn: redis.Redis) -> None:
    queue = Queue(conn, "readers", check_policy=False)
    seed(conn, queue)
    queue.pause("b")
    assert queue.lane_depths() == {"a": 3, "b": 1}


def test_stats_count_both_keys_and_read_the_oldest_from_either_head(conn: redis.Redis) -> None:
    queue = Queue(conn, "readers", check_policy=False)
    seed(conn, queue)
    before = server_ms(conn)
    found = admin.stats(conn, "readers")
    after = server_ms(conn)
    assert found.lanes == {"a": 3, "b": 1}
    # b's only job, admitted LONG_AGO, heads the prio zset: its time is read from the score
    assert found.oldest_pending_age_ms is not None
    assert before - LONG_AGO <= found.oldest_pending_age_ms <= after - LONG_AGO


def test_inspect_finds_a_prioritised_lane_job(conn: redis.Redis) -> None:
    queue = Queue(conn, "readers", check_policy=False)
    seed(conn, queue)
    shown = admin.inspect(conn, "readers", "JOB:b1")
    assert shown is not None
    assert shown["state"] == "lane:b"
    assert shown["fields"]["priority"] == "9"
