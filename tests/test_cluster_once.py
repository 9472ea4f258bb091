"""Transitions through a cluster client are sent once: a reply lost on the way back is never
answered by the same call sent again (redis-py's and valkey-py's cluster clients, blocking and
asyncio). A one-node cluster announces the port of a proxy that loses the replies it is told to,
so every command the client sends goes through the proxy."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
import valkey
import valkey.asyncio.cluster
import valkey.cluster

from echomq import Queue, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.consumer.aio_parker import AsyncParker
from echomq.consumer.blocking_parker import Parker
from echomq.consumer.shell import take_token
from echomq.embedded import EmbeddedValkey
from echomq.engine.cluster_once import first_key, hint
from echomq.ops import admin
from echomq.queue.parking import TOKEN_ROLE, token_taken
from tests.reliability.servers import low_port, node, wait_until
from tests.reply_dropper import ReplyDropper

CLUSTERS = {"redis": (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster),
            "valkey": (valkey.cluster.ValkeyCluster, valkey.asyncio.cluster.ValkeyCluster)}
LOST = (redis.exceptions.ConnectionError, valkey.exceptions.ConnectionError)


class OneNodeCluster:
    """A cluster whose one primary holds every slot and is reached only through ``dropper``,
    with a replica reached directly: after a connection error a cluster client drops the failed
    node from the nodes it reads the slot map from (redis-py 5 and valkey-py do), and the
    replica is the one left to read it from."""

    def __init__(self) -> None:
        used: set[int] = set()
        self.servers: list[EmbeddedValkey] = []
        for _ in range(2):
            port = low_port(used)
            used |= {port, port + 10000}
            server = node(port=port, config={"cluster-enabled": "yes", "appendonly": "no",
                                             "cluster-config-file": "nodes.conf"})
            self.servers.append(server)
            server.start()
        self.server, replica = self.servers
        self.dropper = ReplyDropper(self.server.port)
        self.command(self.server, "CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        self.command(self.server, "CONFIG", "SET", "cluster-announce-port", self.dropper.port)
        self.command(replica, "CLUSTER", "MEET", "127.0.0.1", self.server.port)
        primary_id = self.command(self.server, "CLUSTER", "MYID")
        wait_until(lambda: self.knows(replica, primary_id), "the replica met the primary")
        self.command(replica, "CLUSTER", "REPLICATE", primary_id)
        wait_until(lambda: all(self.cluster_state(s) == "ok" and self.replica_listed(s)
                               for s in self.servers), "cluster_state:ok with a replica")

    @staticmethod
    def command(server: EmbeddedValkey, *argv: Any) -> Any:
        client = server.client()
        try:
            reply = client.execute_command(*argv)
        finally:
            client.close()
        return reply.decode() if isinstance(reply, bytes) else reply

    def replica_listed(self, server: EmbeddedValkey) -> bool:
        """Whether ``server``'s slot map names the replica beside the primary."""
        return all(len(entry) > 3 for entry in self.command(server, "CLUSTER", "SLOTS"))

    def knows(self, server: EmbeddedValkey, node_id: str) -> bool:
        return node_id in self.command(server, "CLUSTER", "NODES")

    def cluster_state(self, server: EmbeddedValkey) -> str:
        text = self.command(server, "CLUSTER", "INFO")
        return dict(line.split(":", 1) for line in text.split() if ":" in line)["cluster_state"]

    def stop(self) -> None:
        self.dropper.close()
        for server in self.servers:
            server.stop()


@pytest.fixture
def cluster() -> Iterator[OneNodeCluster]:
    made = OneNodeCluster()
    try:
        yield made
    finally:
        made.stop()


def naming(text: bytes) -> Any:
    """Picks the request naming ``text`` that runs a transition (not the client asking the
    server which keys a module command names, which names them too)."""
    return lambda chunk: text in chunk and b"GETKEYS" not in chunk


def cluster_client(library: str, cluster: OneNodeCluster, *, asyncio_client: bool) -> Any:
    kind = CLUSTERS[library][1 if asyncio_client else 0]
    return kind(host="127.0.0.1", port=cluster.dropper.port)


def blocking_client(library: str, cluster: OneNodeCluster) -> Any:
    return cluster_client(library, cluster, asyncio_client=False)


