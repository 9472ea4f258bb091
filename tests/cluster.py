"""Valkey clusters on loopback for tests that need a real cluster client: three primaries, each an
``EmbeddedValkey`` with trafikey loaded (or all but one) and a third of the slots
(``three_primaries``), or the same
with a replica each, every node restartable (``three_primaries_with_replicas``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster

from echomq.embedded import EmbeddedValkey, join_cluster, start_on_a_free_port
from tests.reliability.servers import node as unstarted_node, node_id

SLOTS = 16384
FORMING_S = 30.0


@contextmanager
def three_primaries(bare: int | None = None) -> Iterator[list[EmbeddedValkey]]:
    """Three servers joined into one cluster, its slots split between them; stopped after.
    ``bare``: the index of one started without trafikey."""
    nodes: list[EmbeddedValkey] = []
    try:
        taken: set[int] = set()
        for index in range(3):
            # A port whose cluster bus port (10000 above) is a port too.
            nodes.append(start_on_a_free_port(partial(_cluster_node, index != bare), taken))
            taken.add(nodes[-1].port)
        join_cluster(nodes, FORMING_S)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _cluster_node(module: bool, port: int) -> EmbeddedValkey:
    """A cluster node on ``port``, not yet started; without trafikey unless ``module``."""
    return unstarted_node(port=port, config={"cluster-enabled": "yes",
                                             "cluster-config-file": "nodes.conf"},
                          **({} if module else {"module": False}))


def open_move(slot: int, source: EmbeddedValkey, target: EmbeddedValkey) -> None:
    """Starts moving ``slot`` (target IMPORTING, source MIGRATING) and migrates all its keys:
    the source then answers ASK for them, the target runs them after ASKING."""
    src, dst = source.client(), target.client()
    try:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    finally:
        src.close()
        dst.close()


def close_move(nodes: list[EmbeddedValkey], slot: int, target: EmbeddedValkey) -> None:
    """Ends a move: every node learns ``target`` serves ``slot``."""
    for server in nodes:
        client = server.client()
        try:
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", node_id(target))
        finally:
            client.close()


# Replicas in the cluster: a primary unanswered for this long is failed over to its replica (the
# election adds about a second), short enough for a test, long enough for a busy 2-core machine.
NODE_TIMEOUT_MS = 2_000
REPLICATED_CONFIG = {
    "cluster-enabled": "yes", "cluster-config-file": "nodes.conf",
    "cluster-node-timeout": str(NODE_TIMEOUT_MS),
    # Every replica stays with its own primary, so the shards are as the test made them.
    "cluster-allow-replica-migration": "no",
}


class ReplicatedCluster:
    """Three primaries with a replica each, trafikey loaded on all six, every node writing an
    append-only file into a directory of its own that outlives it, so a node stopped (``stop``)
    or killed (``kill``) starts again (``restart``) on the same port with the same config and
    ``nodes.conf``, and rejoins: as the primary it was, or as a replica of its replica promoted
    meanwhile."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.nodes: list[EmbeddedValkey] = []

    def start(self) -> ReplicatedCluster:
        taken: set[int] = set()
        for index in range(6):
            self.nodes.append(start_on_a_free_port(
                lambda port, index=index: unstarted_node(  # type: ignore[misc]
                    port=port, persist=True, config=REPLICATED_CONFIG,
                    directory=os.path.join(self.root, f"node{index}")), taken))
            taken.add(self.nodes[-1].port)
        primaries, replicas = self.nodes[:3], self.nodes[3:]
        share = SLOTS // 3
        for index, node in enumerate(primaries):
            last = SLOTS - 1 if index == 2 else (index + 1) * share - 1
            call(node, "CLUSTER", "ADDSLOTSRANGE", index * share, last)
        for node in self.nodes[1:]:
            call(node, "CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
        wait_for(lambda: all(cluster_info(n)["cluster_known_nodes"] == "6" for n in self.nodes),
                 "every node to know the other five")
        for primary, replica in zip(primaries, replicas, strict=True):
            primary_id = node_id(primary)
            # A replica takes its primary once gossip has told it of that node.
            wait_for(lambda r=replica, p=primary_id: _replicates(r, p),  # type: ignore[misc]
                     f"127.0.0.1:{replica.port} to take its primary")
        self.await_whole()
        return self

    def await_whole(self, timeout: float = FORMING_S) -> None:
        """Until every node is up and the cluster is whole again: cluster_state:ok on all six,
        three primaries with slots, each with one replica whose link is up (master_link_status)
        and every node agreeing on that."""
        wait_for(self.whole, "the cluster to be whole: 3 primaries, 3 replicas in sync",
                 timeout)

    def whole(self) -> bool:
        try:
            if not all(cluster_info(n)["cluster_state"] == "ok" for n in self.nodes):
                return False
            if not all(_shape_seen(n) for n in self.nodes):
                return False
            return all(replication(n).get("master_link_status") == "up" for n in self.replicas())
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False

    def primaries(self) -> list[EmbeddedValkey]:
        return [n for n in self.live() if replication(n)["role"] == "master"]

    def replicas(self) -> list[EmbeddedValkey]:
        return [n for n in self.live() if replication(n)["role"] == "slave"]

    def live(self) -> list[EmbeddedValkey]:
        return [n for n in self.nodes if n.process is not None]

    def replica_of(self, primary: EmbeddedValkey) -> EmbeddedValkey:
        """The node replicating ``primary``."""
        return next(n for n in self.replicas()
                    if replication(n).get("master_port") == str(primary.port))

    def owner(self, slot: int) -> EmbeddedValkey:
        """The primary serving ``slot``, as that primary itself says."""
        for node in self.primaries():
            for start, end, head, *_ in call(node, "CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end) and int(head[1]) == node.port:
                    return node
        raise LookupError(slot)

    def client(self, **options: Any) -> RedisCluster:
        """A cluster client that knows every node (any one may be down when it reconnects)."""
        return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in self.nodes],
                            **options)

    def restart(self, node: EmbeddedValkey) -> None:
        """Start ``node`` again on its port, its config and its directory (nodes.conf, AOF)."""
        node.start()

    def stop(self) -> None:
        """Kills every node (by its pid): what they hold is thrown away, and a primary killed
        does not wait for its replica as a stopped one would."""
        for node in self.nodes:
            node.kill()
            node.stop()  # no process left: only forgets it


