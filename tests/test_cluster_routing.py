"""A cluster client routes every ``EMQ.*`` call by its queue's slot without asking the server
``COMMAND GETKEYS`` (the module's keynum key spec makes ``COMMAND INFO`` flag them
``movablekeys``): not for a call sent to the node its slot map names, nor for one that node
redirects. redis-py's and valkey-py's cluster clients, blocking and asyncio, on wire=6: enqueues,
an enqueue_many, claims and settles; then the same after the queue's slot has moved (the client's
slot map is stale: MOVED), and while it moves (ASK). Every call still lands on the node that
serves the slot, and succeeds. See docs/CLUSTER.md."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio.cluster
import redis.cluster
import valkey.asyncio.cluster
import valkey.cluster

from echomq import Ack, Job, Queue, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from tests.cluster import close_move, open_move, three_primaries
from tests.reliability.servers import owner

CLIENTS = {("redis", False): redis.cluster.RedisCluster,
           ("redis", True): redis.asyncio.cluster.RedisCluster,
           ("valkey", False): valkey.cluster.ValkeyCluster,
           ("valkey", True): valkey.asyncio.cluster.ValkeyCluster}
JOBS = 10


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[EmbeddedValkey]]:
    with three_primaries() as made:
        yield made


def getkeys_calls(nodes: list[EmbeddedValkey]) -> int:
    """``COMMAND GETKEYS`` calls served so far, summed over every node."""
    total = 0
    for server in nodes:
        client = server.client()
        try:
            stats = client.info("commandstats").get("cmdstat_command|getkeys", {})
        finally:
            client.close()
        total += int(stats.get("calls", 0))
    return total


async def reply(value: Any) -> Any:
    """A Queue method's reply: a blocking Queue's as is, an asyncio Queue's awaited."""
    return await value if inspect.isawaitable(value) else value


class Scenario:
    """One queue of ``name`` through a cluster ``client`` (blocking or asyncio)."""

    def __init__(self, nodes: list[EmbeddedValkey], client: Any, name: str,
                 aio: bool) -> None:
        self.nodes, self.client, self.name = nodes, client, name
        self.queue: Any = (AsyncQueue if aio else Queue)(client, name, wire=6)
        self.slot = int(client.keyslot(f"emq:{{{name}}}:pending"))

    def owner(self) -> EmbeddedValkey:
        return owner(self.nodes, self.slot)

    def elsewhere(self) -> EmbeddedValkey:
        current = self.owner()
        return next(n for n in self.nodes if n is not current)

    def mapped_port(self) -> int:
        """The port of the node the client's slot map names for the queue."""
        return int(self.client.get_node_from_key(f"emq:{{{self.name}}}:pending").port)

    async def traffic(self, tag: str) -> None:
        """Enqueues, an enqueue_many, claims and a settle, each checked."""
        queue = self.queue
        for n in range(JOBS):
            assert await reply(queue.enqueue(f"JOB:{tag}{n}", b"x")) is Verdict.ENQUEUED
        many = [(f"JOB:{tag}m{n}", b"x") for n in range(JOBS)]
        assert await reply(queue.enqueue_many(many)) == [Verdict.ENQUEUED] * JOBS
        leased = [await reply(queue.claim(lease_ms=60_000)) for _ in range(2 * JOBS)]
        assert all(isinstance(job, Job) for job in leased)
        settled, _ = await reply(queue.settle([Ack(job) for job in leased]))
        assert settled == [Verdict.ACKED] * 2 * JOBS

    async def after_a_move(self) -> None:
        """The slot moves to another node behind the client's back: its next calls get MOVED."""
        stale, target = self.mapped_port(), self.elsewhere()
        open_move(self.slot, self.owner(), target)
        close_move(self.nodes, self.slot, target)
        assert stale != target.port
        await self.traffic("moved")
        assert self.mapped_port() == target.port  # the client followed MOVED

    async def during_a_move(self) -> None:
        """The slot is moving, all its keys on the target already: the source answers ASK."""
        assert await reply(self.queue.enqueue("JOB:asked", b"x")) is Verdict.ENQUEUED
        job = await reply(self.queue.claim(lease_ms=60_000))
        assert isinstance(job, Job)
        source, target = self.owner(), self.elsewhere()
        open_move(self.slot, source, target)
        try:
            assert self.mapped_port() == source.port
            assert await reply(self.queue.extend(job, lease_ms=90_000)) is Verdict.EXTENDED
            assert await reply(self.queue.extend_many([job], lease_ms=90_000)) == [
                Verdict.EXTENDED]
        finally:
            close_move(self.nodes, self.slot, target)
        assert await reply(self.queue.ack(job)) is Verdict.ACKED


async def run(nodes: list[EmbeddedValkey], library: str, aio: bool) -> None:
    client = CLIENTS[library, aio](host="127.0.0.1", port=nodes[0].port)
    try:
        if aio:
            await client.initialize()
        scenario = Scenario(nodes, client, f"routed-{library}-{aio}", aio)
        await scenario.traffic("first")
        await scenario.after_a_move()
        await scenario.during_a_move()
    finally:
        await reply(client.aclose() if aio else client.close())


@pytest.mark.parametrize("aio", [False, True], ids=["blocking", "asyncio"])
@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_emq_calls_are_routed_without_command_getkeys(nodes: list[EmbeddedValkey],
                                                      library: str, aio: bool) -> None:
    before = getkeys_calls(nodes)
    asyncio.run(run(nodes, library, aio))
    assert getkeys_calls(nodes) - before == 0
