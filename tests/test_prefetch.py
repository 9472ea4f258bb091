"""The consumer takes jobs in batches: one settle call per batch on both wires and both shells,
prefetched jobs handed back on a stop and recovered after a crash, a failure in the middle of a
batch retrying that job alone, and an outcome that never waits long for its round trip.

Round trips are counted with ``INFO commandstats``; waits are bounded and driven by events.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis

from echomq import Job, Queue
from echomq.consumer.blocking import server_ms
from echomq.embedded import EmbeddedValkey
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import command_calls, running, wait_until

ROOT = Path(__file__).resolve().parent.parent
SETTLE = {5: "evalsha", 6: "emq.settle"}
SINGLES = ("emq.ack", "emq.claim", "emq.retry", "emq.extend")


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "batch", wire=request.param)


def fill(queue: Queue, n: int) -> list[str]:
    ids = [f"JOB:{i:03d}" for i in range(n)]
    queue.enqueue_many([(job_id, b"x") for job_id in ids])
    return ids


def transitions_sent(queue: Queue, before: dict[str, int]) -> dict[str, int]:
    """Transitions sent since ``before``: EVALSHA (wire 5) or each EMQ.* command (wire 6)."""
    after = command_calls(queue.conn)
    return {name: after[name] - before.get(name, 0) for name in after
            if (name == "evalsha" or name.startswith("emq.")) and after[name] != before.get(name)}


def test_a_batch_costs_one_settle_round_trip(make: Make, queue: Queue) -> None:
    """256 jobs: batches of 1, 2, 4 … 32 (the ramp, to half the prefetch: a consumer of one
    queue reads ahead, the batch running and the one sent ahead both in hand), then 32 each —
    about twice jobs/prefetch settle calls, not two round trips per job."""
    # outcomes wait for their batch's end here (none waits settle_delay_ms for the keeper)
    consumer = make(queue, lambda job: None, prefetch=64, settle_delay_ms=60_000)
    assert consumer.beat(park=False) == 0  # scripts loaded: no NOSCRIPT is counted below
    fill(queue, 256)
    before = command_calls(queue.conn)
    assert consumer.beat(park=False) == 256
    sent = transitions_sent(queue, before)
    # 1+2+4+8+16+32 = 63, then 32 six times, 1 (asking 32; each sent ahead as the batch
    # before it starts), and the claim that finds nothing
    rounds = 14
    housekeeping = 2  # recover + promote, once per beat (and again only after 1 s)
    if queue.wire == 6:
        assert sent["emq.settle"] == rounds
        assert not set(sent) & set(SINGLES)
    else:
        assert sent["evalsha"] <= rounds + 2 * housekeeping
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}


def test_prefetch_one_claims_runs_and_settles_one_at_a_time(make: Make, queue: Queue) -> None:
    ids = fill(queue, 5)
    ran: list[str] = []
    acked: list[str] = []
    consumer = make(queue, lambda job: ran.append(job.id), prefetch=1,
                    on_ack=lambda job: acked.append(job.id))
    before = command_calls(queue.conn)
    assert consumer.beat(park=False) == 5
    assert ran == ids and acked == ids
    if queue.wire == 6:  # each settle acks one job and claims the next
        assert transitions_sent(queue, before)["emq.settle"] == 6
    assert queue.counts()["active"] == 0


def test_a_failure_in_the_middle_of_a_batch_retries_that_job_alone(make: Make,
                                                                    queue: Queue) -> None:
    ids = fill(queue, 7)
    acked: list[str] = []

    def handler(job: Job) -> None:
        if job.id == ids[4]:
            raise ValueError("only this one")

    consumer = make(queue, handler, retry_delay_ms=60_000, on_ack=lambda job: acked.append(
        job.id))
    assert consumer.beat(park=False) == 7
    assert acked == ids[:4] + ids[5:]
    assert queue.conn.zrange(queue.key("delayed"), 0, -1) == [ids[4].encode()]
    error = queue.conn.hget(queue.key("job", ids[4]), "error")
    assert error is not None and error.startswith(b"ValueError: only this one")
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 1, "dead": 0, "lanes": 0}


def test_stop_hands_back_the_prefetched_jobs_at_once(make: Make, queue: Queue) -> None:
    """Stopped while JOB:003 runs (the third batch holds JOB:003-006, a whole batch at half the
    prefetch, so JOB:007-009 were claimed ahead as it started): the running job finishes and is
    acked; JOB:004-009 are pending again at their place, their attempt uncounted, and no lease
    of theirs is left in active."""
    ids = fill(queue, 10)
    running_now, release = threading.Event(), threading.Event()

    def handler(job: Job) -> None:
        if job.id == ids[3]:
            running_now.set()
            release.wait(5.0)

    consumer = make(queue, handler, prefetch=8, park_cap_ms=30_000)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    assert running_now.wait(5.0)
    # JOB:003, the three behind it and the three claimed ahead (that call was sent before the
    # handler started; the server may still be running it)
    assert wait_until(lambda: queue.conn.zcard(queue.key("active")) == 7)
    consumer.stop()
    release.set()
    thread.join(5.0)
    assert not thread.is_alive()
    assert queue.conn.zcard(queue.key("active")) == 0
    pending = queue.conn.zrange(queue.key("pending"), 0, -1)
    assert pending == [job_id.encode() for job_id in ids[4:]]
    for job_id in ids[4:]:
        assert queue.conn.hget(queue.key("job", job_id), "a") in (None, b"0")
    assert queue.conn.hget(queue.key("job", ids[3]), "p") is None  # acked


def test_an_ack_waits_at_most_settle_delay_ms_behind_a_slow_handler(make: Make,
                                                                   queue: Queue) -> None:
    """JOB:001 and JOB:002 come in one batch; JOB:002's handler blocks. JOB:001's ack reaches
    the server while JOB:002 still runs: the keeper sends it once it waited settle_delay_ms."""
    ids = fill(queue, 3)
    blocked, release = threading.Event(), threading.Event()

    def handler(job: Job) -> None:
        if job.id == ids[2]:
            blocked.set()
            release.wait(10.0)

    def acked(job_id: str) -> bool:
        row = queue.key("job", job_id)
        return queue.conn.zscore(queue.key("active"), job_id) is None and (
            queue.conn.hget(row, "p") is None)

    consumer = make(queue, handler, settle_delay_ms=5, park_cap_ms=30_000)
    try:
        with running(consumer):
            assert blocked.wait(5.0)
            assert wait_until(lambda: acked(ids[1]), timeout=2.0)
            assert not release.is_set() and not acked(ids[2])
            release.set()
            assert wait_until(lambda: acked(ids[2]))
    finally:
        release.set()


def test_the_heartbeat_extends_every_lease_in_hand_in_one_call(make: Make,
                                                               conn: redis.Redis) -> None:
    """While JOB:003 runs past several heartbeats, the jobs prefetched behind it keep their
    leases too: every beat is one EXTEND_MANY for all of them."""
    queue = Queue(conn, "batch", wire=6)
    ids = fill(queue, 7)
    running_now, release = threading.Event(), threading.Event()

    def handler(job: Job) -> None:
        if job.id == ids[3]:
            running_now.set()
            release.wait(5.0)

    consumer = make(queue, handler, lease_ms=300, park_cap_ms=30_000)
    try:
        with running(consumer):
            assert running_now.wait(5.0)
            before = command_calls(conn)
            late = server_ms(conn) + 300
            assert wait_until(lambda: transitions_sent(queue, before).get(
                "emq.extend_many", 0) >= 3)
            deadlines = [conn.zscore(queue.key("active"), job_id) for job_id in ids[3:7]]
            assert all(d is not None and d > late for d in deadlines), deadlines
            assert "emq.extend" not in transitions_sent(queue, before)
            release.set()
    finally:
        release.set()
    assert queue.counts()["active"] == 0


def test_a_lane_consumer_claims_one_at_a_time_and_settles_in_batches(
        make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "lanes", wire=5)
    queue.enqueue_many([(f"JOB:{g}{n}", b"x", g) for g in "abc" for n in range(4)])
    served: list[str | None] = []
    consumer = make(queue, lambda job: served.append(job.lane), lanes=True,
                    settle_delay_ms=60_000)
    before = command_calls(conn)
    assert consumer.beat(park=False) == 12
    assert served[:3] in (["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"])  # turns
    # recover + promote, 12 lane claims and the empty one, then one settle of all 12 acks
    assert transitions_sent(queue, before)["evalsha"] <= 2 + 13 + 1 + 2
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}


KILLED = """
import sys, threading, redis
from echomq import Queue, Consumer
from echomq import aio
port, wire, shell = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def handler(job):
    if job.id != "JOB:000":
        redis.Redis(port=port).set("running", job.id)
        threading.Event().wait()  # killed here
