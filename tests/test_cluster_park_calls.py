"""The calls of a park over several slots of a cluster, one by one (see tests/test_cluster_parks.py
for the consumer as a whole): where CLIENT UNBLOCK is denied, a wake token ends the other calls;
a token a call pops alongside another call's counts in the park's answer; one popped after its
park ended goes back where it came from; a call that loses its connection ends the park with the
error (the run loop's back-off) and the next park opens a new connection. See docs/CLUSTER.md."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from echomq.consumer import aio_node_parks, blocking_parker, node_parks
from echomq.consumer.blocking_parker import Parker, hand_back
from echomq.consumer.node_parks import NodeParks, Round, park_groups
from echomq.consumer.shell import park_keys
from echomq.embedded import EmbeddedValkey
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_cluster_parks import (  # noqa: F401
    PROMPT_S,
    Pair,
    blocked,
    blpop_clients,
    nodes_fixture,
    rc_fixture,
)
from tests.test_consumer import running, wait_until

PATIENCE_S = 20.0  # a park's patience with a call, in the test of the wake token
WAKE_S = 2.0  # the time a wake has there to reach the handler


@pytest.fixture
def unblock_denied(nodes: list[EmbeddedValkey]) -> Iterator[RedisCluster]:
    """A cluster client of a user who may do anything but CLIENT UNBLOCK."""
    for node in nodes:
        admin = node.client()
        try:
            admin.execute_command("ACL", "SETUSER", "parker", "on", ">secret", "~*", "&*",
                                  "+@all", "-client|unblock")
        finally:
            admin.close()
    client = RedisCluster(host="127.0.0.1", port=nodes[0].port, username="parker",
                          password="secret")
    try:
        yield client
    finally:
        client.close()
        for node in nodes:
            admin = node.client()
            try:
                admin.execute_command("ACL", "DELUSER", "parker")
            finally:
                admin.close()


def test_where_client_unblock_is_denied_a_wake_token_ends_the_other_calls(
        nodes: list[EmbeddedValkey], unblock_denied: RedisCluster, make: Make,
        shell: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wake on the first queue's node ends the park: the second node's call, which CLIENT
    UNBLOCK may not end, is ended by a wake token on its queue, so the park ends at once and
    the next park leaves one call blocked there, not two; a stop ends every call the same
    way. The park's patience with a call is made long, so that a park that waited for the
    other call would miss the wait below by far, whatever the machine's load."""
    for module in (node_parks, blocking_parker, aio_node_parks):
        monkeypatch.setattr(module, "UNBLOCK_PATIENCE_S", PATIENCE_S)
    pair = Pair(nodes, unblock_denied, f"denied-{shell}", 5)
    handled = threading.Event()
    consumer = make(pair.queues, lambda job: handled.set(), park_cap_ms=30_000,
                    announce=False)
    with running(consumer, stop_within=PROMPT_S):
        assert pair.parked()
        pair.queues[0].enqueue("JOB:denied", b"x")
        # Far sooner than the park's patience, or than the other call's own timeout (seconds):
        # the other call was ended, not waited for.
        assert handled.wait(WAKE_S)
        assert pair.parked()
        assert wait_until(lambda: blocked(pair.homes[1]) == 1)
    assert wait_until(lambda: not any(blpop_clients(node) for node in nodes), PROMPT_S)



def test_a_token_popped_with_another_counts_in_the_parks_answer(
        nodes: list[EmbeddedValkey], rc: RedisCluster) -> None:
    """A watch token waits on the first queue's node and a wake token on the second's: both
    calls pop theirs at once, and whichever answers first, the park's answer is a wake (a
    sibling's token is never dropped). Repeated, so a park that kept only the first answer
    would show a watch."""
    pair = Pair(nodes, rc, "sibling", 5)
    first, second = pair.queues
    parker = Parker(pair.queues, 30_000)
    try:
        parker.bind()
        for _ in range(20):
            rc.rpush(first.key("watch"), 1)
            rc.rpush(second.key("wake"), 1)
            assert parker.park(5.0, threading.Event()) == "wake"
            assert rc.llen(first.key("watch")) == rc.llen(second.key("wake")) == 0
    finally:
        parker.close()


def test_a_token_popped_after_its_park_ended_goes_back_where_it_came_from(
        nodes: list[EmbeddedValkey], rc: RedisCluster) -> None:
    """A call that answers once its park has ended (it outlived the park's patience) pushes
    the token it popped back to its key, for the next park to find."""
    pair = Pair(nodes, rc, "late", 5)
    groups = park_groups(rc, park_keys(pair.queues))
    assert len(groups) == 2
    parks = NodeParks(rc, None, wake=lambda key: None,
                      push=lambda kind, key: hand_back(pair.queues[0], kind, key))
    try:
        round_ = Round([parks._line(group) for group in groups], groups)
        round_.close()  # the park ended without this call's answer
        wake = pair.queues[1].key("wake")
        rc.rpush(wake, 1)
        parks._call(round_, 1, 5.0, threading.Event())
        assert rc.llen(wake) == 1
        assert round_.answers.empty()
    finally:
        parks.close()
        rc.delete(pair.queues[1].key("wake"))


def test_a_node_s_connection_error_is_raised_for_the_run_loops_back_off(
        nodes: list[EmbeddedValkey], rc: RedisCluster) -> None:
    """A call that loses its connection ends the park by raising it (the run loop backs off,
    as after a single server's lost park), and the next park opens a new connection."""
    pair = Pair(nodes, rc, "lost", 5)
    parker = Parker(pair.queues, 30_000)
    outcome: list[Any] = []

    def park() -> None:
        try:
            outcome.append(parker.park(30.0, threading.Event()))
        except redis.ConnectionError as exc:
            outcome.append(exc)

    try:
        parker.bind()
        thread = threading.Thread(target=park, daemon=True)
        thread.start()
        assert pair.parked()
        victim = pair.homes[1].client()
        try:
            (line,) = [c for c in victim.client_list() if c.get("cmd") == "blpop"]
            victim.client_kill_filter(_id=line["id"])
        finally:
            victim.close()
        thread.join(PROMPT_S)
        assert not thread.is_alive()
        assert isinstance(outcome[0], redis.ConnectionError), outcome
        assert wait_until(lambda: not any(blpop_clients(node) for node in nodes), PROMPT_S)
        pair.queues[1].enqueue("JOB:after", b"x")  # the next park: a new line, and it wakes
        assert parker.park(5.0, threading.Event()) == "wake"
    finally:
        parker.close()
