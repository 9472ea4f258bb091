"""Scenario 4: Valkey Cluster. Three primaries on loopback, trafikey on each; 100 queues spread
over the shards; ``RedisCluster`` runs every transition through both executors (the module
declares the keys of EMQ.* for the server's redirects; echomq routes each call by its queue's slot,
tests/test_cluster_routing.py); a queue's slot moves while a
workload runs, the client following MOVED and ASK, losing no job; and a transition sent to a node
that lacks a job's row, on either side of a move, refuses alike on both executors rather than
drop the job as a ghost. See docs/CLUSTER.md."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import hiredis
import pytest
import redis
from redis.cluster import RedisCluster, key_slot

from echomq import Ack, Job, Queue, Verdict
from echomq.conformance.resp import RawConnection
from echomq.embedded import EmbeddedValkey
from echomq.engine.scripts import script_for
from echomq.engine.transitions import ALL_TRANSITIONS, ENQUEUE
from echomq.ops import admin
from tests.cluster import move_slot_by_hand
from tests.reliability.ledger import Ledger, assert_nothing_lost, reckon
from tests.reliability.servers import (
    Cluster,
    cli,
    cluster as fresh_cluster,
    server_version,
    wait_until,
)
from tests.reliability.test_crash_restart import run_every_transition
from tests.reliability.workload import Crew, Plan, drain


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
    read; a fresh client's parser sees the ``movablekeys`` flag and asks COMMAND GETKEYS (echomq
    spares it that: tests/test_cluster_routing.py)."""
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
            moved_by_hand = move_slot_by_hand(cluster.nodes, slot_of(names[0]), target, source)
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


# A slot in motion: its keys split between the source (MIGRATING) and the target (IMPORTING).
# The jobs' rows and the queue's other keys move at different times, and a transition that reaches
# a row the node does not hold must refuse with MOVING, never drop the job as a ghost.

MOVING = b"-TRYAGAIN a job's keys are moving between cluster nodes; try again\r\n"
# The server's own refusal of a call whose declared keys are not all on the node while the slot
# moves: the lane claim declares the queue's pause flag, which an unpaused queue never holds, so
# the server refuses it before the script runs (a TRYAGAIN all the same).
REHASHING = b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
ROW = b":job:"
NOW = 1_000_000  # every lease has run out and every delay is over by then
STATES = ("importing", "migrating")


def fill_every_key(rc: RedisCluster, name: str) -> Queue:
    """A queue with something in each of its keys: JOB:head at the head of pending, JOB:leased in
    active (its lease over by NOW), JOB:later in delayed, JOB:dead in dead, JOB:grouped in lane g.
    Built with wire=5 (lanes are scripts only)."""
    queue = Queue(rc, name, wire=5)
    for i, job_id in enumerate(("JOB:dead", "JOB:later", "JOB:leased", "JOB:head")):
        queue.enqueue(job_id, b"x", now=i + 1)
    queue.enqueue("JOB:grouped", b"x", lane="g", now=5)
    dead, later, leased = (queue.claim(lease_ms=1_000, now=10) for _ in range(3))
    assert dead is not None and later is not None and leased is not None
    assert queue.retry(dead, max_attempts=1, now=10) is Verdict.DEAD
    assert queue.retry(later, delay_ms=100, max_attempts=5, now=10) is Verdict.RETRYING
    return queue


def every_job_kept(queue: Queue) -> None:
    """Each job of fill_every_key is still where it was: every transition finds it (the lane's
    on wire=5, the only one with lanes)."""
    head = queue.claim(lease_ms=600_000, now=NOW)
    assert head is not None and head.id == "JOB:head"
    assert queue.recover(now=NOW) == 1
    assert queue.promote(now=NOW) == 1
    lane_job = Queue(queue.conn, queue.name, wire=5).claim_lane(lease_ms=600_000, now=NOW)
    assert lane_job is not None and lane_job.id == "JOB:grouped"
    assert admin.purge(queue.conn, queue.name) == 1


