"""A job that kills its worker costs its batch neighbours at most one attempt.

A worker process runs a consumer whose handler ends the process (``os._exit``) on one chosen
job, P; it is started again after each crash, as a supervisor would, until P is dead. The jobs
prefetched with P at its first crash were charged that attempt; claimed again, each runs alone
(its attempt is more than 1), so a later crash of P charges nobody else. P goes dead at its
last attempt by recover; every other job is acked (its tombstone shows at most two attempts:
P's first crash and its own run) and none is dead.

The queue stays busy, as it does in production: the restarted worker drains fresh jobs, its
batches grown to ``prefetch``, when recover puts P and its neighbours back at the head of the
queue — so its next batch holds them all again. The clock is the server's plus a skew that
each job's handler moves on by 10 ms (every job "takes" that long), so a lease runs out
after a known amount of work as well as of time. Waits are bounded and on conditions; each
restarted consumer's housekeeping recovers the crashed one's leases.

In process, on both shells and wires: a job claimed before runs as the only lease held, the jobs
behind it handed back uncounted; a consumer with ``max_attempts=1`` claims one job at a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from echomq import Job, Queue, Release
from echomq.embedded import EmbeddedValkey
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import command_calls, wait_until

ROOT = Path(__file__).resolve().parent.parent
POISON = "JOB:040"  # in the sixth batch of a fresh consumer (32 jobs), at index 9
JOBS = 400
MAX_ATTEMPTS = 3
RUNS_ALLOWED = 8  # a bound on worker starts: P's crashes, then one to see it dead

WORKER = """
import os, sys, redis
from echomq import Queue, Consumer, aio
port, wire, shell, poison = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
ledger = redis.Redis(port=port)
def clock():
    with ledger.pipeline(transaction=False) as pipe:
        (seconds, micros), skew = pipe.time().get("skew").execute()
    return seconds * 1000 + micros // 1000 + int(skew or 0)
def handler(job):
    if job.id == poison:
        os._exit(3)  # the worker is lost, as after a segfault or an OOM kill
    ledger.incrby("skew", 10)
def on_ack(job):
    ledger.rpush("acked", job.id)
options = dict(max_attempts=3, lease_ms=1_000, housekeeping_ms=5, park_cap_ms=50,
               on_ack=on_ack, clock=clock)
if shell == "sync":
    Consumer(Queue(redis.Redis(port=port), "poison", wire=wire), handler, **options).run()
else:
    import asyncio, redis.asyncio as aredis
    async def main():
        queue = aio.Queue(aredis.Redis(port=port), "poison", wire=wire)
        await aio.Consumer(queue, handler, **options).run()
    asyncio.run(main())
"""


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "poison", wire=request.param)


def acked(queue: Queue) -> list[str]:
    return [job_id.decode() for job_id in queue.conn.lrange("acked", 0, -1)]


def run_until_crashed_or(worker: subprocess.Popen[bytes], done: Callable[[], bool]) -> int:
    """Let ``worker`` run until it exits or ``done()`` holds (then it is killed); its exit
    code."""
    try:
        assert wait_until(lambda: worker.poll() is not None or done(), timeout=20.0)
    finally:
        if worker.poll() is None:
            worker.kill()
    return worker.wait(5.0)


@pytest.mark.pairs(("shell", "queue"), [("sync", 5), ("async", 6)])
def test_a_job_that_kills_its_worker_takes_no_neighbour_dead_with_it(
        shell: str, queue: Queue, valkey: EmbeddedValkey) -> None:
    ids = [f"JOB:{i:03d}" for i in range(JOBS)]
    others = [job_id for job_id in ids if job_id != POISON]
    queue.enqueue_many([(job_id, b"x") for job_id in ids])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def settled() -> bool:  # P is dead, and every job has ended (acked or dead)
        counts = queue.counts()
        return queue.conn.zscore(queue.key("dead"), POISON) is not None and \
            counts["pending"] + counts["active"] + counts["delayed"] == 0

    crashes = runs = 0
    while not settled():
        assert runs < RUNS_ALLOWED, (crashes, acked(queue), queue.counts())
        runs += 1
        worker = subprocess.Popen([sys.executable, "-c", WORKER, str(valkey.port),
                                   str(queue.wire), shell, POISON], env=env)
        if run_until_crashed_or(worker, settled) == 3:
            crashes += 1

    assert queue.conn.zrange(queue.key("dead"), 0, -1) == [POISON.encode()]
    assert crashes == MAX_ATTEMPTS
    row = queue.conn.hgetall(queue.key("job", POISON))
    assert row[b"error"] == b"lease expired during attempt 3: the worker was lost"
    for job_id in others:  # acked: a tombstone, charged at most P's first crash besides its run
        row = queue.conn.hgetall(queue.key("job", job_id))
        assert b"p" not in row and int(row[b"a"]) <= 2, (job_id, row)
    # on_ack follows its ack's reply, so a crash can fall between the two: none is told twice
    ledger = Counter(acked(queue))
    assert set(ledger) <= set(others) and set(ledger.values()) == {1}, ledger
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 1, "lanes": 0}


def test_a_job_claimed_before_runs_with_nothing_else_in_hand(make: Make, queue: Queue) -> None:
    """JOB:001 lost a lease once (attempt 2 next). The consumer's second batch is JOB:001 and
    JOB:002: JOB:002 is handed back, uncounted, before JOB:001's handler starts, so while it
    runs it is the only lease in the queue; the ramp then starts over at one job."""
    ids = [f"JOB:{i:03d}" for i in range(6)]
    queue.enqueue_many([(job_id, b"x") for job_id in ids], now=1_000)
    leased = queue.claim_many(6, lease_ms=10, now=2_000)
    queue.settle([Release(job) for job in leased if job.id != ids[1]], now=2_000)
    assert queue.recover(now=2_010) == 1  # JOB:001 is back at its place, one attempt counted
    ran: list[tuple[str, int]] = []
    in_hand_while_it_ran: list[bytes] = []

    def handler(job: Job) -> None:
        ran.append((job.id, job.attempt))
        if job.id == ids[1]:
            in_hand_while_it_ran.extend(queue.conn.zrange(queue.key("active"), 0, -1))

    consumer = make(queue, handler, prefetch=8, settle_delay_ms=60_000)
    assert consumer.beat(park=False) == 6
    assert ran == [(ids[0], 1), (ids[1], 2)] + [(job_id, 1) for job_id in ids[2:]]
    assert in_hand_while_it_ran == [ids[1].encode()]
    for job_id in ids[2:]:  # handed back uncounted, then run once
        assert queue.conn.hget(queue.key("job", job_id), "a") == b"1"
    assert queue.counts()["active"] == 0


def test_a_consumer_with_one_attempt_per_job_claims_one_job_at_a_time(
        make: Make, conn: redis.Redis) -> None:
    """With max_attempts=1 a crash would take the only attempt of every job prefetched with
    the one that caused it: each settle claims one job (and acks the one before)."""
    queue = Queue(conn, "single", wire=6)
    queue.enqueue_many([(f"JOB:{i}", b"x") for i in range(5)])
    consumer = make(queue, lambda job: None, prefetch=64, max_attempts=1)
    before = command_calls(conn)
    assert consumer.beat(park=False) == 5
    assert command_calls(conn)["emq.settle"] - before.get("emq.settle", 0) == 6
