"""The server's clock (``TIME``) read one way everywhere: ``echomq.engine.server_time`` decodes a
plain
client's reply and the per-node reply of a cluster client that asks several nodes, and both
consumer shells read it through that decoder — checked on a real cluster of three primaries."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
import valkey.asyncio.cluster
import valkey.cluster

from echomq import aio
from echomq.consumer.blocking import Consumer
from echomq.embedded import EmbeddedValkey
from echomq.engine.server_time import server_ms, time_ms
from echomq.queue.blocking import Queue
from tests.cluster import three_primaries

# Below the asyncio cluster client's park cap (its 5 s socket timeout less a margin).
DELAY_MS = 2_000
CLUSTERS = {"redis": (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster),
            "valkey": (valkey.cluster.ValkeyCluster, valkey.asyncio.cluster.ValkeyCluster)}


def test_a_time_reply_is_read_as_ms_whatever_its_shape() -> None:
    assert time_ms((1_700_000_000, 123_999)) == 1_700_000_000_123
    assert time_ms([b"1700000000", b"123999"]) == 1_700_000_000_123
    per_node = {"127.0.0.1:7000": (1_700_000_000, 5_000), "127.0.0.1:7001": (1_700_000_001, 0)}
    assert time_ms(per_node) == 1_700_000_000_005
    with pytest.raises(ValueError, match="no node"):
        time_ms({})


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedValkey]:
    with three_primaries() as nodes:
        yield nodes[0]


def node_ms(node: EmbeddedValkey) -> int:
    """The clock of ``node``, read through a plain client of its own."""
    client = node.client()
    try:
        return server_ms(client)
    finally:
        client.close()


def every_primary(client: Any) -> Any:
    """``client`` with its TIME asked of every primary: its reply is a per-node mapping."""
    client.time = functools.partial(client.time, target_nodes=client.PRIMARIES)
    return client


@pytest.mark.parametrize("library", sorted(CLUSTERS))
def test_the_blocking_consumer_parks_by_a_cluster_clients_per_node_clock(
        cluster: EmbeddedValkey, library: str) -> None:
    client = every_primary(CLUSTERS[library][0](host="127.0.0.1", port=cluster.port))
    try:
        client.flushall(target_nodes=client.PRIMARIES)
        assert isinstance(client.time(), dict) and len(client.time()) == 3
        queue = Queue(client, f"clock-{library}")
        before = node_ms(cluster)
        queue.enqueue("JOB:later", b"", delay_ms=DELAY_MS)
        park_ms = Consumer(queue, lambda job: None).park_timeout_ms()
        assert_parks_until_due(park_ms, node_ms(cluster) - before)
    finally:
        client.close()


def assert_parks_until_due(park_ms: int, elapsed_ms: int) -> None:
    """A park until the job falls due, as the server's clock tells: its delay, give or take the
    ``elapsed_ms`` (server time) between before its enqueue and after the park was planned."""
    assert abs(park_ms - DELAY_MS) <= elapsed_ms + 1, (park_ms, elapsed_ms)


@pytest.mark.parametrize("library", sorted(CLUSTERS))
def test_the_asyncio_consumer_parks_by_a_cluster_clients_per_node_clock(
        cluster: EmbeddedValkey, library: str) -> None:
    async def main() -> tuple[int, int]:
        client = every_primary(CLUSTERS[library][1](host="127.0.0.1", port=cluster.port))
        try:
            await client.flushall(target_nodes=client.PRIMARIES)
            reply = await client.time()
            assert isinstance(reply, dict) and len(reply) == 3
            queue = aio.Queue(client, f"clock-{library}")
            before = node_ms(cluster)
            await queue.enqueue("JOB:later", b"", delay_ms=DELAY_MS)
            park_ms = await aio.Consumer(queue, lambda job: None).park_timeout_ms()
            return park_ms, node_ms(cluster) - before
        finally:
            await client.aclose()

    assert_parks_until_due(*asyncio.run(main()))