@pytest.mark.parametrize("library", ["redis", "valkey"])
@pytest.mark.parametrize("wire", [5, 6])
def test_a_lost_enqueue_reply_answers_enqueued_not_duplicate(cluster: OneNodeCluster,
                                                             library: str, wire: int) -> None:
    client = blocking_client(library, cluster)
    try:
        queue = Queue(client, "lost", wire=wire)
        queue.enqueue("JOB:warm", b"x")  # the slot map, the scripts and the command table read
        cluster.dropper.drop(naming(b"JOB:once"))
        assert queue.enqueue("JOB:once", b"x") is Verdict.ENQUEUED
        assert cluster.dropper.dropped == 1
        assert queue.enqueue("JOB:once", b"x") is Verdict.DUPLICATE
    finally:
        client.close()


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_a_purge_whose_reply_is_lost_removes_no_more_than_its_limit(cluster: OneNodeCluster,
                                                                    library: str) -> None:
    client = blocking_client(library, cluster)
    try:
        queue = Queue(client, "purged", wire=5)
        for n in range(10):
            queue.enqueue(f"JOB:{n}", b"x")
            job = queue.claim(lease_ms=60_000)
            assert job is not None
            queue.retry(job, error="boom", max_attempts=1)
        assert client.zcard("emq:{purged}:dead") == 10
        assert admin.purge(client, "other", limit=1) == 0  # the purge script loaded
        cluster.dropper.drop(naming(b"EVALSHA"))
        with pytest.raises(LOST):
            admin.purge(client, "purged", limit=5)
        assert cluster.dropper.dropped == 1
        assert client.zcard("emq:{purged}:dead") == 5
    finally:
        client.close()


