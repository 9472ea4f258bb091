"""Keyspace events: a native command fires, in order, the events its Lua twin's commands fire.

Every case of the batched transitions, and each transition's good call, runs on both executors
with ``notify-keyspace-events`` on; the events of db 1 (scripts) and db 2 (native) must match
event for event and key for key. (``keymiss`` events differ by design: docs/PROTOCOL.md.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from echomq.embedded import EmbeddedValkey
from tests.conformance.cases import Case, all_cases
from tests.conformance.harness import NATIVE_DB, SCRIPT_DB, Pair

MARKER = "emq-events-done"
CASES = [case for case in all_cases()
         if case.transition.items or case.label in ("good", "all-keys-other-queue")]
Events = list[tuple[bytes, bytes]]


@pytest.fixture(scope="module")
def watched(valkey: EmbeddedValkey) -> Iterator[tuple[Pair, redis.client.PubSub]]:
    admin = valkey.client()
    previous = admin.config_get("notify-keyspace-events")["notify-keyspace-events"]
    admin.config_set("notify-keyspace-events", "KEA")
    pair = Pair(valkey.port, 2)
    pubsub = admin.pubsub()
    pubsub.psubscribe(f"__keyevent@{SCRIPT_DB}__:*", f"__keyevent@{NATIVE_DB}__:*")
    pubsub.subscribe(MARKER)
    try:
        yield pair, pubsub
    finally:
        pubsub.close()
        pair.close()
        admin.config_set("notify-keyspace-events", previous)
        admin.close()


def events_until_marker(admin: redis.Redis, pubsub: redis.client.PubSub) -> dict[int, Events]:
    """Every event delivered so far, per db: read until the marker published after them."""
    admin.publish(MARKER, "x")
    seen: dict[int, Events] = {SCRIPT_DB: [], NATIVE_DB: []}
    while True:
        message = pubsub.get_message(timeout=10)
        assert message is not None, "the marker never came"
        if message["type"] == "message" and message["channel"] == MARKER.encode():
            return seen
        if message["type"] == "pmessage":
            channel: bytes = message["channel"]
            db = int(channel.split(b"@")[1].split(b"__")[0])
            seen[db].append((channel.split(b":", 1)[1], message["data"]))


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_same_events(watched: tuple[Pair, redis.client.PubSub], valkey: EmbeddedValkey,
                     case: Case) -> None:
    pair, pubsub = watched
    admin = valkey.client()
    pair.reset(case.setup)
    events_until_marker(admin, pubsub)  # the setup's own events
    outcome = pair.run(case.transition, case.argv)["lua"]
    seen = events_until_marker(admin, pubsub)
    assert seen[NATIVE_DB] == seen[SCRIPT_DB]
    if outcome.after != outcome.before:  # the events were watched, not missed
        assert seen[SCRIPT_DB], case.id
    admin.close()
