"""A script lost on a cluster is loaded again where the transition runs, whatever the cluster
client believes of its nodes' roles: redis-py 5.0.1 takes a primary for a replica after a MOVED
naming the node its slot map already gives the slot (two threads redirected for one slot at
once), and sends ``SCRIPT LOAD`` to the primaries only. echomq loads the script on every node
its slot map names as well (``echomq.engine.cluster_once.script_nodes``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import MovedError

from echomq import Queue
from echomq.embedded import EmbeddedValkey
from tests.cluster import three_primaries
from tests.reliability.servers import owner

NAME = "scripts"


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[EmbeddedValkey]]:
    with three_primaries() as made:
        yield made


def moved_again(rc: RedisCluster, slot: int, port: int) -> None:
    """The client meets a MOVED for ``slot`` naming the node its map already gives the slot, as
    the second of two threads redirected at once does."""
    error = MovedError(f"{slot} 127.0.0.1:{port}")
    manager = rc.nodes_manager
    if hasattr(manager, "update_moved_exception"):  # redis-py 5: applied at the next look-up
        manager.update_moved_exception(error)
        manager.get_node_from_slot(slot)
    else:
        manager.move_slot(error)


def test_a_script_flushed_everywhere_is_loaded_on_the_slots_node(
        nodes: list[EmbeddedValkey]) -> None:
    rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    try:
        queue = Queue(rc, NAME, wire=5)
        queue.enqueue("JOB:1", b"x")
        slot = int(key_slot(f"emq:{{{NAME}}}:pending".encode()))
        holder = owner(nodes, slot)
        moved_again(rc, slot, holder.port)
        moved_again(rc, slot, holder.port)
        for node in nodes:
            client = node.client()
            client.script_flush()
            client.close()
        queue.enqueue("JOB:2", b"x")
        assert queue.counts()["pending"] == 2
    finally:
        rc.flushall(target_nodes=RedisCluster.PRIMARIES)
        rc.close()
