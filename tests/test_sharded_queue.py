"""A sharded queue (``Queue(conn, name, shards=N)``): its layout (shard keys no plain queue can
reach, spread over a cluster's slots), the count of shards recorded on the server and a client
asking another refused with nothing written, routing pinned (a change of hash fails here), and
the producer's and operator's methods across shards — on one server and through a cluster
client, on both wires and both shells. Every method of a Queue is handled: it works over the
shards or refuses by name."""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from hypothesis import given, strategies as st

from echomq import Ack, KindError, Queue, Verdict, Wire6Unsupported
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.engine.program import Op, ops_of
from echomq.engine.rows import Layout
from echomq.engine.transitions import queue_base
from echomq.queue.methods import QueueMethods
from echomq.queue.shard_layout import (
    MAX_SHARDS,
    MIN_SHARDS,
    ShardError,
    record_key,
    recorded_shards,
    shard_base,
    shard_name,
    shard_of,
    shard_range,
    slot_of_tag,
)
from echomq.queue.sharded import ShardedMethods
from echomq.queue.sharded_controls import ShardedControls
from tests.cluster import three_primaries
from tests.reliability.servers import owner

# Part of the stored format: a job's shard of 8 by its id, a lane job's by its group.
PINNED_IDS = {"JOB:1": 3, "JOB:2": 1, "JOB:abc": 4, "JOB:order-42": 1, "JOB:01HZX": 7}
PINNED_GROUPS = {"tenant-a": 3, "tenant-b": 1, "t:9": 7}
REFUSED = {"events", "latest_events", "enqueue_after", "enqueue_graph", "park",
           "sweep_staging"}
LEGAL_NAMES = st.text(st.characters(blacklist_characters="{}/", blacklist_categories=("Cs", "Cc")),
                      min_size=1, max_size=12)


