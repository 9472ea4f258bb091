"""Dependencies and the join on a real server, on the scripts' wire (wire=5): a job admitted by
ENQUEUE_AFTER and its parents named by AFTER (in chunks of at most 1000, the last one sealing),
all in one MULTI/EXEC, then run by the Queue's own claim, ack, retry and cancel, whose end hook
releases, fails or cancels the jobs waiting on them (docs/PROTOCOL.md "The end hook")."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis

from echomq import Queue
from echomq.embedded import EmbeddedValkey
from echomq.engine import transitions as t
from echomq.engine.calls import Verdict
from echomq.engine.scripts import script_for
from echomq.ops import admin

NAME = "join"
CHUNK = 1000


def enqueue_after(conn: redis.Redis, job_id: str, after: Sequence[str], policy: str = "fail",
                  payload: bytes = b"p") -> Verdict:
    """ENQUEUE_AFTER, then AFTER in chunks of CHUNK parents (the last sealing; no parents: one
    sealing call), in one MULTI/EXEC. The job's verdict: the last call's, or DUPLICATE."""
    base = t.queue_base(NAME)
    shas = {}
    for transition in (t.ENQUEUE_AFTER, t.AFTER):
        script = script_for(transition)
        shas[transition.name] = conn.script_load(script.source)
    chunks = [list(after[i:i + CHUNK]) for i in range(0, len(after), CHUNK)] or [[]]
    with conn.pipeline(transaction=True) as pipe:
        keys = t.keys_for(base, t.ENQUEUE_AFTER, job_id)
        pipe.evalsha(shas["enqueue_after"], len(keys), *keys, job_id, payload, "*", policy)
        keys = t.keys_for(base, t.AFTER, job_id)
        for n, chunk in enumerate(chunks):
            seal = int(n == len(chunks) - 1)
            pipe.evalsha(shas["after"], len(keys), *keys, job_id, "*", seal, *chunk)
        replies = pipe.execute()
    first = Verdict.of(replies[0])
    return first if first is Verdict.DUPLICATE else Verdict.of(replies[-1])


@pytest.fixture
def queue(conn: redis.Redis) -> Queue:
    return Queue(conn, NAME, wire=5, max_attempts=1)


def run_one(queue: Queue, expect: str, *, fail: bool = False) -> None:
    """Claim the next job, which must be ``expect``, and ack it (or fail it for good)."""
    job = queue.claim()
    assert job is not None and job.id == expect
    if fail:
        assert queue.retry(job, error="boom", max_attempts=1) is Verdict.DEAD
    else:
        assert queue.ack(job) is Verdict.ACKED


def waiting(conn: redis.Redis) -> int:
    return admin.stats(conn, NAME).waiting


def test_a_chain_of_three_runs_in_order(conn: redis.Redis, queue: Queue) -> None:
    queue.enqueue("JOB:a", b"a")
    assert enqueue_after(conn, "JOB:b", ["JOB:a"]) is Verdict.WAITING
    assert enqueue_after(conn, "JOB:c", ["JOB:b"]) is Verdict.WAITING
    assert waiting(conn) == 2
    run_one(queue, "JOB:a")
    assert waiting(conn) == 1
    run_one(queue, "JOB:b")
    run_one(queue, "JOB:c")
    assert queue.claim() is None and waiting(conn) == 0


def test_fan_in_waits_for_every_parent(conn: redis.Redis, queue: Queue) -> None:
    for n in range(3):
        queue.enqueue(f"JOB:p{n}", b"p")
    assert enqueue_after(conn, "JOB:join", ["JOB:p0", "JOB:p1", "JOB:p2"]) is Verdict.WAITING
    run_one(queue, "JOB:p0")
    run_one(queue, "JOB:p1")
    assert waiting(conn) == 1
    run_one(queue, "JOB:p2")
    run_one(queue, "JOB:join")


@pytest.mark.parametrize(("policy", "runs"), [("fail", False), ("ignore", True),
                                              ("continue", True)])
def test_a_dead_parent_under_each_policy(conn: redis.Redis, queue: Queue, policy: str,
                                         runs: bool) -> None:
    queue.enqueue("JOB:p", b"p")
    assert enqueue_after(conn, "JOB:d", ["JOB:p"], policy) is Verdict.WAITING
    run_one(queue, "JOB:p", fail=True)
    if runs:
        run_one(queue, "JOB:d")
    else:
        outcome = queue.outcome("JOB:d")
        assert outcome.state == "dead" and outcome.error == "parent JOB:p died: boom"
        assert queue.claim() is None


def test_ignore_still_waits_for_the_other_parents(conn: redis.Redis, queue: Queue) -> None:
    queue.enqueue("JOB:p", b"p")
    queue.enqueue("JOB:q", b"q")
    assert enqueue_after(conn, "JOB:d", ["JOB:p", "JOB:q"], "ignore") is Verdict.WAITING
    run_one(queue, "JOB:p", fail=True)
    assert waiting(conn) == 1
    run_one(queue, "JOB:q")
    run_one(queue, "JOB:d")


def test_a_failure_runs_down_a_chain(conn: redis.Redis, queue: Queue) -> None:
    queue.enqueue("JOB:a", b"a")
    enqueue_after(conn, "JOB:b", ["JOB:a"])
    enqueue_after(conn, "JOB:c", ["JOB:b"])
    run_one(queue, "JOB:a", fail=True)
    assert queue.outcome("JOB:c").error == "parent JOB:b died: parent JOB:a died: boom"
    assert waiting(conn) == 0


def test_cancel_propagates(conn: redis.Redis, queue: Queue) -> None:
    queue.enqueue("JOB:a", b"a")
    enqueue_after(conn, "JOB:b", ["JOB:a"])
    enqueue_after(conn, "JOB:c", ["JOB:b"])
    enqueue_after(conn, "JOB:x", ["JOB:a"])
    assert queue.cancel("JOB:b") is Verdict.CANCELLED  # a waiting job: out of waiting at once
    assert queue.outcome("JOB:c").state == "cancelled"
    assert waiting(conn) == 1
    assert queue.cancel("JOB:a") is Verdict.CANCELLED  # a pending parent
    assert queue.outcome("JOB:x").state == "cancelled"
    assert waiting(conn) == 0 and queue.claim() is None


def test_a_parent_already_ended_or_absent_at_admission(conn: redis.Redis, queue: Queue) -> None:
    queue.enqueue("JOB:done", b"p")
    run_one(queue, "JOB:done")
    assert enqueue_after(conn, "JOB:1", ["JOB:done"]) is Verdict.READY
    assert enqueue_after(conn, "JOB:2", ["JOB:never"]) is Verdict.READY
    queue.enqueue("JOB:dead", b"p")
    run_one(queue, "JOB:1")
    run_one(queue, "JOB:2")
    run_one(queue, "JOB:dead", fail=True)
    assert enqueue_after(conn, "JOB:3", ["JOB:dead"]) is Verdict.DEAD
    assert enqueue_after(conn, "JOB:4", ["JOB:dead"], "continue") is Verdict.READY
    assert enqueue_after(conn, "JOB:4", ["JOB:dead"]) is Verdict.DUPLICATE
    assert enqueue_after(conn, "JOB:5", []) is Verdict.READY


def test_fifteen_hundred_parents_in_chunks(conn: redis.Redis, queue: Queue) -> None:
    parents = [f"JOB:p{n}" for n in range(1500)]
    queue.enqueue_many([(p, b"p") for p in parents])
    assert enqueue_after(conn, "JOB:join", parents) is Verdict.WAITING
    assert conn.hget(t.queue_base(NAME) + "job:JOB:join", "waits") == b"1500"
    for n in range(1500):
        job = queue.claim()
        assert job is not None and job.id != "JOB:join"
        assert waiting(conn) == 1, n
        queue.ack(job)
    run_one(queue, "JOB:join")


def test_a_hook_key_the_acl_denies_refuses_before_any_write(conn: redis.Redis, queue: Queue,
                                                            valkey: EmbeddedValkey) -> None:
    """ack of a parent whose dependent waits needs <base>waiting (derived): a user denied it
    gets NOPERM and the lease stays as it was; a job with no dependents acks as before."""
    base = t.queue_base(NAME)
    queue.enqueue("JOB:p", b"p")
    queue.enqueue("JOB:solo", b"s")
    enqueue_after(conn, "JOB:d", ["JOB:p"])
    leases = [queue.claim(), queue.claim()]
    conn.acl_setuser("joiner", enabled=True, passwords=["+pw"], commands=["+@all"],
                     keys=[f"{base}active", f"{base}job:*", f"{base}ended:*",
                           f"{base}queueconf"])  # every ack reads the queue's limits
    user = redis.Redis(port=valkey.port, username="joiner", password="pw")
    try:
        sha = user.script_load(script_for(t.ACK).source)
        for job in leases:
            assert job is not None
            keys = t.keys_for(base, t.ACK, job.id)
            if job.id == "JOB:p":
                with pytest.raises(redis.exceptions.NoPermissionError):
                    user.evalsha(sha, len(keys), *keys, job.id, job.fence, 0)
                assert conn.zscore(base + "active", "JOB:p") is not None
                assert conn.hget(base + "job:JOB:p", "p") == b"p"
            else:
                assert user.evalsha(sha, len(keys), *keys, job.id, job.fence, 0) == b"ACKED"
    finally:
        user.close()
        conn.acl_deluser("joiner")
