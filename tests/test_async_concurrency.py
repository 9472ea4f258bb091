"""``echomq.aio.Consumer(..., concurrency=N)`` against a real server: N handlers in flight and
never more, measured by events (no sleeps); every lease in flight kept by the heartbeat; each
attempt's own time limit; a stop that lets the handlers in flight finish and hands the rest
back; outcomes that finish together settled in one round; a job claimed before runs alone."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from echomq import Job, aio
from echomq.embedded import EmbeddedValkey

NOW = 1_700_000_000_000


def run(valkey: EmbeddedValkey, wire: int,
        body: Callable[[aio.Queue, redis.Redis], Awaitable[None]]) -> None:
    async def main() -> None:
        client = aredis.Redis(host="127.0.0.1", port=valkey.port)
        sync = valkey.client()
        await client.flushall()
        try:
            await body(aio.Queue(client, "work", wire=wire), sync)
        finally:
            await client.flushall()
            await client.aclose()
            sync.close()

    asyncio.run(main())


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """A bounded wait for ``condition``, checked as the loop turns."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.002)


class Gate:
    """Handlers that hold until released, counting how many are in flight at once."""

    def __init__(self, full_at: int) -> None:
        self.full_at = full_at
        self.in_flight = 0
        self.peak = 0
        self.done: list[str] = []
        self.full = asyncio.Event()
        self.release = asyncio.Event()

    async def handler(self, job: Job) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.full_at:
            self.full.set()
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
            self.done.append(job.id)


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


async def enqueue(queue: aio.Queue, count: int, prefix: str = "JOB:") -> None:
    for n in range(count):
        await queue.enqueue(f"{prefix}{n:02}", b"x")


async def all_in_flight(queue: aio.Queue, jobs: int, concurrency: int,
                        **options: Any) -> tuple[Gate, aio.Consumer, asyncio.Task[None]]:
    """``jobs`` enqueued and a consumer of ``concurrency`` running, once that many of its
    handlers are in flight (held until the gate is released)."""
    await enqueue(queue, jobs)
    gate = Gate(full_at=concurrency)
    consumer = aio.Consumer(queue, gate.handler, concurrency=concurrency, **options)
    task = asyncio.ensure_future(consumer.run())
    await asyncio.wait_for(gate.full.wait(), 5)
    return gate, consumer, task


async def stopped(consumer: aio.Consumer, task: asyncio.Task[None]) -> None:
    consumer.stop()
    await asyncio.wait_for(task, 5)


def test_n_handlers_run_at_once_and_never_more(valkey: EmbeddedValkey, wire: int) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        gate, consumer, task = await all_in_flight(queue, 12, 4, prefetch=2)
        assert consumer.in_flight == 4 and gate.peak == 4
        gate.release.set()
        await until(lambda: len(gate.done) == 12)
        await stopped(consumer, task)
        assert gate.peak == 4
        counts = await queue.counts()
        assert counts["pending"] == counts["active"] == counts["delayed"] == 0

    run(valkey, wire, body)


def test_one_at_a_time_stays_the_default(valkey: EmbeddedValkey) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        await enqueue(queue, 5)
        gate = Gate(full_at=2)
        gate.release.set()
        await aio.Consumer(queue, gate.handler).beat(park=False)
        assert gate.peak == 1 and len(gate.done) == 5

    run(valkey, 5, body)


def test_the_heartbeat_keeps_every_lease_in_flight(valkey: EmbeddedValkey, wire: int) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        gate, consumer, task = await all_in_flight(queue, 3, 3, lease_ms=1_000)
        first = dict(conn.zrange(queue.key("active"), 0, -1, withscores=True))
        # Held for several lease lengths: every deadline moves on, twice.
        for _ in range(2):
            seen = dict(conn.zrange(queue.key("active"), 0, -1, withscores=True))
            await until(lambda seen=seen: all(  # type: ignore[misc]
                score > seen[job] for job, score in
                conn.zrange(queue.key("active"), 0, -1, withscores=True)))
        assert len(first) == 3
        gate.release.set()
        await until(lambda: len(gate.done) == 3)
        await stopped(consumer, task)
        counts = await queue.counts()
        assert counts["active"] == counts["delayed"] == counts["pending"] == 0
        for n in range(3):
            assert conn.hget(queue.key("job", f"JOB:{n:02}"), "a") == b"1"

    run(valkey, wire, body)


