"""Finding queues: a registry of names, not a scan of the keyspace. Stats cost grows with the
number of queues, never with the number of job rows, and a drained queue stays listed."""

from __future__ import annotations

import redis

from echomq import Queue
from echomq.ops import admin

NOW = 1_700_000_000_000
JOB_ROWS = 200_000


def commands_run(conn: redis.Redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (INFO and CONFIG left out)."""
    info = conn.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in info.items()
            if not name.startswith(("cmdstat_info", "cmdstat_config"))}


# Written by the server in steps of 10,000: the same rows a client's pipeline would write,
# without sending 200,000 commands from the test.
FILL_ROWS = """
for n = tonumber(ARGV[1]), tonumber(ARGV[2]) do
    redis.call('HSET', 'emq:{bulk}:job:JOB:' .. n, 'p', 'x', 'a', 0)
end
"""


def fill_job_rows(conn: redis.Redis, count: int) -> None:
    """``count`` job rows of queue ``bulk`` (rows only: what a busy server is mostly made of)."""
    for start in range(0, count, 10_000):
        conn.eval(FILL_ROWS, 0, start, min(count, start + 10_000) - 1)


def test_stats_of_every_queue_never_scans_job_rows(conn: redis.Redis) -> None:
    fill_job_rows(conn, JOB_ROWS)
    Queue(conn, "bulk").enqueue("JOB:live", b"", now=NOW)
    Queue(conn, "mail").enqueue("JOB:1", b"", now=NOW)
    assert admin.queue_names(conn) == ["bulk", "mail"]  # discovered once, by their fixed keys
    conn.config_resetstat()
    for _ in range(3):
        names = admin.queue_names(conn)
        found = [admin.stats(conn, name) for name in names]
    assert [(s.name, s.pending) for s in found] == [("bulk", 1), ("mail", 1)]
    ran = commands_run(conn)
    assert "scan" not in ran and "keys" not in ran, ran
    assert ran["smembers"] == 3
    # Per round: EXISTS + SMEMBERS, and per queue a fixed 13 at most (the sizes of its sets,
    # waiting included, its heads, lanes and the ring's entries left behind, pauses, limits and
    # clock); nothing per job row.
    assert sum(ran.values()) <= 3 * (2 + 2 * 13), ran


def test_discovery_scans_once_and_never_returns_job_rows(conn: redis.Redis) -> None:
    fill_job_rows(conn, 20_000)
    Queue(conn, "bulk").enqueue("JOB:live", b"", now=NOW)
    conn.config_resetstat()
    assert admin.discover_queues(conn) == {"bulk"}
    scans = commands_run(conn)["scan"]
    returned = 0
    cursor = 0
    while True:
        cursor, keys = conn.scan(cursor, match="emq:{*}:[pdar]*", count=1000)
        returned += len(keys)
        if cursor == 0:
            break
    assert returned == 1  # the pending key; no job row reaches the client
    assert scans >= 1
    conn.config_resetstat()
    assert admin.queue_names(conn) == ["bulk"]
    assert "scan" not in commands_run(conn)


def test_a_drained_queue_stays_listed_until_forgotten(conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    admin.register_queue(conn, "mail")
    queue.enqueue("JOB:1", b"", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    queue.ack(job)
    assert admin.queue_names(conn) == ["mail"]
    drained = admin.stats(conn, "mail")
    assert (drained.pending, drained.active, drained.delayed, drained.dead) == (0, 0, 0, 0)
    assert admin.forget_queue(conn, "mail")
    assert admin.queue_names(conn) == []
    assert not admin.forget_queue(conn, "mail")


def test_a_producing_queue_enters_the_registry_once(conn: redis.Redis) -> None:
    """The first admission of a Queue adds its name (one SADD per Queue, not per job), so a
    server whose keyspace was already searched still lists a queue made afterwards."""
    conn.set("emq:queues:discovered", "1")  # discovery is over: only the registry can list it
    queue = Queue(conn, "later")
    conn.config_resetstat()
    queue.enqueue("JOB:1", b"", now=NOW)
    queue.enqueue_many([("JOB:2", b""), ("JOB:3", b"")], now=NOW)
    assert admin.queue_names(conn) == ["later"]
    assert commands_run(conn).get("sadd") == 1


def test_a_user_denied_the_registry_still_produces(valkey: object, conn: redis.Redis) -> None:
    conn.execute_command("ACL", "SETUSER", "producer", "on", ">pw", "~emq:{only}:*", "+@all")
    port = conn.connection_pool.connection_kwargs["port"]
    limited = redis.Redis(port=port, username="producer", password="pw")
    try:
        verdict = Queue(limited, "only", check_policy=False).enqueue("JOB:1", b"x", now=NOW)
        assert verdict.value == "ENQUEUED"
        assert conn.zcard("emq:{only}:pending") == 1
    finally:
        limited.close()
        conn.execute_command("ACL", "DELUSER", "producer")
