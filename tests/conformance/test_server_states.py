"""Parity where the server, not the transition, decides: out of memory and read-only replicas.

These need a server in a state no one's production server should be put in, so they stay in the
suite and out of ``echomq conformance``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from echomq.conformance.cases import GOOD, READY
from echomq.conformance.cases.common import BASE, leased, settle
from echomq.conformance.harness import BY_NAME, Pair, assert_parity
from echomq.conformance.resp import Arg
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



ROW, ENDED = f"{BASE}job:JOB:1".encode(), f"{BASE}ended:JOB:1".encode()
ROW2, ENDED2 = f"{BASE}job:JOB:2".encode(), f"{BASE}ended:JOB:2".encode()
KEEPING: dict[str, tuple[list[Arg], bytes]] = {
    "ack_result": (GOOD["ack_result"], b"+ACKED\r\n"),
    # a result dropped, then an empty one (kept: it takes no room), nothing claimed
    "settle": (settle("done", "JOB:1", 1, b"r" * 1000, "done", "JOB:2", 1, b""),
               b"*2\r\n*2\r\n+ACKED\r\n+ACKED\r\n*0\r\n"),
}


def tombstone(before: tuple[Any, ...], **fields: bytes) -> tuple[Any, ...]:
    """The row ``before`` (a snapshot's leased row) as an ack leaves it: its payload gone,
    ``fields`` set, expiring."""
    kept = {name: value for name, value in before[1] if name != b"p"}
    kept.update({name.encode(): value for name, value in fields.items()})
    return (b"hash", sorted(kept.items()), True)


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("name", sorted(KEEPING))
def test_an_ack_on_a_full_server_keeps_the_outcome_without_the_result(
        full_server: EmbeddedValkey, name: str, protocol: int) -> None:
    """Over maxmemory, an ack that carries a result ends the job done and marks its tombstone
    result_dropped=memory instead of keeping the result; its ended token still wakes waiters.
    An empty result (a task keeping none) is kept. The same reply and keyspace on both."""
    transition = BY_NAME[name]
    argv, expect = KEEPING[name]
    pair = Pair(full_server.port, protocol)
    try:
        pair.reset(READY["ack_result"] + (leased("JOB:2") if name == "settle" else []))
        fill_memory(full_server.client())
        outcomes = pair.run(transition, argv)
        assert assert_parity(outcomes, transition) == expect
        before, after = outcomes["lua"].before, outcomes["lua"].after
        assert after[ROW] == tombstone(before[ROW], result_dropped=b"memory")
        assert after[ENDED] == (b"list", [b"1"], True)
        if name == "settle":
            assert after[ROW2] == tombstone(before[ROW2], result=b"")
            assert after[ENDED2] == (b"list", [b"1"], True)
    finally:
        full_server.client().config_set("maxmemory", "0")
        pair.close()