def hash_tag(key: str) -> str:
    """What a cluster hashes of ``key``: between the first ``{`` and the next ``}``, if any."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key if start < 0 or end <= start + 1 else key[start + 1:end]


async def reply(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def snapshot(conn: Any) -> dict[bytes, Any]:
    """Every key with its type and value dump: what a refused client must leave as it was."""
    return {key: conn.dump(key) for key in conn.keys("*")}


# layout ------------------------------------------------------------------------------------


@given(plain=LEGAL_NAMES, sharded=LEGAL_NAMES, index=st.integers(0, MAX_SHARDS - 1),
       suffix=st.text(max_size=20))
def test_no_plain_queue_reaches_a_shards_keys(plain: str, sharded: str, index: int,
                                              suffix: str) -> None:
    plain_key = queue_base(plain) + suffix
    shard_key = shard_base(sharded, index, MAX_SHARDS) + suffix
    assert "{" not in hash_tag(plain_key)
    assert "{" in hash_tag(shard_key)  # so the two keys can never be one
    assert not shard_key.startswith(queue_base(plain))
    name, _, rest = hash_tag(shard_key).rpartition("{")
    assert name == sharded and rest.split("~")[0] == str(index)


@given(name=LEGAL_NAMES, shards=st.integers(MIN_SHARDS, MAX_SHARDS))
def test_the_shards_slots_are_evenly_spaced(name: str, shards: int) -> None:
    """Shard k's slot lies in the k-th N-th of the slots: equal runs of slots (one per primary)
    hold equal numbers of shards. The first shards' tags are pinned: part of the format."""
    for index in (0, shards // 2, shards - 1):
        tag = hash_tag(shard_base(name, index, shards))
        assert slot_of_tag(tag) in shard_range(index, shards)
        assert redis.cluster.key_slot(f"emq:{{{tag}}}:pending".encode()) == slot_of_tag(tag)


def test_the_shards_tags_are_pinned() -> None:
    assert [shard_name("orders", k, 8) for k in range(8)] == [
        "orders{0~4", "orders{1", "orders{2~43", "orders{3~4", "orders{4~42", "orders{5~4",
        "orders{6~4", "orders{7~42"]


def test_a_shards_name_is_no_legal_queue_name() -> None:
    with pytest.raises(ValueError, match="braces"):
        Queue(redis.Redis(), "orders{3")


def test_routing_is_pinned() -> None:
    assert {job_id: shard_of(job_id, 8) for job_id in PINNED_IDS} == PINNED_IDS
    assert {group: shard_of("JOB:1", 8, group) for group in PINNED_GROUPS} == PINNED_GROUPS
    assert shard_of("JOB:1", 256) == 115


@pytest.mark.parametrize("shards", [0, 1, MAX_SHARDS + 1, "4", True, 2.0])
def test_a_count_out_of_range_is_refused_with_nothing_written(conn: redis.Redis,
                                                              shards: Any) -> None:
    with pytest.raises(ShardError, match="from 2 to 256"):
        Queue(conn, "q", shards=shards)
    assert conn.dbsize() == 0


# the record ---------------------------------------------------------------------------------


def test_the_count_is_recorded_and_another_refused(conn: redis.Redis) -> None:
    """Recorded, or refused, before the queue's first command: made, it has sent nothing."""
    queue = Queue(conn, "orders", shards=4)
    assert conn.dbsize() == 0
    assert queue.enqueue("JOB:1", b"x") is Verdict.ENQUEUED
    assert conn.get(record_key("orders")) == b"4"
    assert recorded_shards(conn, "orders") == 4
    before = snapshot(conn)
    other = Queue(conn, "orders", shards=5)
    for _ in range(2):  # refused at each command, never recorded
        with pytest.raises(ShardError, match=r"recorded with 4 shards.*asked for 5 shards"):
            other.enqueue("JOB:2", b"x")
    assert snapshot(conn) == before
    assert Queue(conn, "orders", shards=4).outcome("JOB:1").state == "pending"
    assert conn.smembers("emq:queues") == {b"orders"}  # the logical name, never a shard's


def test_the_asyncio_queue_records_and_refuses_before_its_first_command(
        valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(port=valkey.port)
        try:
            queue = AsyncQueue(client, "orders", shards=3)
            assert conn.dbsize() == 0  # made, nothing sent
            assert await queue.enqueue("JOB:1", b"x") is Verdict.ENQUEUED
            before = snapshot(conn)
            other = AsyncQueue(client, "orders", shards=6)
            with pytest.raises(ShardError, match=r"recorded with 3 shards.*asked for 6"):
                await other.counts()
            assert snapshot(conn) == before
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert recorded_shards(conn, "orders") == 3


def test_a_plain_queue_of_a_name_recorded_sharded_is_refused(valkey: EmbeddedValkey,
                                                             conn: redis.Redis) -> None:
    """Its jobs would go where no consumer of the shards looks: refused before its first
    command (blocking and asyncio alike), nothing written; without ``check_policy`` nothing is
    asked of the server."""
    Queue(conn, "orders", shards=4).enqueue("JOB:1", b"x")
    before = snapshot(conn)
    plain = Queue(conn, "orders")
    for _ in range(2):  # refused at each command
        with pytest.raises(ShardError, match=r"recorded with 4 shards.*asked for a plain queue"):
            plain.enqueue("JOB:2", b"x")

    async def scenario() -> None:
        client = redis.asyncio.Redis(port=valkey.port)
        try:
            with pytest.raises(ShardError, match="make it with shards=4"):
                await AsyncQueue(client, "orders").enqueue("JOB:2", b"x")
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert snapshot(conn) == before
    assert Queue(conn, "orders", check_policy=False).shards == 1


def test_a_plain_queue_is_one_shard_of_itself(conn: redis.Redis) -> None:
    queue = Queue(conn, "plain")
    assert queue.shards == 1 and queue.shard_queues == [queue]
    assert queue.shard_of("JOB:1") == 0
    assert recorded_shards(conn, "plain") is None


# every op handled ---------------------------------------------------------------------------


def test_every_op_of_a_queue_is_handled() -> None:
    own = {**vars(ShardedControls), **vars(ShardedMethods)}
    unhandled = [name for name in ops_of(QueueMethods) if not isinstance(own.get(name), Op)]
    assert unhandled == []


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_has_no_meaning_over_shards_is_refused_by_name(conn: redis.Redis,
                                                           name: str) -> None:
    queue = Queue(conn, "q", shards=2)
    before = snapshot(conn)
    with pytest.raises(ShardError, match=name):
        getattr(queue, name)(*(("JOB:1", b"x") if name == "enqueue_after" else ()),
                             **({"after": ["JOB:2"]} if name == "enqueue_after" else {}))
    with pytest.raises(ShardError, match="dedupe"):
        queue.enqueue("JOB:1", b"x", dedupe="k")
    with pytest.raises(ShardError, match="set_limits"):
        queue.set_limits(concurrency=2)
    assert snapshot(conn) == before


# across shards, both wires, both shells, one server and a cluster ---------------------------

async def across_shards(queue: Any) -> None:
    """Enqueue, enqueue_many, admit once, cancel, outcome, counts, claims, pause and resume."""
    shards = queue.shards
    ids = [f"JOB:{n}" for n in range(40)]
    assert {queue.shard_of(job_id) for job_id in ids} == set(range(shards))
    assert await reply(queue.enqueue(ids[0], b"x")) is Verdict.ENQUEUED
    assert await reply(queue.enqueue(ids[0], b"other")) is Verdict.DUPLICATE
    verdicts = await reply(queue.enqueue_many([(job_id, b"x") for job_id in ids]))
    assert verdicts == [Verdict.DUPLICATE] + [Verdict.ENQUEUED] * 39
    assert await reply(queue.enqueue("JOB:late", b"x", delay_ms=60_000)) is Verdict.ENQUEUED
    lanes = queue.wire == 5  # lanes are scripts only
    if lanes:
        assert await reply(queue.enqueue("JOB:lane", b"x", lane="tenant-a")) is Verdict.ENQUEUED
        lane_shard = queue.shard_queues[queue.shard_of("JOB:lane", "tenant-a")]
        assert await reply(lane_shard.lane_depths()) == {"tenant-a": 1}
        assert await reply(queue.lane_depths()) == {"tenant-a": 1}
    for job_id in ids:  # each row on its id's shard
        shard = queue.shard_queues[queue.shard_of(job_id)]
        assert (await reply(shard.outcome(job_id))).state == "pending"
    counts = await reply(queue.counts())
    assert counts == {"pending": 40, "active": 0, "delayed": 1, "dead": 0, "lanes": int(lanes)}
    assert await reply(queue.cancel(ids[5])) is Verdict.CANCELLED
    if lanes:  # found off its id's shard
        assert queue.shard_of("JOB:lane") != queue.shard_of("JOB:lane", "tenant-a")
        assert await reply(queue.cancel("JOB:lane")) is Verdict.CANCELLED
        assert (await reply(queue.outcome("JOB:lane"))).state == "cancelled"
    assert (await reply(queue.outcome(ids[5]))).state == "cancelled"
    assert (await reply(queue.outcome("JOB:never"))).state == "unknown"
    await reply(queue.pause())
    assert all([await reply(shard.is_paused()) for shard in queue.shard_queues])
    assert await reply(queue.claim()) is None
    await reply(queue.resume())
    assert not await reply(queue.is_paused())
    leased = await reply(queue.claim_many(50, lease_ms=60_000))
    assert sorted(job.id for job in leased) == sorted(ids[:5] + ids[6:])
    acked, more = await reply(queue.settle([Ack(job) for job in leased]))
    assert acked == [Verdict.ACKED] * 39 and more == []
    assert await reply(queue.enqueue(ids[1], b"x")) is Verdict.DUPLICATE  # its tombstone
    assert await reply(queue.results(ids[:2])) == [None, None]
    assert (await reply(queue.counts()))["pending"] == 0


def shells(aio: bool) -> Callable[[Any, str, int, int], Any]:
    def made(client: Any, name: str, shards: int, wire: int) -> Any:
        return (AsyncQueue if aio else Queue)(client, name, shards=shards, wire=wire,
                                              check_policy=False)
    return made


@pytest.mark.parametrize("aio", [False, True], ids=["blocking", "asyncio"])
@pytest.mark.parametrize("wire", [5, 6])
def test_across_shards_on_one_server(valkey: EmbeddedValkey, conn: redis.Redis, wire: int,
                                     aio: bool) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(port=valkey.port) if aio else conn
        try:
            await across_shards(shells(aio)(client, "orders", 4, wire))
        finally:
            if aio:
                await client.aclose()

    asyncio.run(scenario())


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[EmbeddedValkey]]:
    with three_primaries() as made:
        yield made


def test_the_shards_spread_over_the_clusters_primaries(nodes: list[EmbeddedValkey]) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=nodes[0].port)
    try:
        queue = Queue(client, "spread", shards=12, check_policy=False)
        slots = {int(client.keyslot(shard.key("pending"))) for shard in queue.shard_queues}
        holders = Counter(owner(nodes, slot).port for slot in slots)
        # three equal runs of slots: four evenly spaced shards on each primary
        assert len(slots) == 12 and sorted(holders.values()) == [4, 4, 4]
        queue.enqueue_many([(f"JOB:{n}", b"x") for n in range(64)])
        assert sum(1 for node in nodes if node.client().dbsize() > 0) == 3
    finally:
        client.close()