if shell == "sync":
    Consumer(Queue(redis.Redis(port=port), "batch", wire=wire), handler, prefetch=8).run()
else:
    import asyncio, redis.asyncio as aredis
    async def main():
        queue = aio.Queue(aredis.Redis(port=port), "batch", wire=wire)
        await aio.Consumer(queue, handler, prefetch=8).run()
    asyncio.run(main())
"""


def test_a_killed_consumers_prefetched_jobs_come_back_through_recover(
        shell: str, queue: Queue, valkey: EmbeddedValkey) -> None:
    fill(queue, 5)  # claimed: JOB:000 alone, then JOB:001 with JOB:002 behind it
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-c", KILLED, str(valkey.port), str(queue.wire),
                                shell], env=env)
    try:
        assert wait_until(lambda: queue.conn.get("running") == b"JOB:001", timeout=10.0)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(5.0)
    held = queue.conn.zrange(queue.key("active"), 0, -1)
    assert held == [b"JOB:001", b"JOB:002"]  # the running job and the one prefetched
    lease_end = max(score for _, score in queue.conn.zrange(queue.key("active"), 0, -1,
                                                            withscores=True))
    assert queue.recover(now=int(lease_end)) == 2
    assert queue.conn.zrange(queue.key("pending"), 0, -1) == [b"JOB:001", b"JOB:002",
                                                             b"JOB:003", b"JOB:004"]
    again = queue.claim_many(2, now=int(lease_end))
    assert [(job.id, job.attempt) for job in again] == [("JOB:001", 2), ("JOB:002", 2)]