@contextmanager
def three_primaries_with_replicas() -> Iterator[ReplicatedCluster]:
    """Three primaries with a replica each (``ReplicatedCluster``), all in sync; stopped and
    their directories removed after."""
    root = tempfile.mkdtemp(prefix="echomq-shards-")
    made = ReplicatedCluster(root)
    try:
        yield made.start()
    finally:
        made.stop()
        shutil.rmtree(root, ignore_errors=True)


def call(node: EmbeddedValkey, *argv: Any) -> Any:
    client = node.client(socket_timeout=5)
    try:
        return client.execute_command(*argv)
    finally:
        client.close()


def _fields(text: Any) -> dict[str, str]:
    text = text.decode() if isinstance(text, bytes) else str(text)
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def cluster_info(node: EmbeddedValkey) -> dict[str, str]:
    return _fields(call(node, "CLUSTER", "INFO"))


def replication(node: EmbeddedValkey) -> dict[str, str]:
    """``INFO replication`` of ``node`` as a dict (role, master_port, master_link_status…)."""
    client = node.client(socket_timeout=5)
    try:
        return {k: str(v) for k, v in client.info("replication").items()}
    finally:
        client.close()


def _replicates(replica: EmbeddedValkey, primary_id: str) -> bool:
    try:
        call(replica, "CLUSTER", "REPLICATE", primary_id)
    except redis.ResponseError:
        return False  # not known yet
    return True


def _shape_seen(node: EmbeddedValkey) -> bool:
    """``node`` sees three primaries serving slots and three replicas, none failing."""
    lines = _text(call(node, "CLUSTER", "NODES")).splitlines()
    primaries = [line for line in lines if "master" in line.split()[2]
                 and len(line.split()) > 8]
    replicas = [line for line in lines if "slave" in line.split()[2]]
    failing = [line for line in lines if "fail" in line.split()[2]]
    return len(primaries) == 3 and len(replicas) == 3 and not failing


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = FORMING_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def move_slot_by_hand(primaries: list[EmbeddedValkey], slot: int, source: EmbeddedValkey,
                      target: EmbeddedValkey, pause: float = 0.02) -> int:
    """CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE the slot's keys two at a time (pausing, so
    a workload runs between batches), then SETSLOT NODE on every primary (``primaries``; their
    replicas follow). Returns how many keys moved."""
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
        # The target first, then the source, then the rest (the order valkey-cli uses).
        for node in [target, source, *(n for n in primaries if n not in (source, target))]:
            call(node, "CLUSTER", "SETSLOT", slot, "NODE", node_id(target))
    finally:
        src.close()
        dst.close()
    return moved
