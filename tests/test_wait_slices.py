"""``Queue.wait`` (sync and asyncio) on a client whose socket timeout is shorter than the wait:
it blocks in slices under that timeout, so the wait lasts as asked and never trips the socket."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

import pytest
import redis
import redis.asyncio as aredis

from echomq import Job, JobOutcome, Queue
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.queue.waiting import next_block_s, wait_slice_s

# The client's socket timeout: a slice is half of it (park_cap_for's margin), so a blocking
# call's reply may come up to 0.5 s late before the socket trips. A loaded 2-core machine delays a
# reply by a scheduler's wake-up or a 100 ms CPU-quota period; 0.15 s (a 0.3 s timeout) was
# missed at load average 14. A wait of two timeouts still takes four slices.
SOCKET_TIMEOUT_S = 1.0
WAIT_S = 2 * SOCKET_TIMEOUT_S


def blmoves(conn: redis.Redis) -> int:
    return int(conn.info("commandstats").get("cmdstat_blmove", {}).get("calls", 0))


def leased(conn: redis.Redis, wire: int) -> tuple[Queue, Job]:
    queue = Queue(conn, "emails", wire=wire)
    queue.enqueue("JOB:1", b"p")
    job = queue.claim()
    assert job is not None
    return queue, job


def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_slice_stays_under_the_socket_timeout(valkey: EmbeddedValkey) -> None:
    client = valkey.client(socket_timeout=SOCKET_TIMEOUT_S)
    assert 0 < wait_slice_s(client) < SOCKET_TIMEOUT_S
    assert wait_slice_s(valkey.client(socket_timeout=None)) == 60.0
    assert next_block_s(math.inf, 2.5) == 2.5
    assert next_block_s(0.0, 2.5) is None  # a deadline passed long ago
    client.close()


@pytest.mark.parametrize("wire", [5, 6])
def test_a_wait_longer_than_the_socket_timeout_returns_the_outcome(
        valkey: EmbeddedValkey, conn: redis.Redis, wire: int) -> None:
    client = valkey.client(socket_timeout=SOCKET_TIMEOUT_S)
    queue, job = leased(conn, wire)
    before = blmoves(conn)
    outcome = Queue(client, "emails", wire=wire).wait("JOB:1", WAIT_S)
    assert outcome == JobOutcome("active", None, None, 1)
    assert blmoves(conn) - before >= 4  # one blocking call per slice, none longer than one
    waited: list[JobOutcome] = []
    waiter = threading.Thread(target=lambda: waited.append(
        Queue(client, "emails", wire=wire).wait("JOB:1", math.inf)))
    started = blmoves(conn)
    waiter.start()
    until(lambda: blmoves(conn) - started >= 2)  # its first slice has run out
    queue.ack(job, result=b"42")
    waiter.join(30)
    assert waited == [JobOutcome("done", b"42", None, 1)]
    client.close()


@pytest.mark.parametrize("wire", [5, 6])
def test_the_async_wait_slices_the_same_way(valkey: EmbeddedValkey, conn: redis.Redis,
                                            wire: int) -> None:
    leased(conn, wire)
    before = blmoves(conn)

    async def main() -> JobOutcome:
        client = aredis.Redis(port=valkey.port, socket_timeout=SOCKET_TIMEOUT_S)
        try:
            return await AsyncQueue(client, "emails", wire=wire).wait("JOB:1", WAIT_S)
        finally:
            await client.aclose()

    assert asyncio.run(main()) == JobOutcome("active", None, None, 1)
    assert blmoves(conn) - before >= 4
