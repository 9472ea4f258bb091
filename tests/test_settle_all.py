"""``SettleAll`` performed (``echomq.consumer.settle_all``) on real servers: on one server every
shard's settle call goes out in one flush and each call's fate is its own (a shard whose call
the server refuses gets its error, the others their jobs); a call sending its watch tokens sends
them in that flush; on a cluster the round is one too (every node's calls in one write, all
written before any reply is read, on the blocking and asyncio clients), a node that is down fails
only its shards' calls, and a call whose slot moved is sent again where the slot went."""

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
from tests.cluster import close_move, open_move, three_primaries
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


def claims(shards: int, claim: int, *, watch: int | None = None,
           tag: str = "c") -> tuple[Settle, ...]:
    """A claim of ``claim`` jobs on each of ``shards`` queues; ``tag`` names the claims (the
    same claim id sent again answers the lease it took, not another)."""
    return tuple(Settle(n, Round([], claim, f"{tag}{n}"), n == watch) for n in range(shards))


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


@pytest.fixture
def wire_log(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Each write to a socket and each reply read on a blocking client's connection, in order:
    ("write", port) or ("read", port)."""
    log: list[tuple[str, int]] = []
    send, read = redis.connection.Connection.send_packed_command, \
        redis.connection.Connection.read_response

    def sending(conn: Any, *args: Any, **kwargs: Any) -> Any:
        log.append(("write", conn.port))
        return send(conn, *args, **kwargs)

    def reading(conn: Any, *args: Any, **kwargs: Any) -> Any:
        log.append(("read", conn.port))
        return read(conn, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", sending)
    monkeypatch.setattr(redis.connection.Connection, "read_response", reading)
    return log


def test_on_a_cluster_the_round_is_one_write_per_node_before_any_read(
        cluster: list[EmbeddedValkey], wire: int, wire_log: list[tuple[str, int]]) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        queues = loaded(client, wire, [f"round{n}" for n in range(12)], 2)
        homes = {owner(cluster, client.keyslot(queue.key("pending"))).port for queue in queues}
        assert len(homes) == 3
        # a first round: what a queue reads once, before its first call, is out of the way
        drive(settle_all(queues, claims(len(queues), 0), LEASE_MS, None, None))
        wire_log.clear()
        replies = drive(settle_all(queues, claims(len(queues), 1, watch=0), LEASE_MS, None,
                                   None))
        writes = [port for kind, port in wire_log if kind == "write"]
        assert sorted(writes) == sorted(homes)  # one write per node: its calls, its tokens
        first_read = next(n for n, (kind, _) in enumerate(wire_log) if kind == "read")
        assert all(kind == "read" for kind, _ in wire_log[first_read:])
        for queue, (verdicts, jobs) in zip(queues, replies, strict=True):
            assert verdicts == [] and [job.id for job in jobs] == [f"JOB:{queue.name}-0"]
        assert client.llen(queues[0].key(WATCH_ROLE)) > 0
    finally:
        client.close()


def test_on_a_cluster_a_node_down_fails_only_its_shards_calls(
        cluster: list[EmbeddedValkey], wire: int) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        names = [f"node{n}" for n in range(12)]
        queues = loaded(client, wire, names, 2)
        homes = [owner(cluster, client.keyslot(queue.key("pending"))) for queue in queues]
        down = cluster[2]  # not the node the client first asks for its slot map
        assert down in homes and any(home is not down for home in homes)
        down.stop()
        first = drive(settle_all(queues, claims(len(queues), 1), LEASE_MS, None, None))
        second = drive(settle_all(queues, claims(len(queues), 1, tag="d"), LEASE_MS, None,
                                  None))
        for round_ in (first, second):
            for queue, home, reply in zip(queues, homes, round_, strict=True):
                if home is down:
                    assert isinstance(reply, redis.ConnectionError)
                else:
                    assert not isinstance(reply, Exception), (queue.name, reply)
                    assert len(reply[1]) == 1 and reply[1][0].id.startswith(f"JOB:{queue.name}-")
    finally:
        client.close()


def test_on_a_cluster_a_call_whose_slot_moved_is_sent_again_where_it_went(
        cluster: list[EmbeddedValkey], wire: int) -> None:
    """The client's slot map is stale: the moved shard's call is refused with MOVED (nothing
    ran), then sent alone through the client, which follows it; its job is leased once."""
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        queues = loaded(client, wire, [f"moved{n}" for n in range(6)], 2)
        slot = client.keyslot(queues[0].key("pending"))
        source = owner(cluster, slot)
        target = next(node for node in cluster if node is not source)
        open_move(slot, source, target)
        close_move(cluster, slot, target)
        replies = drive(settle_all(queues, claims(len(queues), 1), LEASE_MS, None, None))
        for queue, (_, jobs) in zip(queues, replies, strict=True):
            assert [job.id for job in jobs] == [f"JOB:{queue.name}-0"]
        direct = target.client()
        try:
            assert direct.zcard(queues[0].key("active")) == 1
            assert direct.zcard(queues[0].key("pending")) == 1
        finally:
            direct.close()
    finally:
        client.close()


def test_on_an_asyncio_cluster_client_the_round_is_one_too(
        cluster: list[EmbeddedValkey], wire: int) -> None:
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    blocking = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    names = [f"around{n}" for n in range(6)]
    try:
        loaded(blocking, wire, names, 2)
    finally:
        blocking.close()
    down = cluster[2]

    async def main() -> list[Any]:
        client = AsyncRedisCluster(host="127.0.0.1", port=cluster[0].port)
        try:
            queues = [aio.Queue(client, name, wire=wire) for name in names]
            whole = await adrive(settle_all(queues, claims(6, 1), LEASE_MS, None, None))
            down.stop()
            return [whole, await adrive(settle_all(queues, claims(6, 1, tag="d"), LEASE_MS,
                                                   None, None))]
        finally:
            await client.aclose()

    homes = [owner(cluster, int(redis.cluster.key_slot(f"emq:{{{name}}}:pending".encode())))
             for name in names]
    whole, partial = asyncio.run(main())
    assert [[job.id for job in jobs] for _, jobs in whole] == [[f"JOB:{n}-0"] for n in names]
    for name, home, reply in zip(names, homes, partial, strict=True):
        if home is down:
            assert isinstance(reply, redis.ConnectionError)
        else:
            assert [job.id for job in reply[1]] == [f"JOB:{name}-1"]


def test_a_server_that_lost_its_scripts_has_each_call_sent_again_once(
        conn: redis.Redis) -> None:
    queues = loaded(conn, 5, ["lost0", "lost1", "lost2"], 2)
    conn.script_flush()
    replies = drive(settle_all(queues, claims(3, 1), LEASE_MS, None, None))
    assert [[job.id for job in jobs] for _, jobs in replies] == \
        [["JOB:lost0-0"], ["JOB:lost1-0"], ["JOB:lost2-0"]]
    for queue in queues:  # each call ran once: one job leased, one left
        assert conn.zcard(queue.key("active")) == 1 and conn.zcard(queue.key("pending")) == 1
