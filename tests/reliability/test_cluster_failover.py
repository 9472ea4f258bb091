"""Scenario 5: a cluster of three primaries with a replica each (``tests.cluster``), trafikey on all
six, under a producer per queue that never lets its queue empty and four ``echomq.Consumer``
threads, with a ledger of every enqueue, start and ack (``tests.reliability.flow``); queues on all
three primaries, on both wires. Each scenario also leaves one lease whose holder is gone (claimed,
never acked), so the recovery bound is measured every time. See docs/CLUSTER.md, "Failover and
restart".

1. A primary SIGKILLed: its replica takes over (and the killed node, started again, rejoins as
   its replica). Replication is asynchronous, so what echomq
   promises after a failover is what ``WAIT`` confirmed (docs/GUIDE.md, "failover"): every
   admission ``WAIT`` confirmed is acked in the end, and no job is acked under two leases unless
   every ack before the last was unconfirmed (an ack the replica never had is undone, and the job
   runs again: at least once). Unconfirmed admissions may be lost; the counts are printed.
2. A queue's slot moved by hand (``SETSLOT IMPORTING/MIGRATING`` + ``MIGRATE``) onto another
   replica-backed primary while jobs flow: nothing fails, so every admission the producers were
   told of is acked exactly once.
3. A primary stopped (SIGTERM) and started again on its port, config and directory: it writes its
   append-only file and waits for its replica before it exits, so again every admission told is
   acked exactly once; it rejoins as the primary, or as a replica if its replica took over
   meanwhile (the test takes either).

The recovery bound: a lease lost with the node (its deadline passed while the shard was down, or
its holder gone) is run again within ``lease_ms + housekeeping_ms`` of the cluster being ok again
(or of its deadline, if later), measured on the server's clock from the ledger's starts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster, key_slot

from echomq import Job, Queue
from echomq.embedded import EmbeddedValkey
from echomq.engine.server_time import server_ms
from tests.cluster import (
    ReplicatedCluster,
    call,
    cluster_info,
    move_slot_by_hand,
    replication,
    three_primaries_with_replicas,
    wait_for,
)
from tests.reliability.flow import (
    HOUSEKEEPING_MS,
    LEASE_MS,
    Flow,
    assert_held,
    lease_deadlines,
    make_queue,
    reruns_after,
    tally,
)
from tests.reliability.servers import server_version
from tests.reliability.workload import keep_trying

ALLOWANCE_MS = 750  # a loaded 2-core machine: thread wake-ups, the test's own polling
FLOWING = 60  # acks that show the workload runs, before and after each event
EVENT_S = 30.0


@pytest.fixture
def shards() -> Iterator[ReplicatedCluster]:
    with three_primaries_with_replicas() as made:
        yield made


def slot_of(name: str) -> int:
    return int(key_slot(f"emq:{{{name}}}:pending".encode()))


def one_name_per_primary(shards: ReplicatedCluster, stem: str) -> list[str]:
    """Three queue names, the i-th on the i-th primary the cluster was made with."""
    ranges = [(int(start), int(end), int(head[1]))
              for start, end, head, *_ in call(shards.nodes[0], "CLUSTER", "SLOTS")]
    names = []
    for primary in shards.nodes[:3]:
        names.append(next(name for name in (f"{stem}-{i}" for i in range(10_000))
                          if any(s <= slot_of(name) <= e and port == primary.port
                                 for s, e, port in ranges)))
    return names


def orphan_lease(flow: Flow, rc: RedisCluster, queue: Queue) -> Job:
    """A lease on ``queue`` whose holder is gone at once (claimed, never acked): on the replica
    too, confirmed by WAIT when the flow confirms."""
    holder = make_queue(rc, queue.name, queue.wire)
    job = keep_trying(lambda: holder.claim(lease_ms=LEASE_MS), flow.ledger, "claim",
                      flow.deadline)
    assert job is not None
    if flow.confirmer is not None:
        wait_for(lambda: flow.confirmer.confirm(queue), "the orphan lease on the replica", 10)  # type: ignore[union-attr]
    return job


def assert_bound(flow: Flow, leases: dict[str, int], since_ms: int, ok_ms: int,
                 orphan: Job) -> int:
    """Each lease of ``leases`` (id → deadline) run again after ``since_ms`` was run again by
    ``max(deadline, ok_ms + lease_ms) + housekeeping_ms``; the orphan was run again. Returns the
    largest delay past ``ok_ms`` seen."""
    assert orphan.id in leases, "the orphan lease was not on the shard's primary"
    worst = 0
    for job_id, deadline in leases.items():
        reruns = reruns_after(flow, job_id, since_ms)
        if job_id == orphan.id:
            assert reruns, "the orphan lease was never run again"
        if reruns:
            bound = max(deadline, ok_ms + LEASE_MS) + HOUSEKEEPING_MS + ALLOWANCE_MS
            first = reruns[0].at_ms
            assert first <= bound, (f"{job_id} ran again {first - ok_ms} ms after the cluster "
                                    f"was ok (bound {bound - ok_ms} ms)")
            worst = max(worst, first - ok_ms)
    return worst


def leases_held(shards: ReplicatedCluster, queues: list[Queue]) -> dict[str, int]:
    """Every lease of ``queues`` (id → deadline), each read on its queue's primary: what an
    event may take down (the node's own) or let lapse (the others', while the cluster is
    down)."""
    leases: dict[str, int] = {}
    for queue in queues:
        on_owner = shards.owner(slot_of(queue.name)).client()
        try:
            leases.update(lease_deadlines(on_owner, queue))
        finally:
            on_owner.close()
    return leases


def live_state_ok(shards: ReplicatedCluster) -> bool:
    try:
        return all(cluster_info(node)["cluster_state"] == "ok" for node in shards.live())
    except Exception:
        return False


def promoted(node: EmbeddedValkey) -> bool:
    try:
        return replication(node)["role"] == "master"
    except Exception:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("wire", [5, 6])
def test_a_sigkilled_primary_is_replaced_by_its_replica_losing_nothing_confirmed(
        shards: ReplicatedCluster, wire: int) -> None:
    started = time.monotonic()
    rc = shards.client()
    names = one_name_per_primary(shards, f"kill{wire}")
    queues = [make_queue(rc, name, wire) for name in names]
    victim, witness = shards.nodes[0], shards.nodes[1]  # the witness stays up: the clock
    heir = shards.replica_of(victim)
    clock = witness.client()
    flow = Flow(rc, queues, clock, confirm=True).start()
    try:
        wait_for(flow.progress(FLOWING), "jobs flowing before the kill", EVENT_S)
        orphan = orphan_lease(flow, rc, queues[0])
        leases = leases_held(shards, queues)
        killed_ms = server_ms(clock)
        victim.kill()
        wait_for(lambda: promoted(heir) and live_state_ok(shards),
                 "the replica to take over and the cluster to be ok", EVENT_S)
        ok_ms = server_ms(clock)
        assert flow.confirmer is not None
        flow.confirmer.sole.add(heir.port)  # its primary is gone: it is the only copy
        wait_for(flow.progress(FLOWING), "jobs flowing after the failover", EVENT_S)
        flow.drain()
    finally:
        flow.halt(check=False)
        clock.close()
    result = tally(flow, f"failover wire={wire} valkey {server_version()}")
    assert_held(result)
    worst = assert_bound(flow, leases, killed_ms, ok_ms, orphan)
    rc.close()
    # Started again on its port and config, the killed node rejoins as its heir's replica.
    shards.restart(victim)
    shards.await_whole(EVENT_S)
    assert replication(victim)["master_port"] == str(heir.port)
    print(f"[failover wire={wire}] ok {ok_ms - killed_ms} ms after the kill; {len(leases)} "
          f"leases held at the kill, run again at most {worst} ms after ok; "
          f"{time.monotonic() - started:.1f}s")


@pytest.mark.slow
@pytest.mark.parametrize("wire", [5, 6])
def test_a_slot_moved_under_load_onto_a_replicated_primary_loses_nothing(
        shards: ReplicatedCluster, wire: int) -> None:
    started = time.monotonic()
    rc = shards.client()
    names = one_name_per_primary(shards, f"move{wire}")
    queues = [make_queue(rc, name, wire) for name in names]
    source, target = shards.nodes[0], shards.nodes[1]
    clock = shards.nodes[2].client()
    flow = Flow(rc, queues, clock, confirm=False).start()
    try:
        wait_for(flow.progress(FLOWING), "jobs flowing before the move", EVENT_S)
        orphan = orphan_lease(flow, rc, queues[0])
        leases = leases_held(shards, queues)
        moving_ms = server_ms(clock)
        moved = move_slot_by_hand(shards.nodes[:3], slot_of(names[0]), source, target)
        ok_ms = server_ms(clock)
        assert shards.owner(slot_of(names[0])) is target
        wait_for(flow.progress(FLOWING), "jobs flowing after the move", EVENT_S)
        flow.drain()
    finally:
        flow.halt(check=False)
        clock.close()
    result = tally(flow, f"slot move wire={wire} valkey {server_version()}")
    assert_held(result)
    assert not result.reacked_after_unconfirmed
    worst = assert_bound(flow, leases, moving_ms, ok_ms, orphan)
    rc.close()
    print(f"[slot move wire={wire}] {moved} keys in {ok_ms - moving_ms} ms; run again at most "
          f"{worst} ms after; {time.monotonic() - started:.1f}s")


@pytest.mark.slow
@pytest.mark.parametrize("wire", [5, 6])
def test_a_restarted_primary_rejoins_losing_nothing(shards: ReplicatedCluster,
                                                    wire: int) -> None:
    started = time.monotonic()
    rc = shards.client()
    names = one_name_per_primary(shards, f"restart{wire}")
    queues = [make_queue(rc, name, wire) for name in names]
    node = shards.nodes[0]
    clock = shards.nodes[1].client()
    flow = Flow(rc, queues, clock, confirm=False).start()
    try:
        wait_for(flow.progress(FLOWING), "jobs flowing before the restart", EVENT_S)
        orphan = orphan_lease(flow, rc, queues[0])
        leases = leases_held(shards, queues)
        stopped_ms = server_ms(clock)
        node.stop()
        shards.restart(node)
        shards.await_whole(EVENT_S)
        ok_ms = server_ms(clock)
        role = replication(node)["role"]
        wait_for(flow.progress(FLOWING), "jobs flowing after the restart", EVENT_S)
        flow.drain()
    finally:
        flow.halt(check=False)
        clock.close()
    result = tally(flow, f"restart wire={wire} valkey {server_version()}")
    assert_held(result)
    assert not result.reacked_after_unconfirmed
    worst = assert_bound(flow, leases, stopped_ms, ok_ms, orphan)
    rc.close()
    print(f"[restart wire={wire}] back as {role}, whole {ok_ms - stopped_ms} ms after the stop; "
          f"run again at most {worst} ms after; {time.monotonic() - started:.1f}s")
