"""Claims whose replies are lost, through a proxy that forwards a claim and closes the client's
connection when its reply hands out a lease it never handed out before (tests/reply_dropper.py),
against a real server, on both wires, the blocking and the asyncio consumer, flat and lanes.

The claim ran and its reply was lost: the consumer sends it again under the same claim id, and
the server answers the leases that claim recorded, their attempts counted once. So every job
reaches a handler at its first attempt, however many claim replies are lost — jobs allowed two
attempts all run and succeed — where a claim sent again blindly would lease more, and the leases
lost would come back through recovery with an attempt spent, until the jobs went dead unrun.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
import redis.asyncio

from echomq import Consumer, Job, Queue
from echomq.aio import Consumer as AsyncConsumer, Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.engine.scripts import script_for
from echomq.engine.transitions import ALL_TRANSITIONS, LANE_CLAIM, SETTLE
from tests.reply_dropper import ReplyDropper

JOBS = 6
MAX_ATTEMPTS = 2
LEASE_MS = 4_000
# A lease in a reply, as RESP2 and RESP3 write it: *4 (or *5, a lane claim's) id payload attempt
# fence.
LEASE = re.compile(rb"\$\d+\r\n(JOB:[^\r]*)\r\n\$\d+\r\n[^\r]*\r\n:\d+\r\n:(\d+)\r\n")
CASES = [(5, False), (6, False), (5, True)]
IDS = ["wire5", "wire6", "wire5-lanes"]


@pytest.fixture
def proxy(valkey: EmbeddedValkey, conn: redis.Redis) -> Iterator[ReplyDropper]:
    for transition in ALL_TRANSITIONS:  # loaded: the call watched is the one that runs
        conn.script_load(script_for(transition).source)
    dropper = ReplyDropper(valkey.port)
    yield dropper
    dropper.close()


class NewLeases:
    """Picks a reply that hands out a lease (id, fence) no earlier reply did, and remembers the
    leases whose reply it picked."""

    def __init__(self) -> None:
        self.seen: set[tuple[bytes, bytes]] = set()
        self.lost: set[bytes] = set()

    def __call__(self, reply: bytes) -> bool:
        leases = set(LEASE.findall(reply))
        new = leases - self.seen
        self.seen |= leases
        self.lost |= {job_id for job_id, _fence in new}
        return bool(new)


def claims(wire: int, lanes: bool) -> Callable[[bytes], bool]:
    """Picks a request that claims: a settle, or (lanes) a lane claim."""
    names = [script_for(SETTLE).sha.encode() if wire == 5 else b"EMQ.SETTLE"]
    if lanes:
        names.append(script_for(LANE_CLAIM).sha.encode())
    return lambda chunk: any(name in chunk for name in names)


def admit(conn: redis.Redis, wire: int, lanes: bool) -> None:
    queue = Queue(conn, "work", wire=wire)
    for n in range(JOBS):
        queue.enqueue(f"JOB:{n}", b"x", lane=f"g{n % 2}" if lanes else None)


def await_outcomes(conn: redis.Redis, acked: set[str], deadline_s: float = 90.0) -> None:
    """Until every job is acked, or dead (the old behaviour), or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while len(acked) + conn.zcard("emq:{work}:dead") < JOBS and time.monotonic() < deadline:
        time.sleep(0.05)


def assert_every_job_ran_once_at_its_first_attempt(conn: redis.Redis, attempts: dict[str, int],
                                                   acked: set[str], lost: NewLeases) -> None:
    assert conn.zrange("emq:{work}:dead", 0, -1) == []
    assert acked == {f"JOB:{n}" for n in range(JOBS)}
    assert attempts == {f"JOB:{n}": 1 for n in range(JOBS)}
    # every job's first lease reached the consumer only after its reply had been lost
    assert lost.lost == {f"JOB:{n}".encode() for n in range(JOBS)}


@pytest.mark.parametrize(("wire", "lanes"), CASES, ids=IDS)
def test_lost_claim_replies_charge_no_attempt(proxy: ReplyDropper, conn: redis.Redis, wire: int,
                                              lanes: bool) -> None:
    admit(conn, wire, lanes)
    attempts: dict[str, int] = {}
    acked: set[str] = set()
    lock = threading.Lock()

    def handler(job: Job) -> None:
        with lock:
            attempts[job.id] = max(attempts.get(job.id, 0), job.attempt)

    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=10)
    consumer = Consumer(Queue(client, "work", wire=wire), handler, lanes=lanes,
                        lease_ms=LEASE_MS, max_attempts=MAX_ATTEMPTS, housekeeping_ms=200,
                        on_ack=lambda job: acked.add(job.id))
    lost = NewLeases()
    proxy.drop(claims(wire, lanes), 10 * JOBS, reply=lost)
    runner = threading.Thread(target=consumer.run)
    runner.start()
    try:
        await_outcomes(conn, acked)
    finally:
        consumer.stop()
        runner.join(30)
        client.close()
    assert_every_job_ran_once_at_its_first_attempt(conn, attempts, acked, lost)


@pytest.mark.parametrize("wire", [5, 6], ids=["wire5", "wire6"])
def test_lost_claim_replies_charge_no_attempt_asyncio(proxy: ReplyDropper, conn: redis.Redis,
                                                      wire: int) -> None:
    admit(conn, wire, False)
    attempts: dict[str, int] = {}
    acked: set[str] = set()
    lost = NewLeases()
    proxy.drop(claims(wire, False), 10 * JOBS, reply=lost)

    async def body() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=10)

        async def handler(job: Job) -> None:
            attempts[job.id] = max(attempts.get(job.id, 0), job.attempt)

        consumer = AsyncConsumer(AsyncQueue(client, "work", wire=wire), handler,
                                 lease_ms=LEASE_MS, max_attempts=MAX_ATTEMPTS,
                                 housekeeping_ms=200, on_ack=lambda job: acked.add(job.id))
        task = asyncio.ensure_future(consumer.run())
        try:
            await asyncio.get_running_loop().run_in_executor(None, await_outcomes, conn, acked)
        finally:
            consumer.stop()
            await asyncio.wait_for(task, 30)
            await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(body())
    assert_every_job_ran_once_at_its_first_attempt(conn, attempts, acked, lost)
