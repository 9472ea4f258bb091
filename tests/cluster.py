"""A Valkey cluster of three primaries on loopback, each an ``EmbeddedValkey`` with trafikey
loaded and a third of the slots, for tests that need a real cluster client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from echomq.embedded import EmbeddedValkey
from tests.conftest import start_server
from tests.reliability.servers import low_port, node_id

SLOTS = 16384
FORMING_S = 30.0


@contextmanager
def three_primaries() -> Iterator[list[EmbeddedValkey]]:
    """Three servers joined into one cluster, its slots split between them; stopped after."""
    nodes: list[EmbeddedValkey] = []
    try:
        taken: set[int] = set()
        for _ in range(3):
            # A port whose cluster bus port (10000 above) is a port too.
            taken.add(port := low_port(taken))
            nodes.append(start_server(port=port, config={"cluster-enabled": "yes",
                                                         "cluster-config-file": "nodes.conf"}))
        share = SLOTS // len(nodes)
        for index, node in enumerate(nodes):
            last = SLOTS - 1 if index == len(nodes) - 1 else (index + 1) * share - 1
            client = node.client()
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", index * share, last)
            if index:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
            client.close()
        _await_formed(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _await_formed(nodes: list[EmbeddedValkey]) -> None:
    """Until every node sees the cluster whole (state ok, all three known)."""
    deadline = time.monotonic() + FORMING_S
    for node in nodes:
        client = node.client()
        try:
            while True:
                info = client.execute_command("CLUSTER", "INFO")
                if b"cluster_state:ok" in info and b"cluster_known_nodes:3" in info:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the cluster did not form: {info!r}")
                time.sleep(0.05)
        finally:
            client.close()


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
