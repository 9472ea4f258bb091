"""Scenario 4: Valkey Cluster. Three primaries on loopback, trafikey on each; 100 queues spread
over the shards; ``RedisCluster`` runs every transition through both executors (routing EMQ.* by
the key specs the module declares, through COMMAND GETKEYS); and a queue's slot moves while a
workload runs, the client following MOVED and ASK, losing no job. See docs/CLUSTER.md."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import hiredis
import pytest
import redis
from redis.cluster import RedisCluster, key_slot

from echomq import Queue, Verdict
from echomq.embedded import EmbeddedValkey
from echomq.scripts import script_for
from echomq.transitions import CLAIM, ENQUEUE
from tests.reliability.ledger import Ledger, assert_nothing_lost, reckon
from tests.reliability.servers import Cluster, cli, server_version, wait_until
from tests.reliability.servers import cluster as fresh_cluster
from tests.reliability.test_crash_restart import run_every_transition
from tests.reliability.workload import Crew, Plan, drain
from tests.resp import RawConnection


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    made = Cluster(3)
    try:
        yield made.start()
    finally:
        made.stop()


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[RedisCluster]:
    client = cluster.client()
    try:
        yield client
    finally:
        client.close()


def slot_of(name: str) -> int:
    return int(key_slot(f"emq:{{{name}}}:pending".encode()))


def test_native_commands_declare_their_keys(cluster: Cluster) -> None:
    """The module's key spec (keynum, like EVAL) is what COMMAND GETKEYS and cluster routing
    read; redis-py sees the ``movablekeys`` flag and asks COMMAND GETKEYS."""
    argv = ["EMQ.CLAIM", "2", "emq:{q}:pending", "emq:{q}:active", "1000", "*"]
    with RawConnection(cluster.nodes[0].port) as conn:
        keys = parsed(conn.call("COMMAND", "GETKEYS", *argv))
        (info,) = parsed(conn.call("COMMAND", "INFO", "emq.claim"))
    assert keys == [b"emq:{q}:pending", b"emq:{q}:active"]
    assert b"movablekeys" in info[2]
    rc = cluster.client()
    try:
        assert rc.commands_parser.get_keys(rc.get_default_node().redis_connection, *argv) == [
            "emq:{q}:pending", "emq:{q}:active"]
    finally:
        rc.close()


def parsed(raw: bytes) -> Any:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


def assign_slot(cluster: Cluster, slot: int, owner: EmbeddedValkey) -> None:
    """Tell every node that ``owner`` now serves ``slot`` (the end of a hand-made migration)."""
    for server in cluster.nodes:
        conn = server.client()
        try:
            conn.execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id(owner))
        finally:
            conn.close()


@pytest.mark.parametrize("wire", [5, 6])
def test_native_commands_are_redirected(cluster: Cluster, wire: int) -> None:
    """Sent to a node that does not serve the queue's slot, a transition must get -MOVED (as
    EVALSHA does) and write nothing there."""
    name = f"route{wire}"
    slot = slot_of(name)
    owner = cluster.owner(slot)
    stranger = next(n for n in cluster.nodes if n is not owner)
    base = f"emq:{{{name}}}:"
    argv = [3, f"{base}job:JOB:1", f"{base}pending", f"{base}wake", "JOB:1", "p", "*"]
    with RawConnection(stranger.port) as raw:
        raw.call("SCRIPT", "LOAD", script_for(ENQUEUE).source)
        head = ["EVALSHA", script_for(ENQUEUE).sha] if wire == 5 else ["EMQ.ENQUEUE"]
        reply = raw.call(*head, *argv)
        stray = raw.call("CLUSTER", "COUNTKEYSINSLOT", slot)
        if stray != b":0\r\n":  # clean up what a mis-routed command wrote
            raw.call("DEL", *argv[1:4])
    assert reply == f"-MOVED {slot} 127.0.0.1:{owner.port}\r\n".encode(), reply
    assert stray == b":0\r\n", "keys written into a slot this node does not serve"


def test_hundred_queues_spread_over_the_shards(cluster: Cluster, rc: RedisCluster) -> None:
    names = [f"spread{i}" for i in range(100)]
    for i, name in enumerate(names):
        queue = Queue(rc, name, wire=5 if i % 2 else 6)
        assert queue.enqueue_many([(f"JOB:{i}-a", b"a"), (f"JOB:{i}-b", b"b")]) == [
            Verdict.ENQUEUED] * 2
    owners: dict[int, int] = {}
    for i, name in enumerate(names):
        owner = cluster.owner(slot_of(name))
        owners[owner.port] = owners.get(owner.port, 0) + 1
        node = owner.client()
        try:  # the whole queue lives on its slot's node
            assert node.zcard(f"emq:{{{name}}}:pending") == 2
            assert node.exists(f"emq:{{{name}}}:job:JOB:{i}-a") == 1
        finally:
            node.close()
        queue = Queue(rc, name, wire=6 if i % 2 else 5)  # the other executor drains it
        for _ in range(2):
            job = queue.claim(lease_ms=60_000)
            assert job is not None and queue.ack(job) is Verdict.ACKED
        assert queue.claim() is None
    print(f"[cluster valkey {server_version()}] 100 queues over nodes: {sorted(owners.values())}")
    assert len(owners) >= 2


def test_every_transition_through_redis_cluster(rc: RedisCluster) -> None:
    for name in ("every-a", "every-b", "every-c", "every-d"):
        run_every_transition(rc, name)  # flat transitions on both wires, lanes on wire=5


def node_id(server: EmbeddedValkey) -> str:
    with RawConnection(server.port) as conn:
        reply = conn.call("CLUSTER", "MYID")
    return reply.split(b"\r\n")[1].decode()


def queues_at_the_head_of(source: EmbeddedValkey, count: int,
                          span: int = 64) -> tuple[list[str], int]:
    """Names of ``count`` queues whose slots are among the ``span`` lowest slots ``source``
    serves (valkey-cli's reshard takes a source's slots lowest first, so moving ``span`` slots
    moves these queues); and the lowest slot."""
    conn = source.client()
    try:
        ranges = [(int(r[0]), int(r[1])) for r in conn.execute_command("CLUSTER", "SLOTS")
                  if int(r[2][1]) == source.port]
    finally:
        conn.close()
    owned = sorted(slot for start, end in ranges for slot in range(start, end + 1))[:span]
    head = set(owned)
    names = [n for n in (f"rs{i}" for i in range(200_000)) if slot_of(n) in head][:count]
    assert len(names) == count
    return names, owned[0]


def move_slot_by_hand(cluster: Cluster, slot: int, source: EmbeddedValkey,
                      target: EmbeddedValkey, pause: float = 0.02) -> int:
    """CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE the slot's keys two at a time (pausing, so
    the workload runs between batches), then SETSLOT NODE everywhere. Returns keys moved."""
    src, dst = source.client(), target.client()
    moved = 0
    try:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
        for _ in range(100_000):
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 2)
            if not keys:
                break
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(pause)
        assign_slot(cluster, slot, target)
    finally:
        src.close()
        dst.close()
    return moved


@pytest.mark.slow
@pytest.mark.parametrize("wire", [
    5,
    6,
])
def test_reshard_under_load_loses_nothing(wire: int) -> None:
    started = time.monotonic()
    with fresh_cluster() as cluster:  # its own: a failed reshard leaves slots open
        reshard_under_load(cluster, wire, started)


def reshard_under_load(cluster: Cluster, wire: int, started: float) -> None:
    source, target = cluster.nodes[0 if wire == 6 else 1], cluster.nodes[2]
    names, first = queues_at_the_head_of(source, 3)
    queues = [Queue(cluster.client(), name, wire=wire) for name in names]
    ledger = Ledger()
    moved_by_hand = 0
    try:
        crew = Crew(Plan(queues, jobs=600, batch=4, lanes=wire == 5), ledger,
                    f"rs{wire}").start()
        try:
            wait_until(lambda: len(ledger.acks) >= 100, "progress before the reshard")
            # valkey-cli moves the first 64 slots of the source (our queues' slots among them),
            # two keys per MIGRATE so the workload runs between batches.
            cli("--cluster", "reshard", f"127.0.0.1:{source.port}",
                "--cluster-from", node_id(source), "--cluster-to", node_id(target),
                "--cluster-slots", "64", "--cluster-pipeline", "2", "--cluster-yes")
            assert all(cluster.owner(slot_of(n)) is target for n in names)
            # Then one queue's slot goes back, by hand.
            moved_by_hand = move_slot_by_hand(cluster, slot_of(names[0]), target, source)
            assert cluster.owner(slot_of(names[0])) is source
            crew.finish(timeout=90)
        finally:
            crew.halt()
        result = reckon(ledger, queues, f"reshard wire={wire} valkey {server_version()}")
        assert_nothing_lost(result)
        drain(queues, ledger, f"reshard wire={wire}, after drain")
        final = reckon(ledger, queues, f"reshard wire={wire} final")
        assert_nothing_lost(final)
        assert final.present == 0
    finally:
        for queue in queues:
            queue.conn.close()
    print(f"[reshard wire={wire}] slot {first}.. moved by valkey-cli, {moved_by_hand} keys moved "
          f"by hand, {time.monotonic() - started:.1f}s")


@pytest.mark.parametrize("wire", [5, 6])
def test_claim_mid_migration_keeps_the_job(cluster: Cluster, rc: RedisCluster,
                                                  wire: int) -> None:
    """Deterministic: the slot is MIGRATING, the head job's row has already moved, pending and
    active have not. Lua's redis.call on the moved row fails the script (nothing written); the
    native claim must not drop the job either."""
    name = f"mid{wire}"
    queue = Queue(rc, name, wire=wire)
    queue.enqueue("JOB:first", b"x", now=1)
    queue.enqueue("JOB:moved", b"x", now=2)
    assert queue.claim(lease_ms=600_000) is not None  # so that active exists
    slot = slot_of(name)
    source = cluster.owner(slot)
    target = next(n for n in cluster.nodes if n is not source)
    src, dst = source.client(), target.client()
    try:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS",
                            queue.key("job", "JOB:moved"))
        with RawConnection(source.port) as raw:
            raw.call("SCRIPT", "LOAD", script_for(CLAIM).source)
            argv = [3, queue.key("pending"), queue.key("active"), queue.key("fence"), 1000, "*"]
            reply = raw.call(*(["EVALSHA", script_for(CLAIM).sha] if wire == 5
                               else ["EMQ.CLAIM"]), *argv)
            pending = raw.call("ZRANGE", queue.key("pending"), 0, -1)
        print(f"[mid-migration wire={wire}] claim replied {reply[:60]!r}; pending {pending!r}")
        assert b"JOB:moved" in pending, "the job was dropped as a ghost: lost"
        assert reply == b"-TRYAGAIN a job's keys are moving between cluster nodes; try again\r\n"
    finally:
        # Finish the move so the cluster is stable for the next test.
        for key in src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", key)
        assign_slot(cluster, slot, target)
        src.close()
        dst.close()


@pytest.mark.parametrize("wire", [5, 6])
def test_pipeline_error_is_raised(wire: int) -> None:
    """ClusterPipeline.execute(raise_on_error=False) returns a ClusterError("TTL exhausted.")
    object when a slot keeps answering TRYAGAIN mid-migration; enqueue_many must raise it, not
    fail on Verdict("TTL exhausted.") with a ValueError."""
    from echomq.executors import executor_for
    from echomq.transitions import ENQUEUE

    error = redis.exceptions.ClusterError("TTL exhausted.")
    call = (ENQUEUE, ["emq:{q}:job:JOB:1", "emq:{q}:pending", "emq:{q}:wake"],
            ["JOB:1", b"p", "*"])
    with pytest.raises(redis.exceptions.ClusterError):
        Verdict.of(executor_for(wire)._settle(None, call, error))
