"""The asyncio client: the conformance cases through its executors, chosen by what can differ
there, large replies, and the Queue's flows."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis

from echomq import EchoMQError, Job, KindError, StaleLease, Verdict, Wire6Unsupported
from echomq.aio import Queue, async_executor_for
from echomq.conformance.cases import Case
from echomq.engine.calls import Call
from echomq.engine.clients import async_twin, twins
from echomq.engine.executors import executor_for
from echomq.engine.transitions import CLAIM, ENQUEUE, keys_for
from tests.conformance.table import TABLE

NOW = 1_700_000_000_000
T = TypeVar("T")
# Cases of up to a thousand arguments: the table's batch of 10,000 jobs adds no reply shape, and a
# reply read in many pieces is test_large_replies_are_read_whole's.
WELL_FORMED = [case for case in TABLE
               if case.argv[0] == len(case.transition.keys)
               and len(case.transition.keys) < len(case.argv) <= 1_000]


def reply_kind(case: Case) -> bytes:
    """What the executor makes of a case's reply: the error's code for a refusal (each maps to
    its exception), else the whole reply the table expects (its shape and its words)."""
    return case.expect.split(b" ", 1)[0] if case.expect.startswith(b"-") else case.expect


# The asyncio executor shares every line of its programs with the blocking one (the sequence of
# steps, the commands, the error mapping: echomq.engine.execution); what it has of its own is
# how a step is performed on an asyncio client: the reply read and parsed by that client (each
# shape: statuses, integers, nulls, nested arrays, and a large reply read in many pieces), a
# server error raised as that client raises it, and the NOSCRIPT path (the script loaded on
# that client, the call sent again). So the table runs here by what can differ: for each
# transition, its first case of each reply the table expects of it and of each error code it is
# refused with; on wire 5, every second one of them meets a server without its script.
CHOSEN = list({(case.transition.name, reply_kind(case)): case
               for case in reversed(WELL_FORMED)}.values())[::-1]


@pytest.fixture
def conn(library_conn: Any) -> Any:
    """Every test here runs on redis-py's asyncio client and on valkey-py's."""
    return library_conn


def run(conn: Any, body: Callable[[Any], Awaitable[T]]) -> T:
    """``body`` on an asyncio client of ``conn``'s library to ``conn``'s server, flushed."""
    async def main() -> T:
        client = async_twin(conn)
        try:
            await client.flushall()
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "reply", call()
    except twins(redis.RedisError) as exc:
        return type(exc).__name__, str(exc)
    except (ValueError, EchoMQError) as exc:
        return type(exc).__name__, str(exc)


def keyspace(conn: Any) -> dict[bytes, Any]:
    """Each key's type and value (``DUMP``); a stream's entries without their ids, which are
    the server's clock (cancel's notices)."""
    return {key: (kind, [fields for _id, fields in conn.xrange(key)] if kind == b"stream"
                  else conn.dump(key))
            for key in sorted(conn.keys()) if (kind := conn.type(key)) is not None}


def test_the_chosen_cases_cover_every_transition_reply_and_error() -> None:
    assert {(case.transition.name, reply_kind(case)) for case in CHOSEN} == {
        (case.transition.name, reply_kind(case)) for case in WELL_FORMED}
    assert len(CHOSEN) == len({case.id for case in CHOSEN})


@pytest.mark.parametrize("wire", [5, 6])
@pytest.mark.parametrize("case", CHOSEN, ids=[case.id for case in CHOSEN])
def test_conformance_case_through_both_clients(conn: Any, case: Case, wire: int) -> None:
    """The async executor replies and writes exactly as the blocking one does (on wire 5, every
    second case after SCRIPT FLUSH: the script loaded again and the call sent again)."""
    sync_conn = conn
    n = len(case.transition.keys)
    keys = [k.decode() if isinstance(k, bytes) else str(k) for k in case.argv[1:n + 1]]
    args = [a if isinstance(a, bytes) else str(a) for a in case.argv[n + 1:]]

    def prepared() -> None:
        sync_conn.flushall()
        for command in case.setup:
            sync_conn.execute_command(*command)

    prepared()
    sync = outcome(lambda: executor_for(wire).call(sync_conn, case.transition, keys, args))
    sync_state = keyspace(sync_conn)
    prepared()
    if wire == 5 and CHOSEN.index(case) % 2:
        sync_conn.script_flush()

    async def async_outcome() -> tuple[str, Any]:
        client = async_twin(sync_conn)
        try:
            executor = async_executor_for(wire)
            return "reply", await executor.call(client, case.transition, keys, args)
        except (*twins(redis.RedisError, ValueError), EchoMQError) as exc:
            return type(exc).__name__, str(exc)
        finally:
            await client.aclose()

    assert asyncio.run(async_outcome()) == sync
    assert keyspace(sync_conn) == sync_state


@pytest.mark.parametrize("wire", [5, 6])
def test_large_replies_are_read_whole(conn: Any, wire: int) -> None:
    """A reply read in many pieces: a claim of a 3 MiB payload, and 2,000 calls in one flush,
    read by the asyncio client as the blocking one reads them."""
    payload = bytes(range(256)) * (3 * 4096)
    base = "emq:{big}:"
    calls: list[Call] = [(ENQUEUE, keys_for(base, ENQUEUE, f"JOB:{n}"),
                          [f"JOB:{n}", payload if n == 0 else b"p", NOW]) for n in range(2_000)]
    claim: Call = (CLAIM, keys_for(base, CLAIM), [30_000, NOW])

    async def through_async(client: Any) -> tuple[list[Any], Any]:
        executor = async_executor_for(wire)
        return (await executor.call_many(client, calls), await executor.call(client, *claim))

    replies, claimed = run(conn, through_async)
    conn.flushall()
    sync = executor_for(wire)
    assert replies == sync.call_many(conn, calls)
    assert claimed == sync.call(conn, *claim)
    assert claimed[0] == b"JOB:0" and claimed[1] == payload


@pytest.mark.parametrize("wire", [5, 6])
def test_async_lifecycle(conn: Any, wire: int) -> None:
    async def body(client: Any) -> None:
        queue = Queue(client, "emails", wire=wire)
        assert await queue.check_policy() is None
        assert await queue.enqueue("JOB:1", b"a", now=NOW) is Verdict.ENQUEUED
        assert await queue.enqueue_many([("JOB:1", b"x"), ("JOB:2", b"b")], now=NOW + 1) == [
            Verdict.DUPLICATE, Verdict.ENQUEUED]
        with pytest.raises(KindError):
            await queue.enqueue("nope", b"")
        job = await queue.claim(lease_ms=10, now=NOW + 2)
        assert job == Job("JOB:1", b"a", 1, fence=1)
        assert await queue.next_due() == NOW + 12
        assert await queue.recover(now=NOW + 12) == 1
        again = await queue.claim(now=NOW + 13)
        assert again == Job("JOB:1", b"a", 2, fence=2)
        with pytest.raises(StaleLease):
            await queue.ack(job)
        assert await queue.extend(again, lease_ms=5, now=NOW + 14) is Verdict.EXTENDED
        assert await queue.retry(again, delay_ms=3, error="x", now=NOW + 15) is Verdict.RETRYING
        assert await queue.promote(now=NOW + 18) == 1
        second = await queue.claim(now=NOW + 19)
        assert second is not None and second.id == "JOB:2"
        assert await queue.ack(second, retention_ms=0) is Verdict.ACKED
        assert await queue.counts() == {"pending": 1, "active": 0, "delayed": 0, "dead": 0,
                                        "lanes": 0}
        await client.script_flush()
        assert await queue.enqueue_many([("JOB:3", b"c")], now=NOW) == [Verdict.ENQUEUED]

    run(conn, body)


def test_async_lanes_and_the_wire6_refusal(conn: Any) -> None:
    async def body(client: Any) -> None:
        lanes = Queue(client, "tenants", wire=5)
        await lanes.enqueue_many([("JOB:a1", b"", "a"), ("JOB:a2", b"", "a"),
                                  ("JOB:b1", b"", "b")], now=NOW)
        assert await lanes.lane_depths() == {"a": 2, "b": 1}
        served = [await lanes.claim_lane(now=NOW) for _ in range(3)]
        assert [job.lane for job in served if job] == ["a", "b", "a"]
        native = Queue(client, "tenants", wire=6)
        with pytest.raises(Wire6Unsupported):
            await native.claim_lane()
        with pytest.raises(Wire6Unsupported):
            await native.enqueue_many([("JOB:c", b"", "c")])

    run(conn, body)


async def wait_until_parked(client: Any, timeout: float = 10.0) -> None:
    """Until some client of the server is blocked in BLPOP (bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        clients = await client.client_list()
        if any(c.get("cmd") == "blpop" for c in clients):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("no consumer parked")


@pytest.mark.parametrize("wire", [5, 6])
def test_async_consumer_wakes_runs_retries_and_stops(conn: Any, wire: int) -> None:
    from echomq.aio import Consumer

    async def body(client: Any) -> None:
        queue = Queue(client, "work", wire=wire)
        seen: list[tuple[str, int]] = []
        done = asyncio.Event()

        async def handler(job: Job) -> None:
            seen.append((job.id, job.attempt))
            if job.id == "JOB:bad":
                raise ValueError("always fails")
            if job.id == "JOB:last":
                done.set()

        consumer = Consumer(queue, handler, retry_delay_ms=0, max_attempts=2,
                            park_cap_ms=30_000)
        running = asyncio.create_task(consumer.run())
        await wait_until_parked(client)
        await queue.enqueue_many([("JOB:ok", b""), ("JOB:bad", b"")])
        await queue.enqueue("JOB:last", b"")
        await asyncio.wait_for(done.wait(), timeout=10)
        while (await queue.counts())["dead"] == 0:
            await asyncio.sleep(0.02)  # the failing job's second attempt runs after a promote
        consumer.stop()
        await asyncio.wait_for(running, timeout=5)
        assert sorted(seen) == [("JOB:bad", 1), ("JOB:bad", 2), ("JOB:last", 1), ("JOB:ok", 1)]
        error = await client.hget(queue.key("job", "JOB:bad"), "error")
        assert error.split(b"\n", 1)[0] == b"ValueError: always fails"  # then the last frames

    run(conn, body)


def test_async_consumer_heartbeat_keeps_a_long_lease(conn: Any) -> None:
    from echomq.aio import Consumer

    async def body(client: Any) -> None:
        queue = Queue(client, "long", wire=6)
        attempts: list[int] = []

        def slow_handler(job: Job) -> None:  # a plain function: run in a thread
            attempts.append(job.attempt)
            import time

            time.sleep(2.5)  # past two leases: only heartbeats keep it

        await queue.enqueue("JOB:1", b"")
        # A lease of a second leaves a heartbeat (every lease/3) two thirds of it to land on a
        # busy 2-core machine; a shorter one loses the lease to a late thread switch.
        consumer = Consumer(queue, slow_handler, lease_ms=1000, retention_ms=0)
        stolen = 0

        async def thief() -> None:
            nonlocal stolen
            while True:
                stolen += await queue.recover()
                await asyncio.sleep(0.05)

        stealing = asyncio.create_task(thief())
        try:  # without a heartbeat the job would be recovered and re-run for ever
            assert await asyncio.wait_for(consumer.beat(park=False), timeout=15) == 1
        finally:
            consumer.stop()
            stealing.cancel()
        assert stolen == 0 and attempts == [1]
        assert await client.exists(queue.key("job", "JOB:1")) == 0  # acked, row deleted

    run(conn, body)


def test_async_lane_consumer_is_refused_on_wire6(conn: Any) -> None:
    from echomq.aio import Consumer

    async def body(client: Any) -> None:
        with pytest.raises(Wire6Unsupported):
            Consumer(Queue(client, "x", wire=6), lambda job: None, lanes=True)

    run(conn, body)


def test_async_pipelines_send_evalsha_as_a_plain_command() -> None:
    """A cluster pipeline refuses ``.evalsha()`` (not EVALSHA itself): the asyncio executor
    queues EVALSHA through ``execute_command``, as the blocking one does."""
    from echomq.engine.transitions import CLAIM

    class Pipe:
        def __init__(self) -> None:
            self.sent: list[tuple[Any, ...]] = []

        def execute_command(self, *args: Any) -> None:
            self.sent.append(args)

        async def execute(self, raise_on_error: bool) -> list[Any]:
            return [None for _ in self.sent]

        async def __aenter__(self) -> Pipe:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

    class ClusterLike:  # no connection pool of its own: sent to through its pipeline
        def __init__(self) -> None:
            self.pipe = Pipe()

        def pipeline(self, transaction: bool) -> Pipe:
            return self.pipe

    client = ClusterLike()
    call = (CLAIM, ["emq:{q}:pending", "emq:{q}:active"], ["1", "2"])
    assert asyncio.run(async_executor_for(5).call_many(client, [call])) == [None]
    assert [args[0] for args in client.pipe.sent] == ["EVALSHA"]