@pytest.mark.parametrize("aio", [False, True], ids=["blocking", "asyncio"])
@pytest.mark.parametrize("wire", [5, 6])
def test_across_shards_through_a_cluster(nodes: list[EmbeddedValkey], wire: int,
                                         aio: bool) -> None:
    async def scenario() -> None:
        kind = redis.asyncio.cluster.RedisCluster if aio else redis.cluster.RedisCluster
        client = kind(host="127.0.0.1", port=nodes[0].port)
        try:
            if aio:
                await client.initialize()
            await across_shards(shells(aio)(client, f"orders-{wire}-{aio}", 6, wire))
            with pytest.raises(ShardError, match="recorded with 6"):
                await reply(shells(aio)(client, f"orders-{wire}-{aio}", 7, wire).counts())
        finally:
            await reply(client.aclose() if aio else client.close())

    asyncio.run(scenario())


def test_a_lane_lives_on_its_groups_shard_and_its_limits_stay_exact(conn: redis.Redis) -> None:
    queue = Queue(conn, "lanes", shards=4, check_policy=False)
    groups = ["tenant-a", "tenant-b", "t:9"]
    for group in groups:
        assert queue.enqueue_many([(f"JOB:{group}-{n}", b"x", group) for n in range(3)]) == [
            Verdict.ENQUEUED] * 3
    for group in groups:  # every key of a lane, and each of its jobs' rows, on one shard
        shard = queue.shard_queues[queue.shard_of("JOB:any", group)]
        assert shard.lane_depths()[group] == 3
        assert conn.exists(shard.key("job", f"JOB:{group}-0"))
    queue.set_lane("tenant-a", concurrency=1)
    assert queue.lane_settings("tenant-a")["concurrency"] == 1
    leased = [queue.claim_lane() for _ in range(9)]
    held = [job for job in leased if job is not None]
    assert sum(1 for job in held if job.lane == "tenant-a") == 1  # the limit, exact
    assert len(held) == 7
    settled, _ = queue.settle([Ack(job) for job in held])
    assert settled == [Verdict.ACKED] * 7
    assert queue.leased_by_lane() == {}
    assert queue.lane_depths() == {"tenant-a": 2}
    queue.pause("tenant-a")
    assert queue.paused() == (False, ["tenant-a"])
    assert queue.claim_lane() is None
    queue.resume("tenant-a")
    assert queue.claim_lane() is not None