# JOB:leased's lease, the third claim of fill_every_key: its row is where the slot's rows are.
LEASED = Job("JOB:leased", b"x", 1, fence=3)
# The calls a moving slot must refuse; those of NATIVE_ACTIONS on both executors, the rest
# scripts only.
ACTIONS: dict[str, Callable[[Queue], object]] = {
    "claim": lambda queue: queue.claim(lease_ms=1_000, now=NOW),
    "claim_many": lambda queue: queue.claim_many(2, lease_ms=1_000, now=NOW),
    "settle": lambda queue: queue.settle([Ack(LEASED)], now=NOW),
    "extend_many": lambda queue: queue.extend_many([LEASED], now=NOW),
    "recover": lambda queue: queue.recover(now=NOW),
    "promote": lambda queue: queue.promote(now=NOW),
    "claim_lane": lambda queue: queue.claim_lane(lease_ms=1_000, now=NOW),
    "purge": lambda queue: admin.purge(queue.conn, queue.name),
}
NATIVE_ACTIONS = ("claim", "claim_many", "settle", "extend_many", "recover", "promote")


class Captured(Exception):
    """Carries the command a Queue call would have sent."""


class Capture:
    """Stands in for a client: what a Queue sends is raised as Captured, never sent."""

    def execute_command(self, *argv: Any, **_: Any) -> Any:
        raise Captured(argv)

    def exists(self, *names: Any) -> int:
        """An operator's call asks first whether the queue has an events stream: it has none."""
        return 0

    def get(self, name: Any) -> None:
        """An operator's call asks first whether the queue is recorded sharded: it is not."""
        return None


def command_of(name: str, wire: int, action: Callable[[Queue], object]) -> tuple[Any, ...]:
    """The command ``action`` sends through a ``wire`` Queue of ``name``: built by the Queue
    itself, so it follows the protocol whatever its keys and arguments are."""
    with pytest.raises(Captured) as sent:
        action(Queue(Capture(), name, wire=wire, check_policy=False))
    return tuple(sent.value.args[0])


def raw_reply(server: EmbeddedValkey, argv: tuple[Any, ...], *, asking: bool) -> bytes:
    """The exact bytes ``server`` answers ``argv`` with (after ASKING when ``asking``)."""
    with RawConnection(server.port) as conn:
        for transition in ALL_TRANSITIONS:
            conn.call("SCRIPT", "LOAD", script_for(transition).source)
        if asking:
            assert conn.call("ASKING") == b"+OK\r\n"
        return conn.call(*argv)


def keys_in_slot(server: EmbeddedValkey, slot: int) -> list[bytes]:
    with RawConnection(server.port) as conn:
        keys: list[bytes] = parsed(conn.call("CLUSTER", "GETKEYSINSLOT", slot, 100_000))
    return keys


def slot_contents(server: EmbeddedValkey, slot: int) -> dict[bytes, bytes]:
    """Each key of ``slot`` on ``server`` and its DUMP (ASKING first: the slot may be importing)."""
    contents = {}
    with RawConnection(server.port) as conn:
        for key in keys_in_slot(server, slot):
            conn.call("ASKING")
            contents[key] = conn.call("DUMP", key)
    return contents


