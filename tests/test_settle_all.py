"""``SettleAll`` performed (``echomq.consumer.settle_all``) on real servers: on one server every
shard's settle call goes out in one flush and each call's fate is its own (a shard whose call
the server refuses gets its error, the others their jobs); a call sending its watch tokens sends
them in that flush; on a cluster each call goes alone to its own slot's node, and a node that
is down fails only its shard's call."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster

from echomq import Queue, aio
from echomq.consumer.actions import Settle
from echomq.consumer.settings import Round
from echomq.consumer.settle_all import settle_all
from echomq.embedded import EmbeddedValkey
from echomq.engine import once, program
from echomq.engine.calls import Ack, Verdict
from echomq.engine.program import adrive, drive
from echomq.queue.parking import WATCH_ROLE
from tests.cluster import three_primaries
from tests.reliability.servers import owner

LEASE_MS = 30_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def flushes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many commands each flush sent (blocking client)."""
    sizes: list[int] = []

    def flush(client: Any, commands: Any) -> Any:
        sizes.append(len(commands))
        return once.flush_once(client, commands)

    monkeypatch.setattr(program, "flush_once", flush)
    return sizes


def claims(shards: int, claim: int, *, watch: int | None = None) -> tuple[Settle, ...]:
    return tuple(Settle(n, Round([], claim, f"c{n}"), n == watch) for n in range(shards))


def loaded(conn: Any, wire: int, names: list[str], jobs: int) -> list[Queue]:
    queues = [Queue(conn, name, wire=wire) for name in names]
    for queue in queues:
        queue.enqueue_many([(f"JOB:{queue.name}-{k}", b"x") for k in range(jobs)])
    return queues


def test_one_flush_carries_every_shards_call_and_each_fails_alone(
        conn: redis.Redis, wire: int, flushes: list[int]) -> None:
    queues = loaded(conn, wire, [f"all{n}" for n in range(4)], 3)
    conn.delete(queues[2].key("pending"))
    conn.set(queues[2].key("pending"), "not a sorted set")  # its call is refused
    flushes.clear()
    replies = drive(settle_all(queues, claims(4, 2, watch=1), LEASE_MS, None, None))
    assert flushes == [4 + 2]  # four calls, then shard 1's watch tokens (RPUSH, LTRIM)
    assert isinstance(replies[2], redis.ResponseError)
    for n in (0, 1, 3):
        verdicts, jobs = replies[n]
        assert verdicts == [] and [job.id for job in jobs] == [f"JOB:all{n}-0", f"JOB:all{n}-1"]
        assert conn.zcard(queues[n].key("active")) == 2
    assert conn.llen(queues[1].key(WATCH_ROLE)) > 0
    assert conn.llen(queues[0].key(WATCH_ROLE)) == 0


def test_outcomes_go_back_to_their_own_shard(conn: redis.Redis, wire: int,
                                             flushes: list[int]) -> None:
    queues = loaded(conn, wire, ["own0", "own1"], 2)
    flushes.clear()
    first = drive(settle_all(queues, claims(2, 1), LEASE_MS, None, None))
    acks = tuple(Settle(n, Round([Ack(first[n][1][0])], 1, f"d{n}"), False) for n in range(2))
    second = drive(settle_all(queues, acks, LEASE_MS, None, None))
    assert flushes == [2, 2]
    for n, queue in enumerate(queues):
        verdicts, jobs = second[n]
        assert verdicts == [Verdict.ACKED] and [job.id for job in jobs] == [f"JOB:own{n}-1"]
        assert conn.zcard(queue.key("pending")) == 0


def test_an_asyncio_client_sends_them_in_one_flush_too(conn: redis.Redis, wire: int,
                                                       valkey: EmbeddedValkey) -> None:
    loaded(conn, wire, ["aio0", "aio1", "aio2"], 1)

    async def main() -> list[Any]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=valkey.port)
        try:
            queues = [aio.Queue(client, f"aio{n}", wire=wire) for n in range(3)]
            return await adrive(settle_all(queues, claims(3, 1), LEASE_MS, None, None))
        finally:
            await client.aclose()

    replies = asyncio.run(main())
    assert [[job.id for job in jobs] for _, jobs in replies] == \
        [["JOB:aio0-0"], ["JOB:aio1-0"], ["JOB:aio2-0"]]


@pytest.fixture
def cluster() -> Iterator[list[EmbeddedValkey]]:
    with three_primaries() as nodes:
        yield nodes


def test_on_a_cluster_each_call_goes_alone_and_a_node_down_fails_only_its_shard(
        cluster: list[EmbeddedValkey], wire: int, flushes: list[int]) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        names = [f"node{n}" for n in range(12)]
        queues = loaded(client, wire, names, 2)
        homes = [owner(cluster, client.keyslot(queue.key("pending"))) for queue in queues]
        down = cluster[2]  # not the node the client first asks for its slot map
        assert down in homes and any(home is not down for home in homes)
        flushes.clear()
        down.stop()
        first = drive(settle_all(queues, claims(len(queues), 1), LEASE_MS, None, None))
        # the first call after the node went away may meet the client's own refresh of its
        # slot map; a failure never fails the calls after it
        assert any(not isinstance(reply, Exception) for reply in first)
        second = drive(settle_all(queues, claims(len(queues), 1), LEASE_MS, None, None))
        assert flushes == []  # no cluster pipeline: each call sent on its own
        for queue, home, reply in zip(queues, homes, second, strict=True):
            if home is down:
                assert isinstance(reply, redis.ConnectionError)
            else:
                assert not isinstance(reply, Exception), (queue.name, reply)
                assert len(reply[1]) == 1 and reply[1][0].id.startswith(f"JOB:{queue.name}-")
    finally:
        client.close()


def test_a_server_that_lost_its_scripts_has_each_call_sent_again_once(
        conn: redis.Redis) -> None:
    queues = loaded(conn, 5, ["lost0", "lost1", "lost2"], 2)
    conn.script_flush()
    replies = drive(settle_all(queues, claims(3, 1), LEASE_MS, None, None))
    assert [[job.id for job in jobs] for _, jobs in replies] == \
        [["JOB:lost0-0"], ["JOB:lost1-0"], ["JOB:lost2-0"]]
    for queue in queues:  # each call ran once: one job leased, one left
        assert conn.zcard(queue.key("active")) == 1 and conn.zcard(queue.key("pending")) == 1