def test_a_subclass_of_queue_is_not_sharded_behind_its_back(conn: redis.Redis) -> None:
    class Mine(Queue):
        pass

    with pytest.raises(ShardError, match="Mine cannot be sharded"):
        Mine(conn, "q", shards=4)
    assert isinstance(Queue(conn, "q", shards=4), Queue)
    assert conn.keys("*") == []  # made, nothing sent


def test_a_bad_item_of_enqueue_many_sends_nothing_to_any_shard(conn: redis.Redis) -> None:
    queue = Queue(conn, "q", shards=4, wire=6, check_policy=False)
    before = snapshot(conn)
    items = [(f"JOB:{n}", b"x") for n in range(20)]
    with pytest.raises(Wire6Unsupported):
        queue.enqueue_many([*items, ("JOB:lane", b"x", "tenant-a")])
    with pytest.raises(KindError):
        queue.enqueue_many([*items, ("bad id", b"x")])
    assert snapshot(conn) == before


def test_a_sharded_queues_row_layout_is_its_shards_as_one(conn: redis.Redis) -> None:
    # What a worker of the sharded queue reads at start: the latest layout a shard records, and
    # the earlier layout's rows any shard's head holds.
    queue = Queue(conn, "layouts", shards=2)
    first, second = queue.shard_queues
    assert queue.row_layout() == Layout(None)
    conn.set(first.key("layout"), "2")
    conn.zadd(second.key("pending"), {"JOB:old": 0})
    conn.hset(second.key("job", "JOB:old"), mapping={"payload": b"x", "attempts": "0"})
    assert queue.row_layout() == Layout(2, ("JOB:old",))
    conn.set(second.key("layout"), "3")  # a later release migrated one shard: none can be read
    assert not queue.row_layout().readable
