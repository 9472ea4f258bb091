"""Parity where the server, not the transition, decides: out of memory and read-only replicas.

These need a server in a state no one's production server should be put in, so they stay in the
suite and out of ``echomq conformance``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from echomq.conformance.cases import GOOD, READY
from echomq.conformance.harness import Pair, assert_parity
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import TRANSITIONS, Transition
from tests.conftest import start_server


@pytest.fixture
def full_server() -> Iterator[EmbeddedValkey]:
    server = start_server(config={"maxmemory-policy": "noeviction"})
    yield server
    server.stop()


def fill_memory(conn: redis.Redis) -> None:
    """Set maxmemory to one byte, below anything the server uses however its use moves (reply
    buffers freed between the two executors' calls), so every admission is refused."""
    conn.config_set("maxmemory", "1")


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("transition", TRANSITIONS, ids=[t.name for t in TRANSITIONS])
def test_out_of_memory(full_server: EmbeddedValkey, transition: Transition, protocol: int) -> None:
    """A full server refuses enqueue alike on both executors, and lets every other transition
    run so the queue can drain."""
    pair = Pair(full_server.port, protocol)
    try:
        pair.reset(READY[transition.name])
        fill_memory(full_server.client())
        outcomes = pair.run(transition, GOOD[transition.name])
        reply = assert_parity(outcomes, transition)
        if transition.admits:
            assert reply.startswith(b"-OOM "), reply
        else:
            assert not reply.startswith(b"-"), reply
    finally:
        full_server.client().config_set("maxmemory", "0")
        pair.close()


def test_read_only_replica_refuses_alike(valkey: EmbeddedValkey) -> None:
    replica = start_server(refuse_data=False,  # it copies its primary, which earlier tests used
                           config={"replicaof": f"127.0.0.1 {valkey.port}"})
    try:
        pair = Pair(replica.port, 2)
        for transition in TRANSITIONS:
            lua = pair.lua.call(*pair.command("lua", transition, GOOD[transition.name]))
            native = pair.native.call(*pair.command("native", transition, GOOD[transition.name]))
            assert lua == native
            assert lua.startswith(b"-READONLY "), lua
        pair.close()
    finally:
        replica.stop()

