"""The events of the script-only transitions (lanes, an operator's tools), which the conformance
cases cannot compare with a native twin: each entry's fields, in order, as PROTOCOL.md's Events
lists them, and nothing on a duplicate or a job that is not dead."""

from __future__ import annotations

from typing import Any

import redis

from echomq.engine.executors import executor_for
from echomq.engine.transitions import (
    LANE_CLAIM,
    LANE_ENQUEUE,
    LANE_ENQUEUE_DELAYED,
    PURGE,
    REQUEUE,
    Transition,
    keys_for,
    queue_base,
)

NOW = 1_700_000_000_000
BASE = queue_base("q")
EVENTS = BASE + "events"


def run(conn: redis.Redis, transition: Transition, args: list[Any], job_id: str = "JOB:1",
        lane: str | None = "g") -> Any:
    keys = keys_for(BASE, transition, job_id, lane=lane)
    return executor_for(5).call(conn, transition, [*keys, EVENTS], args)


def fields(conn: redis.Redis) -> list[list[bytes]]:
    """Each entry's fields and values, in the order the entry holds them (the client's dict
    keeps it)."""
    return [[word for pair in entry.items() for word in pair] for _id, entry in conn.xrange(EVENTS)]


def test_lane_enqueues_and_lane_claim(conn: redis.Redis) -> None:
    assert run(conn, LANE_ENQUEUE, ["JOB:1", b"p", "g", NOW]) == b"ENQUEUED"
    assert run(conn, LANE_ENQUEUE, ["JOB:2", b"p", "g", NOW, "7"], "JOB:2") == b"ENQUEUED"
    assert run(conn, LANE_ENQUEUE, ["JOB:1", b"p", "g", NOW]) == b"DUPLICATE"
    assert run(conn, LANE_ENQUEUE_DELAYED, ["JOB:3", b"p", "g", NOW, 500, 0, "-3"],
               "JOB:3") == b"ENQUEUED"
    claimed = run(conn, LANE_CLAIM, [30_000, NOW + 1])
    assert claimed[0] == b"JOB:2"  # priority 7 first
    assert fields(conn) == [
        [b"kind", b"enqueued", b"job", b"JOB:1", b"attempt", b"0", b"at", b"%d" % NOW,
         b"lane", b"g"],
        [b"kind", b"enqueued", b"job", b"JOB:2", b"attempt", b"0", b"at", b"%d" % NOW,
         b"lane", b"g", b"priority", b"7"],
        [b"kind", b"enqueued", b"job", b"JOB:3", b"attempt", b"0", b"at", b"%d" % NOW,
         b"lane", b"g", b"due", b"%d" % (NOW + 500), b"priority", b"-3"],
        [b"kind", b"claimed", b"job", b"JOB:2", b"attempt", b"1", b"at", b"%d" % (NOW + 1),
         b"fence", b"1", b"lane", b"g"],
    ]


def test_requeue_and_purge(conn: redis.Redis) -> None:
    for job_id in ("JOB:1", "JOB:2"):
        conn.hset(BASE + "job:" + job_id, mapping={"p": "p", "a": "3",
                                                   "t": str(NOW), "error": "boom"})
        conn.zadd(BASE + "dead", {job_id: NOW})
    conn.hset(BASE + "job:JOB:2", "lane", "g")
    assert run(conn, REQUEUE, ["JOB:1", NOW + 5], lane=None) == b"REQUEUED"
    assert run(conn, REQUEUE, ["JOB:1", NOW + 6], lane=None) == b"NOT_DEAD"
    assert run(conn, REQUEUE, ["JOB:2", NOW + 7], "JOB:2", lane=None) == b"REQUEUED"
    conn.zadd(BASE + "dead", {"JOB:9": NOW})
    conn.hset(BASE + "job:JOB:9", mapping={"p": "p", "a": "2"})
    assert run(conn, PURGE, [10], lane=None) == 1
    assert fields(conn) == [
        [b"kind", b"requeued", b"job", b"JOB:1", b"attempt", b"0", b"at", b"%d" % (NOW + 5)],
        [b"kind", b"requeued", b"job", b"JOB:2", b"attempt", b"0", b"at", b"%d" % (NOW + 7),
         b"lane", b"g"],
        [b"kind", b"purged", b"job", b"JOB:9", b"attempt", b"2"],
    ]
