"""Making an App, its tasks and its queues (blocking, asyncio, sharded) sends nothing: a tasks
module imports with its server down. The server's policy is asked at the first command sent
through a client, once per client, with the same warning or refusal as before."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from echomq import App, EvictionPolicyWarning, Queue, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import free_port
from echomq.engine.clients import async_twin
from echomq.queue.shard_layout import ShardError
from tests.test_sharded_queue import snapshot

# What making them costs here is well under a millisecond each (about 60 ms for the first App
# of a process, which loads what it needs); a single attempt to reach the server down, with
# redis-py's default retries, takes seconds (7.5 to 9.6 s measured). 0.2 s tells them apart by
# a factor of 3 above the slowest making and 35 below the quickest failed connection.
MADE_WITHIN_S = 0.2


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each connection a client opens (blocking or asyncio), by its class's name."""
    opened: list[str] = []
    blocking_connect = redis.connection.AbstractConnection.connect
    async_connect = redis.asyncio.connection.AbstractConnection.connect

    def connect(self: Any) -> None:
        opened.append(type(self).__name__)
        blocking_connect(self)

    async def aconnect(self: Any) -> None:
        opened.append(type(self).__name__)
        await async_connect(self)

    monkeypatch.setattr(redis.connection.AbstractConnection, "connect", connect)
    monkeypatch.setattr(redis.asyncio.connection.AbstractConnection, "connect", aconnect)
    yield opened


def test_an_app_its_tasks_and_queues_are_made_with_the_server_down(
        connections: list[str]) -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    app = App(redis.Redis(port=port), queue="default")

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(queue="other")
    async def later(x: int) -> int:
        return x

    sharded = App(redis.Redis(port=port), queue="work", shards=4)
    queues = [Queue(redis.Redis(port=port), "plain"),
              Queue(redis.Redis(port=port), "spread", shards=3),
              AsyncQueue(redis.asyncio.Redis(port=port), "plain"),
              AsyncQueue(redis.asyncio.Redis(port=port), "spread", shards=3)]
    made_s = time.monotonic() - started
    assert made_s < MADE_WITHIN_S, made_s
    assert connections == []
    assert sorted(app.queues) == ["default", "other"] and sharded.queue.shards == 4
    assert [queue.shards for queue in queues] == [1, 3, 1, 3]
    with pytest.raises(redis.ConnectionError):  # the first command meets the server's absence
        add.enqueue(1, 2)
    assert connections != []


def test_the_first_enqueue_warns_once_per_client(conn: redis.Redis) -> None:
    conn.config_set("maxmemory-policy", "allkeys-lru")
    try:
        before = policy_asked(conn)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            app = App(conn, queue="mail")

            @app.task
            def send(to: str) -> None:
                return None

            @app.task(queue="bulk")
            def blast(to: str) -> None:
                return None

        assert policy_asked(conn) == before and conn.dbsize() == 0
        with pytest.warns(EvictionPolicyWarning, match="allkeys-lru") as seen:
            send.enqueue("a@example.com")
        assert len(seen) == 1
        sent = commands_sent(conn)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for n in range(5):  # no check on these calls: one transition each
                send.enqueue(f"{n}@example.com")
            assert commands_sent(conn) - sent == {"emq.enqueue": 5}  # the server has trafikey
            blast.enqueue("all@example.com")  # another queue, the same client: not asked
        assert policy_asked(conn) == before + 1
    finally:
        conn.config_set("maxmemory-policy", "noeviction")


def test_the_asyncio_queues_of_one_client_ask_once(conn: redis.Redis) -> None:
    conn.config_set("maxmemory-policy", "volatile-lru")

    async def scenario() -> int:
        client = async_twin(conn)
        try:
            first, second = AsyncQueue(client, "a"), AsyncQueue(client, "b")
            with pytest.warns(EvictionPolicyWarning, match="volatile-lru") as seen:
                await first.enqueue("JOB:1", b"x")
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                await second.enqueue("JOB:2", b"x")
                await first.enqueue("JOB:3", b"x")
            return len(seen)
        finally:
            await client.aclose()

    try:
        before = policy_asked(conn)
        assert asyncio.run(scenario()) == 1
        assert policy_asked(conn) == before + 1
    finally:
        conn.config_set("maxmemory-policy", "noeviction")


def test_an_apps_queue_recorded_sharded_is_refused_at_its_first_enqueue(
        conn: redis.Redis) -> None:
    """The App made, nothing asked; its first enqueue refused, and its next, nothing written."""
    assert Queue(conn, "orders", shards=4).enqueue("JOB:1", b"x") is Verdict.ENQUEUED
    before = snapshot(conn)
    app = App(conn, queue="orders")

    @app.task
    def order(n: int) -> int:
        return n

    for _ in range(2):
        with pytest.raises(ShardError, match=r"recorded with 4 shards.*asked for a plain queue"):
            order.enqueue(1)
    assert snapshot(conn) == before


def policy_asked(conn: redis.Redis) -> int:
    """How many times the server was asked its eviction policy (``CONFIG GET``)."""
    return int(conn.info("commandstats").get("cmdstat_config|get", {}).get("calls", 0))


class Counts(dict[str, int]):
    def __sub__(self, other: dict[str, int]) -> dict[str, int]:
        return {name: n - other.get(name, 0) for name, n in self.items()
                if n != other.get(name, 0)}


def commands_sent(conn: redis.Redis) -> Counts:
    """The calls of each command the server ran (INFO itself left out)."""
    return Counts({name.removeprefix("cmdstat_"): int(stat["calls"])
                   for name, stat in conn.info("commandstats").items()
                   if name != "cmdstat_info"})