def migrate(source: EmbeddedValkey, target: EmbeddedValkey, keys: list[bytes]) -> None:
    if keys:
        with RawConnection(source.port) as conn:
            reply = conn.call("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        assert reply == b"+OK\r\n", reply


@contextmanager
def slot_in_motion(cluster: Cluster, name: str, rows_first: bool,
                   first: Callable[[bytes], bool] = lambda key: ROW in key,
                   ) -> Iterator[tuple[EmbeddedValkey, EmbeddedValkey]]:
    """Opens the move of queue ``name``'s slot to another node (target IMPORTING, source
    MIGRATING) and moves part of its keys: those ``first`` picks (the jobs' rows) when
    ``rows_first``, else every other key. Yields (source, target); on exit the rest follows and
    every node learns the target serves the slot."""
    slot = slot_of(name)
    source = cluster.owner(slot)
    target = next(n for n in cluster.nodes if n is not source)
    with RawConnection(target.port) as dst, RawConnection(source.port) as src:
        assert dst.call("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source)) == b"+OK\r\n"
        assert src.call("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target)) == b"+OK\r\n"
    try:
        migrate(source, target, [key for key in keys_in_slot(source, slot)
                                 if first(key) == rows_first])
        yield source, target
    finally:
        migrate(source, target, keys_in_slot(source, slot))
        assign_slot(cluster, slot, target)


@pytest.mark.parametrize("state", STATES)
def test_moving_rows_refused_alike_by_both_executors(cluster: Cluster, rc: RedisCluster,
                                                     state: str) -> None:
    """Importing: every key but the rows has moved, and the calls go to the target after ASKING
    (as a client does after -ASK). Migrating: the rows have moved, and the calls go to the
    source. Either way each call reaches a row the node does not hold: both executors must
    answer MOVING, byte for byte, and leave both nodes as they were."""
    name = f"moving-{state}"
    queue = fill_every_key(rc, name)
    slot = slot_of(name)
    calls = [(verb, 5) for verb in ACTIONS] + [(verb, 6) for verb in NATIVE_ACTIONS]
    with slot_in_motion(cluster, name, rows_first=state == "migrating") as (source, target):
        node = target if state == "importing" else source
        before = [slot_contents(source, slot), slot_contents(target, slot)]
        replies = {(verb, wire): raw_reply(node, command_of(name, wire, ACTIONS[verb]),
                                           asking=state == "importing")
                   for verb, wire in calls}
        after = [slot_contents(source, slot), slot_contents(target, slot)]
    print(f"[moving rows, {state}] replies {set(replies.values())!r}")
    assert replies == {call: REHASHING if call == ("claim_lane", 5) else MOVING for call in calls}
    assert after == before, "a refused call changed a node"
    every_job_kept(queue)


def parked_lane_lease(rc: RedisCluster, name: str) -> Job:
    """A queue whose group g is parked at its limit (one lease held, a job left in its lane),
    group h in the ring, a flat job due in delayed and one pending; the lease of g's job."""
    queue = Queue(rc, name, wire=5)
    queue.set_lane("g", concurrency=1, now=1)
    for i, (job_id, lane) in enumerate((("JOB:g1", "g"), ("JOB:g2", "g"), ("JOB:h1", "h"))):
        queue.enqueue(job_id, b"x", lane=lane, now=i + 1)
    lease = queue.claim_lane(lease_ms=600_000, now=10)
    assert lease is not None and lease.id == "JOB:g1"
    assert rc.hget(f"emq:{{{name}}}:parked", "g") == b"1"
    queue.enqueue("JOB:later", b"x", now=11)
    later = queue.claim(lease_ms=600_000, now=12)
    assert later is not None
    assert queue.retry(later, delay_ms=10, max_attempts=5, now=12) is Verdict.RETRYING
    queue.enqueue("JOB:head", b"x", now=13)
    return lease


@pytest.mark.parametrize("state", STATES)
def test_moving_lane_keys_refused_alike_by_both_executors(cluster: Cluster, rc: RedisCluster,
                                                          state: str) -> None:
    """The lane bookkeeping's derived keys probed as a slot moves: the ack of a lease whose
    group is parked at its limit reads the group's lane (the group may come back to the ring),
    promote the groups over their rate (a key this queue never had). The lane has moved
    (migrating, calls to the source) or not yet (importing, calls to the target after ASKING):
    both executors answer MOVING and leave both nodes as they were; after the move the lease is
    acked and its group served again."""
    name = f"lanes-moving-{state}"
    lease = parked_lane_lease(rc, name)
    slot = slot_of(name)
    actions: dict[str, Callable[[Queue], object]] = {
        "ack": lambda queue: queue.ack(lease),
        "promote": lambda queue: queue.promote(now=NOW)}
    calls = [(verb, wire) for verb in actions for wire in (5, 6)]
    with slot_in_motion(cluster, name, rows_first=state == "migrating",
                        first=lambda key: key.endswith(b":lane:g")) as (source, target):
        node = target if state == "importing" else source
        before = [slot_contents(source, slot), slot_contents(target, slot)]
        replies = {(verb, wire): raw_reply(node, command_of(name, wire, actions[verb]),
                                           asking=state == "importing")
                   for verb, wire in calls}
        after = [slot_contents(source, slot), slot_contents(target, slot)]
    assert replies == dict.fromkeys(calls, MOVING), replies
    assert after == before, "a refused call changed a node"
    queue = Queue(rc, name, wire=6)
    assert queue.ack(lease) is Verdict.ACKED
    assert queue.promote(now=NOW) == 1
    served = [Queue(rc, name, wire=5).claim_lane(lease_ms=1_000, now=NOW) for _ in range(2)]
    assert sorted(job.id for job in served if job) == ["JOB:g2", "JOB:h1"]


def test_redirects_alike_by_both_executors(cluster: Cluster, rc: RedisCluster) -> None:
    """Every key of a queue has moved to the importing node: the source answers each call
    -ASK, and a node that serves neither side -MOVED to the source, byte for byte alike on both
    executors, before anything runs."""
    name = "redirects"
    fill_every_key(rc, name)
    slot = slot_of(name)
    calls = [(verb, 5) for verb in ACTIONS] + [(verb, 6) for verb in NATIVE_ACTIONS]
    with slot_in_motion(cluster, name, rows_first=True, first=lambda key: True) as (source,
                                                                                    target):
        stranger = next(n for n in cluster.nodes if n not in (source, target))
        asked = {call: raw_reply(source, command_of(name, call[1], ACTIONS[call[0]]),
                                 asking=False) for call in calls}
        moved = {call: raw_reply(stranger, command_of(name, call[1], ACTIONS[call[0]]),
                                 asking=False) for call in calls}
    ask = f"-ASK {slot} 127.0.0.1:{target.port}\r\n".encode()
    assert asked == dict.fromkeys(calls, ask), asked
    assert moved == dict.fromkeys(calls, f"-MOVED {slot} 127.0.0.1:{source.port}\r\n".encode())


@pytest.mark.parametrize("wire", [5, 6])
def test_importing_node_keeps_jobs_whose_rows_have_not_moved(cluster: Cluster, rc: RedisCluster,
                                                            wire: int) -> None:
    """Through RedisCluster, as an application runs: pending, active and delayed have moved to
    the target, the rows have not. The source answers -ASK, the client asks the target, which
    must not take the rows it lacks for ghosts; redis-py retries the refusal until it gives up,
    and once the slot has moved every job is still there."""
    name = f"importing{wire}"
    fill_every_key(rc, name)
    queue = Queue(rc, name, wire=wire)
    slot = slot_of(name)
    with slot_in_motion(cluster, name, rows_first=False) as (source, target):
        before = [slot_contents(source, slot), slot_contents(target, slot)]
        for verb in NATIVE_ACTIONS:
            with pytest.raises((redis.exceptions.ClusterError, redis.exceptions.TryAgainError)):
                ACTIONS[verb](queue)
        assert [slot_contents(source, slot), slot_contents(target, slot)] == before
    every_job_kept(queue)


@pytest.mark.parametrize("wire", [5, 6])
def test_pipeline_error_is_raised(wire: int) -> None:
    """ClusterPipeline.execute(raise_on_error=False) returns a ClusterError("TTL exhausted.")
    object when a slot keeps answering TRYAGAIN mid-migration; enqueue_many must raise it, not
    fail on Verdict("TTL exhausted.") with a ValueError."""
    from echomq.engine.executors import executor_for
    from echomq.engine.transitions import ENQUEUE

    error = redis.exceptions.ClusterError("TTL exhausted.")
    call = (ENQUEUE, ["emq:{q}:job:JOB:1", "emq:{q}:pending", "emq:{q}:wake"],
            ["JOB:1", b"p", "*"])
    with pytest.raises(redis.exceptions.ClusterError):
        Verdict.of(executor_for(wire)._settle(None, call, error))
