"""Queue-wide limits through the client: ``Queue.set_limits`` / ``Queue.limits`` (both
Queues, one program), what a claim and a settle's claims lease under them on both wires, the
wake token a held queue gets when a lease leaves, ``App(limits=...)`` and ``echomq limits``."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio

from echomq import App, ArgumentError, Queue, QueueLimits, Wire
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from tests.command_line import cli
from tests.test_cli import assert_one_error, echomq

NOW = 1_700_000_000_000
WIRES = [Wire.SCRIPTS, Wire.NATIVE]


def test_limits_are_set_read_and_cleared(conn: redis.Redis) -> None:
    queue = Queue(conn, "lim", check_policy=False)
    assert queue.limits() == QueueLimits(None, None, 1000)
    assert queue.set_limits(concurrency=2, rate=10) == QueueLimits(2, 10, 1000)
    assert queue.set_limits(window_ms=500, rate=None) == QueueLimits(2, None, 500)
    assert queue.set_limits() == QueueLimits(2, None, 500)
    with pytest.raises(ArgumentError, match="concurrency must be an integer from 1"):
        queue.set_limits(concurrency=0)
    assert queue.limits() == QueueLimits(2, None, 500)
    conn.hset("emq:{lim}:queueconf", "rate", "x")  # not an integer: no limit, as the server reads
    assert queue.limits().rate is None


def test_the_asyncio_queue_reads_and_sets_the_same_limits(valkey: EmbeddedValkey,
                                                          conn: redis.Redis) -> None:
    Queue(conn, "alim", check_policy=False).set_limits(concurrency=3)

    async def run() -> QueueLimits:
        aconn = redis.asyncio.Redis(port=valkey.port)
        try:
            queue = AsyncQueue(aconn, "alim", check_policy=False)
            assert await queue.limits() == QueueLimits(3, None, 1000)
            return await queue.set_limits(rate=5, window_ms=200)
        finally:
            await aconn.aclose()

    assert asyncio.run(run()) == QueueLimits(3, 5, 200)


@pytest.mark.parametrize("wire", WIRES)
def test_a_claim_at_the_concurrency_limit_leases_nothing_until_a_lease_leaves(
        conn: redis.Redis, wire: int) -> None:
    name = f"conc{wire}"
    queue = Queue(conn, name, wire=wire, check_policy=False)
    queue.set_limits(concurrency=2)
    for n in range(5):
        queue.enqueue(f"JOB:{n}", b"p", now=NOW + n)
    first = queue.claim_many(5, now=NOW + 10)
    assert [job.id for job in first] == ["JOB:0", "JOB:1"]
    assert queue.claim(now=NOW + 11) is None
    assert conn.hget(f"emq:{{{name}}}:queueconf", "held") == b"1"
    conn.delete(f"emq:{{{name}}}:wake")
    queue.ack(first[0])
    assert conn.lrange(f"emq:{{{name}}}:wake", 0, -1) == [b"1"]  # the held consumer is woken
    assert queue.claim(now=NOW + 12).id == "JOB:2"


@pytest.mark.parametrize("wire", WIRES)
def test_a_rate_limit_leases_at_most_rate_a_window(conn: redis.Redis, wire: int) -> None:
    name = f"rate{wire}"
    queue = Queue(conn, name, wire=wire, check_policy=False)
    queue.set_limits(rate=3, window_ms=1000)
    for n in range(5):
        queue.enqueue(f"JOB:{n}", b"p", now=NOW + n)
    assert len(queue.claim_many(5, now=NOW + 10)) == 3
    assert queue.claim(now=NOW + 500) is None
    # the window's opening is where a parked consumer's bound reads it
    assert conn.zscore(f"emq:{{{name}}}:throttled", "*") == NOW + 10 + 1000
    assert len(queue.claim_many(5, now=NOW + 1010)) == 2
    assert conn.zscore(f"emq:{{{name}}}:throttled", "*") is None


def test_an_app_sets_its_queues_limits(conn: redis.Redis) -> None:
    app = App(conn, "applim", limits=QueueLimits(concurrency=4), check_policy=False)
    assert app.queue.limits() == QueueLimits(4, None, 1000)
    assert app.set_limits(rate=9) == QueueLimits(4, 9, 1000)
    assert app.set_limits(queue="other", concurrency=1) == QueueLimits(1, None, 1000)


def test_the_limits_command_shows_and_sets(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    assert cli(valkey, "limits", "clim") == "clim: no limits\n"
    assert cli(valkey, "limits", "clim", "--concurrency", "4", "--rate", "10",
               "--window-ms", "500") == (
        "clim: at most 4 leased at once, at most 10 claims a 500 ms window\n")
    assert cli(valkey, "limits", "clim", "--rate", "none", "--json") == (
        '{"concurrency": 4, "rate": null, "window_ms": 500}\n')
    assert Queue(conn, "clim", check_policy=False).limits() == QueueLimits(4, None, 500)


def test_a_bad_limit_is_one_line_and_exit_2(valkey: EmbeddedValkey) -> None:
    assert_one_error(echomq("limits", "clim", "--concurrency", "0", url=valkey.url), 2,
                     "not a limit", "echomq limits -h")


@pytest.mark.parametrize("wire", WIRES)
def test_raising_the_limit_of_a_held_queue_wakes_its_parked_consumers(conn: redis.Redis,
                                                                      wire: int) -> None:
    name = f"raise{wire}"
    queue = Queue(conn, name, wire=wire, check_policy=False)
    queue.set_limits(concurrency=1)
    for n in range(3):
        queue.enqueue(f"JOB:{n}", b"p", now=NOW + n)
    assert queue.claim(now=NOW + 10) is not None
    assert queue.claim(now=NOW + 11) is None  # held
    conn.delete(f"emq:{{{name}}}:wake")
    queue.set_limits(concurrency=3)
    assert conn.llen(f"emq:{{{name}}}:wake") == 3
    assert len(queue.claim_many(5, now=NOW + 12)) == 2
    assert conn.hget(f"emq:{{{name}}}:queueconf", "held") is None
    queue.set_limits(rate=5)  # not held: nothing to wake
    assert conn.llen(f"emq:{{{name}}}:wake") == 3