@pytest.mark.parametrize("library", ["redis", "valkey"])
@pytest.mark.parametrize("wire", [5, 6])
def test_an_asyncio_cluster_client_sends_a_transition_once(cluster: OneNodeCluster,
                                                           library: str, wire: int) -> None:
    async def scenario() -> None:
        client = cluster_client(library, cluster, asyncio_client=True)
        try:
            queue = AsyncQueue(client, "lost", wire=wire)
            await queue.enqueue("JOB:warm", b"x")
            cluster.dropper.drop(naming(b"JOB:once"))
            assert await queue.enqueue("JOB:once", b"x") is Verdict.ENQUEUED
            assert cluster.dropper.dropped == 1
            assert await queue.enqueue("JOB:once", b"x") is Verdict.DUPLICATE
            # both in pending, once each (the two may share a millisecond: no order asserted)
            claimed = [await queue.claim(lease_ms=60_000) for _ in range(3)]
            assert sorted(job.id for job in claimed if job is not None) == ["JOB:once", "JOB:warm"]
            assert claimed[2] is None
        finally:
            await client.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_the_housekeeping_token_and_the_pause_check_are_asked_of_their_node_once(
        cluster: OneNodeCluster, library: str) -> None:
    """A consumer asks both in its loop: through the client's own retries, a node that is down
    would hold the loop for seconds, and every other shard it serves with it. Sent once, the
    lost reply is raised at once (the token's SET ran: the holder has it)."""
    client = blocking_client(library, cluster)
    try:
        queue = Queue(client, "tok", wire=5)
        token = queue.key(TOKEN_ROLE)
        assert token_taken(take_token(client, token, "other", 60_000), "other")
        assert token_taken(take_token(client, token, "me", 60_000), "me") is False  # other's
        client.delete(token)
        cluster.dropper.drop(naming(token.encode()))
        with pytest.raises(LOST):
            take_token(client, token, "me", 60_000)
        assert cluster.dropper.dropped == 1
        assert token_taken(take_token(client, token, "me", 60_000), "me")
        queue.pause()
        cluster.dropper.drop(naming(b"EXISTS"))
        with pytest.raises(LOST):
            queue.is_paused()
        assert cluster.dropper.dropped == 2
        assert queue.is_paused()
    finally:
        client.close()


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_an_asyncio_cluster_client_asks_for_the_token_and_the_pause_once(
        cluster: OneNodeCluster, library: str) -> None:
    async def scenario() -> None:
        client = cluster_client(library, cluster, asyncio_client=True)
        try:
            queue = AsyncQueue(client, "tok", wire=5)
            token = queue.key(TOKEN_ROLE)
            assert token_taken(await take_token(client, token, "me", 60_000), "me")
            await client.delete(token)
            cluster.dropper.drop(naming(token.encode()))
            with pytest.raises(LOST):
                await take_token(client, token, "me", 60_000)
            assert cluster.dropper.dropped == 1
            assert token_taken(await take_token(client, token, "me", 60_000), "me")
            await queue.pause()
            cluster.dropper.drop(naming(b"EXISTS"))
            with pytest.raises(LOST):
                await queue.is_paused()
            assert cluster.dropper.dropped == 2
            assert await queue.is_paused()
        finally:
            await client.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_a_cluster_consumers_read_before_a_park_is_sent_once(cluster: OneNodeCluster,
                                                             library: str) -> None:
    """Through the cluster client's pipeline, a read whose node is down waits out the client's
    retries (seconds, the consumer's stop and its other nodes' jobs waiting with it): sent node
    by node once (``echomq.engine.scatter.scatter_reads``), the lost reply is raised at once."""
    client = blocking_client(library, cluster)
    try:
        parker = Parker([Queue(client, "parked", wire=5)], 1_000)
        assert len(parker.read(ready=True, lanes=False)) == 1
        cluster.dropper.drop(naming(b"ZRANGE"))
        with pytest.raises(LOST):
            parker.read(ready=True, lanes=False)
        assert cluster.dropper.dropped == 1
        assert len(parker.read(ready=True, lanes=False)) == 1
    finally:
        client.close()


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_an_asyncio_cluster_consumers_read_before_a_park_is_sent_once(
        cluster: OneNodeCluster, library: str) -> None:
    async def scenario() -> None:
        client = cluster_client(library, cluster, asyncio_client=True)
        try:
            parker = AsyncParker([AsyncQueue(client, "parked", wire=5)], 1_000)
            assert len(await parker.read(ready=True, lanes=False)) == 1
            cluster.dropper.drop(naming(b"ZRANGE"))
            with pytest.raises(LOST):
                await parker.read(ready=True, lanes=False)
            assert cluster.dropper.dropped == 1
            assert len(await parker.read(ready=True, lanes=False)) == 1
            await parker.close()
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_the_first_key_of_each_kind_of_command() -> None:
    assert first_key(("EVALSHA", "abc", 2, "emq:{q}:pending", "x", "1")) == "emq:{q}:pending"
    assert first_key(("EMQ.CLAIM", 3, "emq:{q}:pending", "b", "c", 1, "*")) == "emq:{q}:pending"
    assert first_key((b"RPUSH", "emq:{q}:watch", 1, 1)) == "emq:{q}:watch"
    assert first_key(("EVALSHA", "abc", 0, "x")) is None
    assert first_key(("PING",)) is None


class Parsed:
    """Stands in for a cluster client: only its command parser's table."""

    def __init__(self, commands: dict[str, Any]) -> None:
        self.commands_parser = type("Parser", (), {"commands": commands})()


def test_an_emq_command_is_hinted_to_the_parser_by_its_first_key() -> None:
    movable = {"name": "emq.claim", "arity": -4, "flags": {"write", "movablekeys"},
               "first_key_pos": 0, "last_key_pos": 0, "step_count": 0}
    evalsha = {"name": "evalsha", "arity": -3, "flags": ["noscript", "movablekeys"],
               "first_key_pos": 0, "last_key_pos": 0, "step_count": 0}
    client = Parsed({"emq.claim": dict(movable), "evalsha": dict(evalsha)})
    hint(client, ("EMQ.CLAIM", 3, "emq:{q}:pending", "b", "c", 1, "*"))
    hint(client, ("EVALSHA", "abc", 1, "emq:{q}:pending"))
    table = client.commands_parser.commands
    assert table["emq.claim"] == {**movable, "flags": ["write"], "first_key_pos": 2,
                                  "last_key_pos": 2, "step_count": 1}
    assert table["evalsha"] == evalsha  # the client routes scripts by their key count already
    hint(Parsed({}), ("EMQ.CLAIM", 1, "k"))  # a command the table lacks: left to the client
    hint(object(), ("EMQ.CLAIM", 1, "k"))  # a client without a parser