def test_each_attempt_in_flight_has_its_own_time_limit(valkey: EmbeddedValkey,
                                                       wire: int) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        await queue.enqueue("JOB:0stuck", b"stuck")
        await enqueue(queue, 6, "JOB:quick")
        quick: list[str] = []
        stuck_started = asyncio.Event()

        async def handler(job: Job) -> None:
            if job.payload == b"stuck":
                stuck_started.set()
                await asyncio.Event().wait()  # never returns: only its time limit ends it
            await stuck_started.wait()  # the quick ones run while it is stuck
            quick.append(job.id)

        consumer = aio.Consumer(queue, handler, concurrency=3, time_limit_ms=300,
                                retry_delay_ms=60_000)
        task = asyncio.ensure_future(consumer.run())
        await until(lambda: len(quick) == 6)
        assert consumer.in_flight >= 1  # the stuck one was still in flight meanwhile
        await until(lambda: conn.zscore(queue.key("delayed"), "JOB:0stuck") is not None)
        await stopped(consumer, task)
        error = conn.hget(queue.key("job", "JOB:0stuck"), "error") or b""
        assert b"TimeLimitExceeded" in error
        counts = await queue.counts()
        assert counts["delayed"] == 1 and counts["active"] == counts["pending"] == 0

    run(valkey, wire, body)


def test_a_stop_lets_the_handlers_in_flight_finish_and_hands_back_the_rest(
        valkey: EmbeddedValkey, wire: int) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        gate, consumer, task = await all_in_flight(queue, 10, 2, prefetch=8)
        consumer.stop()
        await asyncio.sleep(0)  # the stop is seen while both still run
        assert not task.done()
        gate.release.set()
        await asyncio.wait_for(task, 5)
        assert sorted(gate.done) == ["JOB:00", "JOB:01"]
        counts = await queue.counts()
        assert counts["pending"] == 8 and counts["active"] == 0
        for n in range(2, 10):  # handed back: the claim's attempt uncounted
            assert conn.hget(queue.key("job", f"JOB:{n:02}"), "a") in (None, b"0")

    run(valkey, wire, body)


def test_outcomes_that_finish_together_go_out_in_one_round(valkey: EmbeddedValkey,
                                                           wire: int) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        rounds: list[int] = []
        send = queue.settle_leased

        async def counted(outcomes: Any, *args: Any, **options: Any) -> Any:
            outcomes = list(outcomes)
            if outcomes:
                rounds.append(len(outcomes))
            return await send(outcomes, *args, **options)

        queue.settle_leased = counted  # type: ignore[method-assign]
        gate, consumer, task = await all_in_flight(queue, 4, 4, prefetch=4)
        gate.release.set()
        await until(lambda: sum(rounds) == 4)
        await stopped(consumer, task)
        assert rounds == [4]

    run(valkey, wire, body)


def test_a_job_claimed_before_runs_alone(valkey: EmbeddedValkey, wire: int) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        await queue.enqueue("JOB:suspect", b"x", now=NOW)
        lost = await queue.claim(10, now=NOW)  # its worker died: the lease runs out
        assert lost is not None
        for n in range(6):
            await queue.enqueue(f"JOB:n{n}", b"x", now=NOW + 2_000)
        running: list[int] = []
        alongside: dict[str, int] = {}

        async def handler(job: Job) -> None:
            running.append(1)
            alongside[job.id] = len(running)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            running.pop()

        consumer = aio.Consumer(queue, handler, concurrency=4, clock=lambda: NOW + 5_000)
        await consumer.beat(park=False)
        assert alongside["JOB:suspect"] == 1
        assert len(alongside) == 7 and max(alongside.values()) > 1

    run(valkey, wire, body)


def test_concurrency_must_be_positive(valkey: EmbeddedValkey) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError):
                aio.Consumer(queue, lambda job: None, concurrency=bad)  # type: ignore[arg-type]

    run(valkey, 5, body)


def test_the_registry_shows_a_job_in_hand_while_any_runs(conn: redis.Redis) -> None:
    from echomq.consumer.presence import Announcer

    announcer = Announcer(conn, "work", 5)
    first, second = Job("JOB:a", b"", 1), Job("JOB:b", b"", 1)
    announcer.began(first)
    announcer.began(second)
    announcer.ended(first, failed=False)
    assert announcer.fields(NOW)["job"] == "JOB:b"
    announcer.ended(second, failed=True)
    fields = announcer.fields(NOW)
    assert (fields["job"], fields["done"], fields["failed"]) == ("", 1, 1)


def test_two_queues_start_in_priority_order_with_jobs_in_flight(valkey: EmbeddedValkey,
                                                                wire: int) -> None:
    async def body(queue: aio.Queue, conn: redis.Redis) -> None:
        low = aio.Queue(queue.conn, "low", wire=wire)
        for n in range(8):
            await low.enqueue(f"JOB:l{n}", b"low")
            await queue.enqueue(f"JOB:h{n}", b"high")
        started: list[bytes] = []

        async def handler(job: Job) -> None:
            started.append(job.payload)
            await asyncio.sleep(0)

        await aio.Consumer([queue, low], handler, concurrency=3).beat(park=False)
        assert started == [b"high"] * 8 + [b"low"] * 8

    run(valkey, wire, body)
