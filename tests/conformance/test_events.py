"""Keyspace events: a native command fires, in order, the events its Lua twin's commands fire.

Every case of the batched transitions, of the lane bookkeeping, the dead jobs' bounds, the unique
enqueue and the join, and each transition's good call, runs on both executors with
``notify-keyspace-events`` on; the events on the scripts' scratch keys and on the native
command's must match event for event and key for key. A case the table refuses is left out: a
refusal writes nothing (the table checks that the keyspace is unchanged), so it fires no event on
either executor.
(``keymiss`` events differ by design: docs/PROTOCOL.md.) Changing the server's configuration is
why this stays out of ``echomq conformance``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from echomq.conformance.cases import Case
from echomq.conformance.cases.after import join_cases
from echomq.conformance.cases.dead import trim_dead_cases
from echomq.conformance.cases.events import EVENTS, evented
from echomq.conformance.cases.lanes import lane_cases
from echomq.conformance.cases.unique import unique_cases
from echomq.conformance.harness import BY_NAME, EXECUTORS, Pair
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import EVENTS_MAXLEN
from tests.conformance.table import TABLE

MARKER = "emq-events-done"
LANE_CASES = {case.id for case in lane_cases()}
DEAD_CASES = {case.id for case in trim_dead_cases()}
UNIQUE_CASES = {case.id for case in unique_cases()}
# The join: the end hook's writes on the dependents, the waiting set, pending, dead, ended keys.
JOIN_CASES = {case.id for case in join_cases()}
# The evented calls too: their XADD fires "xadd" (and "xtrim") in the same place on both.
CHOSEN = [case for case in TABLE
          if case.transition.items or case.label in ("good", "all-keys-other-queue", "evented-good")
          or case.label.startswith("events-")
          or case.id in LANE_CASES | DEAD_CASES | UNIQUE_CASES | JOIN_CASES]
CASES = [case for case in CHOSEN if not case.expect.startswith(b"-")]
# The premise, checked: a refusal of each kind (the first chosen case of each error code) fires
# nothing on either executor.
REFUSALS = list({case.expect.split(b" ", 1)[0]: case for case in reversed(CHOSEN)
                 if case.expect.startswith(b"-")}.values())
Events = list[tuple[bytes, bytes]]


@pytest.fixture(scope="module")
def watched(valkey: EmbeddedValkey) -> Iterator[tuple[Pair, redis.client.PubSub]]:
    admin = valkey.client()
    previous = admin.config_get("notify-keyspace-events")["notify-keyspace-events"]
    admin.config_set("notify-keyspace-events", "KEAn")
    pair = Pair(valkey.port, 2)
    pubsub = admin.pubsub()
    pubsub.psubscribe("__keyevent@0__:*")
    pubsub.subscribe(MARKER)
    try:
        yield pair, pubsub
    finally:
        pubsub.close()
        pair.close()
        admin.config_set("notify-keyspace-events", previous)
        admin.close()


def events_until_marker(admin: redis.Redis, pubsub: redis.client.PubSub,
                        pair: Pair) -> dict[str, Events]:
    """Every event on each executor's scratch keys delivered so far (keys without their scratch
    prefix): read until the marker published after them."""
    admin.publish(MARKER, "x")
    seen: dict[str, Events] = {name: [] for name in EXECUTORS}
    while True:
        message = pubsub.get_message(timeout=10)
        assert message is not None, "the marker never came"
        if message["type"] == "message" and message["channel"] == MARKER.encode():
            return seen
        if message["type"] == "pmessage":
            event = message["channel"].split(b":", 1)[1]
            key: bytes = message["data"]
            for name in EXECUTORS:
                if key.startswith(pair.scratch.prefix(name)):
                    seen[name].append((event, pair.scratch.canonical(name, key)))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_same_events(watched: tuple[Pair, redis.client.PubSub], valkey: EmbeddedValkey,
                     case: Case) -> None:
    pair, pubsub = watched
    admin = valkey.client()
    pair.reset(case.setup)
    events_until_marker(admin, pubsub, pair)  # the setup's own events
    outcome = pair.run(case.transition, case.argv)["lua"]
    seen = events_until_marker(admin, pubsub, pair)
    assert seen["native"] == seen["lua"]
    if outcome.after != outcome.before:  # the events were watched, not missed
        assert seen["lua"], case.id
    admin.close()


@pytest.mark.parametrize("case", REFUSALS, ids=[case.id for case in REFUSALS])
def test_a_refusal_fires_nothing(watched: tuple[Pair, redis.client.PubSub],
                                 valkey: EmbeddedValkey, case: Case) -> None:
    pair, pubsub = watched
    admin = valkey.client()
    pair.reset(case.setup)
    events_until_marker(admin, pubsub, pair)
    assert pair.run(case.transition, case.argv)["lua"].reply.startswith(b"-")
    assert events_until_marker(admin, pubsub, pair) == {name: [] for name in EXECUTORS}
    admin.close()


@pytest.mark.parametrize(("node_entries", "count"), [(100, EVENTS_MAXLEN + 150),
                                                     (0, 2 * EVENTS_MAXLEN + 5_000)],
                         ids=["module-trim", "server-trim"])
def test_a_trimming_append_fires_xadd_then_xtrim(watched: tuple[Pair, redis.client.PubSub],
                                                 valkey: EmbeddedValkey, node_entries: int,
                                                 count: int) -> None:
    """An evented enqueue onto a full stream: both executors fire "xadd" then "xtrim" on the events
    key, after the call's other events, as XADD fires them; whether the native command trims
    through the module API (up to 10,000 entries to remove) or the server's XTRIM (more, under
    ``stream-node-max-entries 0``)."""
    pair, pubsub = watched
    admin = valkey.client()
    previous = admin.config_get("stream-node-max-entries")["stream-node-max-entries"]
    admin.config_set("stream-node-max-entries", node_entries)
    try:
        pair.reset([["XADD", EVENTS, f"1-{i}", "kind", "old"] for i in range(1, count + 1)])
        events_until_marker(admin, pubsub, pair)
        good = evented([3, "emq:{q}:job:JOB:1", "emq:{q}:pending", "emq:{q}:wake", "JOB:1",
                        b"p", 1_700_000_000_000])
        pair.run(BY_NAME["enqueue"], good)
        seen = events_until_marker(admin, pubsub, pair)
        assert seen["native"] == seen["lua"]
        assert seen["lua"][-2:] == [(b"xadd", EVENTS.encode()), (b"xtrim", EVENTS.encode())]
    finally:
        admin.config_set("stream-node-max-entries", previous)
        admin.close()
