"""The upgrade path of the row layout: a queue written by the release before the one-letter
field names (raw commands, exactly as its scripts wrote them) is rewritten by ``echomq migrate``
and then drained by this release on both wires, every job once, with its payload, and its
outcomes read right."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner

from echomq import Queue
from echomq.cli.main import main
from echomq.embedded import EmbeddedValkey
from echomq.engine.calls import JobOutcome
from echomq.ops import admin
from echomq.ops.migrate import migrate_queue, rename
from echomq.queue.registry import REGISTRY_KEY
from tests.command_line import cli

AT = 1_700_000_000_000
NAME = "old"
BASE = "emq:{old}:"
PENDING = {"JOB:p1": b"one", "JOB:p2": b"two", "JOB:p3": b"\x00bin\xff"}


def write_old_release(conn: redis.Redis) -> None:
    """The keyspace of queue ``old`` as the previous release left it: three pending jobs, one in
    lane ``g``, a delayed retry (due), a dead job, an acked job's tombstone keeping its result,
    and a job leased by a worker that was stopped (its lease expired)."""
    for n, (job_id, payload) in enumerate(PENDING.items()):
        conn.hset(BASE + "job:" + job_id, mapping={"payload": payload, "attempts": "0",
                                                   "enqueued_at": str(AT + n)})
        conn.zadd(BASE + "pending", {job_id: AT + n})
    conn.hset(BASE + "job:JOB:lane", mapping={"payload": b"laned", "attempts": "0",
                                              "enqueued_at": str(AT), "lane": "g"})
    conn.rpush(BASE + "lane:g", "JOB:lane")
    conn.rpush(BASE + "ring", "g")
    conn.hset(BASE + "job:JOB:delayed", mapping={"payload": b"later", "attempts": "1",
                                                 "enqueued_at": str(AT), "fence": "1",
                                                 "error": "try again"})
    conn.zadd(BASE + "delayed", {"JOB:delayed": 1})
    conn.hset(BASE + "job:JOB:dead", mapping={"payload": b"doomed", "attempts": "3",
                                              "enqueued_at": str(AT), "fence": "2",
                                              "error": "boom"})
    seconds, micros = conn.time()
    conn.zadd(BASE + "dead", {"JOB:dead": seconds * 1000 + micros // 1000})  # not trimmed yet
    conn.rpush(BASE + "ended:JOB:dead", "1")
    conn.hset(BASE + "job:JOB:done", mapping={"attempts": "1", "enqueued_at": str(AT),
                                              "fence": "3", "result": b"forty-two"})
    conn.pexpire(BASE + "job:JOB:done", 600_000)
    conn.rpush(BASE + "ended:JOB:done", "1")
    conn.pexpire(BASE + "ended:JOB:done", 600_000)
    conn.hset(BASE + "job:JOB:leased", mapping={"payload": b"held", "attempts": "1",
                                                "enqueued_at": str(AT), "fence": "4"})
    conn.zadd(BASE + "active", {"JOB:leased": 1})
    conn.set(BASE + "fence", "4")
    conn.sadd(REGISTRY_KEY, NAME)


def rows_of(conn: redis.Redis) -> dict[bytes, dict[bytes, bytes]]:
    return {key: conn.hgetall(key) for key in conn.scan_iter(match=BASE + "job:*")}


@pytest.mark.parametrize("wire", [5, 6])
def test_a_queue_of_the_old_layout_drains_after_migrate(conn: redis.Redis, wire: int) -> None:
    write_old_release(conn)
    done = migrate_queue(conn, NAME)
    assert (done.rows, done.rewritten) == (8, 8)
    migrated = rows_of(conn)
    assert not any(set(row) & {b"payload", b"attempts", b"enqueued_at", b"fence"}
                   for row in migrated.values())
    assert migrated[(BASE + "job:JOB:delayed").encode()] == {
        b"p": b"later", b"a": b"1", b"t": str(AT).encode(), b"f": b"1", b"error": b"try again"}
    assert migrated[(BASE + "job:JOB:p1").encode()] == {b"p": b"one", b"t": str(AT).encode()}
    assert 0 < conn.pttl(BASE + "job:JOB:done") <= 600_000  # the tombstone keeps its expiry
    again = migrate_queue(conn, NAME)
    assert (again.rows, again.rewritten) == (8, 0) and rows_of(conn) == migrated

    queue = Queue(conn, NAME, wire=wire)
    assert queue.outcome("JOB:done") == JobOutcome("done", b"forty-two", None, 1)
    assert queue.outcome("JOB:dead") == JobOutcome("dead", None, "boom", 3)
    assert queue.outcome("JOB:p1") == JobOutcome("pending", None, None, 0)
    assert queue.outcome("JOB:leased") == JobOutcome("active", None, None, 1)
    (dead,) = admin.dead_jobs(conn, NAME)
    assert (dead.id, dead.attempts, dead.error) == ("JOB:dead", 3, "boom")
    shown = admin.inspect(conn, NAME, "JOB:delayed")
    assert shown is not None and shown["fields"]["payload"] == b"later"
    assert shown["fields"]["attempts"] == "1" and shown["fields"]["enqueued_at"] == str(AT)

    assert queue.recover_due()[:2] == (1, 1)  # the stopped worker's lease, the due retry
    assert admin.requeue(conn, NAME, "JOB:dead")
    ran: dict[str, tuple[bytes, int]] = {}
    while (job := queue.claim()) is not None:
        assert job.id not in ran
        ran[job.id] = (job.payload, job.attempt)
        queue.ack(job, result=b"r:" + job.payload)
    lanes = Queue(conn, NAME, wire=5)  # a lane claim is a script on either wire
    while (job := lanes.claim_lane()) is not None:
        assert job.id not in ran and job.lane == "g"
        ran[job.id] = (job.payload, job.attempt)
        lanes.ack(job)
    assert ran == {**{job_id: (payload, 1) for job_id, payload in PENDING.items()},
                   "JOB:delayed": (b"later", 2), "JOB:leased": (b"held", 2),
                   "JOB:dead": (b"doomed", 1), "JOB:lane": (b"laned", 1)}
    assert queue.outcome("JOB:p3") == JobOutcome("done", b"r:\x00bin\xff", None, 1)
    assert queue.outcome("JOB:done") == JobOutcome("done", b"forty-two", None, 1)
    assert (conn.zcard(BASE + "pending"), conn.zcard(BASE + "active"), conn.zcard(BASE + "delayed"),
            conn.zcard(BASE + "dead")) == (0, 0, 0, 0)


def test_a_new_name_already_set_keeps_its_value() -> None:
    sets, gone = rename([b"old", b"2", None, b"7", None, b"5", None, None])
    assert sets == {"p": b"old", "f": b"7"} and gone == ["payload", "attempts", "fence"]
    assert rename([None] * 4 + [b"p", b"1", b"2", b"3"]) == ({}, [])
    assert rename([b"x", b"0", b"9", None, None, None, None, None]) == (
        {"p": b"x", "t": b"9"}, ["payload", "attempts", "enqueued_at"])  # attempts 0: no a


def test_migrate_leaves_other_queues_and_keys_alone(conn: redis.Redis) -> None:
    write_old_release(conn)
    conn.hset("emq:{older}:job:JOB:1", mapping={"payload": "x", "attempts": "0"})
    conn.set(BASE + "job:JOB:string", "not a row")
    assert migrate_queue(conn, NAME).rewritten == 8
    assert conn.hgetall("emq:{older}:job:JOB:1") == {b"payload": b"x", b"attempts": b"0"}
    assert conn.get(BASE + "job:JOB:string") == b"not a row"


def test_the_command(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    empty = CliRunner().invoke(main, ["migrate"], env={"ECHOMQ_URL": valkey.url})
    lines = empty.output.splitlines()
    assert empty.exit_code == 1 and len(lines) == 2, empty.output
    assert lines[0].startswith("error: no queue to migrate") and lines[1].startswith("hint: ")
    write_old_release(conn)
    assert cli(valkey, "migrate") == "old: rewrote 8 of 8 rows\n"
    assert json.loads(cli(valkey, "migrate", "old", "--json")) == [
        {"queue": "old", "rows": 8, "rewritten": 0}]
