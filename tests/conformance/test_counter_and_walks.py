"""Parity the keyspace snapshot does not show: how the fence counter and a released dedupe key
are stored, and the order of a walk over a hash.

A lease takes the next fence by SET on the counter; the native lease must leave it as the
script's SET does (an integer encoding, the key kept rather than deleted and added again: its
events are compared by test_events.py), and a claim that leases nothing must leave it as it
was (the script reads it by GET; a direct read of the module turned it into a raw string). An
end hook that releases a dedupe key with a window reads it and sets its expiry: it keeps the
encoding the setup's SET gave it (embstr, where the key and value are short enough).
``lane_set *`` walks the parked groups; a hash's own
order depends on its encoding and on each server's hash seed, so the walk is in byte order of
the groups' names on any server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.conformance.cases import BASE, NOW, NULL, NULLS, Case, key
from echomq.conformance.cases.after import join_cases
from echomq.conformance.cases.lanes import fence_counter_cases
from echomq.conformance.harness import EXECUTORS, Pair, assert_parity
from echomq.conformance.resp import parse
from echomq.embedded import EmbeddedValkey
from echomq.engine.scripts import script_for
from echomq.engine.transitions import LANE_ENQUEUE, LANE_SET, REQUEUE, keys_for

FENCE_CASES = list(fence_counter_cases())
# The end hooks that keep a dedupe key (released with a window, or another job's), read by GET.
KEPT_DEDUPE_CASES = [case for case in join_cases()
                     if case.label in ("hook-dedupe-window", "hook-dedupe-taken",
                                       "hook-dead-dedupe")]
EMBSTR, RAW = b"$6\r\nembstr\r\n", b"$3\r\nraw\r\n"


@pytest.fixture(scope="module")
def pair(valkey: EmbeddedValkey) -> Iterator[Pair]:
    both = Pair(valkey.port, 2)
    yield both
    both.close()


@pytest.mark.parametrize("case", FENCE_CASES, ids=[case.id for case in FENCE_CASES])
def test_fence_counter_stored_as_the_scripts_store_it(pair: Pair, case: Case) -> None:
    pair.reset(case.setup)
    reply = assert_parity(pair.run(case.transition, case.argv), case.id)
    assert reply.startswith(NULLS[2] if case.expect == NULL else case.expect), reply
    encodings = {name: pair.inspect.call("OBJECT", "ENCODING",
                                         pair.scratch.prefix(name) + key("fence").encode())
                 for name in EXECUTORS}
    assert encodings["native"] == encodings["lua"] == b"$3\r\nint\r\n", encodings


@pytest.mark.parametrize("case", KEPT_DEDUPE_CASES, ids=[case.id for case in KEPT_DEDUPE_CASES])
def test_a_dedupe_key_kept_by_an_end_hook_keeps_its_encoding(pair: Pair, case: Case) -> None:
    pair.reset(case.setup)
    dedupe = next(command[1] for command in case.setup
                  if command[0] == "SET" and b"dedupe:" in str(command[1]).encode())

    def encodings() -> dict[str, bytes]:
        return {name: pair.inspect.call("OBJECT", "ENCODING",
                                        pair.scratch.prefix(name) + str(dedupe).encode())
                for name in EXECUTORS}

    # embstr or raw as SET stored it, by the size of key and value together on Valkey 8.1 (it
    # embeds the key; the scratch prefixes differ in length), embstr on 8.0: the hook keeps it.
    stored = encodings()
    assert set(stored.values()) <= {EMBSTR, RAW}, stored
    reply = assert_parity(pair.run(case.transition, case.argv), case.id)
    assert reply.startswith(case.expect), reply
    assert encodings() == stored


def parked_groups(names: list[str]) -> list[list[str]]:
    """Each group at its concurrency limit (the queue's default, 1), parked, its lane holding a
    job."""
    setup: list[list[str]] = [["HSET", key("laneconf"), "concurrency", "1"]]
    for group in names:
        setup += [["HSET", key("leased"), group, "1"], ["HSET", key("parked"), group, "1"],
                  ["RPUSH", key(f"lane:{group}"), f"JOB:{group}"]]
    return setup


def test_lane_set_walks_the_parked_groups_in_byte_order(pair: Pair) -> None:
    """200 parked groups (a hashtable-encoded hash) raised back by a new default: they join the
    ring in byte order of their names (not the hash's order, nor the locale's)."""
    names = [f"{prefix}{i}" for i in range(40) for prefix in ("a", "B", "-", "Z.", "9")]
    pair.reset(parked_groups(names))
    pair.lua.call("SCRIPT", "LOAD", script_for(LANE_SET).source)
    keys = keys_for(BASE, LANE_SET)
    argv = [len(keys), *keys, "*", "2", "=", "=", "=", NOW]
    assert assert_parity(pair.run(LANE_SET, argv, scripts_only=True)) == b"+OK\r\n"
    ring = parse(pair.inspect.call("LRANGE", pair.scratch.prefix("lua") + key("ring").encode(),
                                   "0", "-1"))
    assert ring == sorted(name.encode() for name in names)


def test_lane_job_never_lost_to_a_wrong_typed_parked(pair: Pair) -> None:
    """The script-only transitions that put a lane job in its lane read the parked groups: one
    of another type is refused before anything is written, never after the job left where it
    was."""
    dead_lane_job = [["HSET", key("job"), "p", "p", "a", "3", "lane", "a"],
                     ["ZADD", key("dead"), "5", "JOB:1"]]
    calls = [(REQUEUE, [5, *keys_for(BASE, REQUEUE, "JOB:1"), "JOB:1", NOW], dead_lane_job),
             (LANE_ENQUEUE, [4, *keys_for(BASE, LANE_ENQUEUE, "JOB:1", "a"), "JOB:1", "p", "a",
                             NOW], [])]
    for transition, argv, setup in calls:
        pair.lua.call("SCRIPT", "LOAD", script_for(transition).source)
        pair.reset([*setup, ["SET", key("parked"), "x"]])
        reply = assert_parity(pair.run(transition, argv, scripts_only=True), transition.name)
        assert reply.startswith(b"-WRONGTYPE "), (transition.name, reply)
