"""Invariant 7 for the events stream: a replica and an AOF reload without the trafikey module
hold the primary's streams entry for entry, ids included. Each executor's XADD is propagated as
the server propagates a script's: the id it generated and MAXLEN = the length left, so nothing is
generated again on the copy, and both executors' XADDs travel in the same form. Every evented
call of the case table's good ones, the calls of many changes, and two trims (a full stream; one
far over the cap under stream-node-max-entries 0) run on both executors, each in a scratch
namespace of its own."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hiredis
import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.events import EVENTS, evented
from echomq.conformance.harness import BY_NAME, Pair, Scratch, scan
from echomq.conformance.resp import RawConnection, parse
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import EVENTS_MAXLEN
from tests.conformance.table import TABLE
from tests.conftest import start_server
from tests.test_replication import digest, wait_for_link

NOW = 1_700_000_000_000
TRIM = "trim-a-full-stream"
# A stream far over the cap under stream-node-max-entries 0: the native trim is the server's XTRIM.
TRIM_FAR = "trim-far-over-the-cap"
FAR = 2 * EVENTS_MAXLEN + 5_000
FILL = "for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '1-' .. i, 'kind', 'old') end"


def evented_calls() -> list[Case]:
    """The good calls with the events key, the calls of many changes, and two trims."""
    cases = [case for case in TABLE
             if case.label == "evented-good" or (case.label.startswith("events-")
             and not case.expect.startswith(b"-"))]
    enqueue = evented([3, "emq:{q}:job:JOB:1", "emq:{q}:pending", "emq:{q}:wake", "JOB:1", b"p",
                       NOW])
    return [*cases, Case(BY_NAME["enqueue"], TRIM, enqueue, b"+ENQUEUED"),
            Case(BY_NAME["enqueue"], TRIM_FAR, enqueue, b"+ENQUEUED")]


def fill_stream(pair: Pair, count: int) -> None:
    """``count`` entries in each executor's stream, in one script call each."""
    for name, conn in pair.both():
        key = pair.scratch.prefix(name) + EVENTS.encode()
        pair.seen[name].add(key)
        reply = conn.call("EVAL", FILL, 1, key, count)
        assert not reply.startswith(b"-"), reply


def run_evented(port: int) -> None:
    """Each call on both executors, in a scratch namespace of its own (nothing deleted after)."""
    for n, case in enumerate(evented_calls()):
        pair = Pair(port, 2, Scratch(f"emqrepl-{n}"))
        try:
            node_entries = parse(pair.inspect.call("CONFIG", "GET", "stream-node-max-entries"))[1]
            pair.apply(case.setup)
            if case.label == TRIM:
                fill_stream(pair, EVENTS_MAXLEN + 150)
            if case.label == TRIM_FAR:
                pair.inspect.call("CONFIG", "SET", "stream-node-max-entries", "0")
                fill_stream(pair, FAR)
            for outcome in pair.run(case.transition, case.argv).values():
                assert outcome.reply.startswith(case.expect), (case.id, outcome.reply)
        finally:
            if case.label == TRIM_FAR:
                pair.inspect.call("CONFIG", "SET", "stream-node-max-entries", node_entries)
            for conn in (pair.lua, pair.native, pair.inspect):
                conn.close()


def streams(server: EmbeddedValkey) -> dict[bytes, Any]:
    """Every stream's entries, ids included."""
    with RawConnection(server.port) as conn:
        return {key: parse(conn.call("XRANGE", key, "-", "+")) for key in scan(conn)
                if parse(conn.call("TYPE", key)) == b"stream"}


def assert_same_streams(primary: EmbeddedValkey, copy: EmbeddedValkey) -> None:
    expected = streams(primary)
    assert len(expected) >= 2 * len(evented_calls()) - 2, "the calls left too few streams"
    trimmed = [key for key, entries in expected.items()
               if EVENTS_MAXLEN <= len(entries) < EVENTS_MAXLEN + 151]
    assert len(trimmed) == 2, "the full streams were not trimmed"
    far = [key for key, entries in expected.items()
           if EVENTS_MAXLEN + 151 <= len(entries) <= FAR]
    assert len(far) == 2, "the streams far over the cap were not trimmed"
    assert streams(copy) == expected
    assert digest(copy) == digest(primary)


@pytest.fixture(scope="module")
def primary() -> Iterator[EmbeddedValkey]:
    server = start_server()
    yield server
    server.stop()


def test_replica_holds_the_primary_streams_with_their_ids(primary: EmbeddedValkey) -> None:
    replica = start_server(module=False, config={"replicaof": f"127.0.0.1 {primary.port}"})
    client = primary.client()
    try:
        with replica.client() as link:
            wait_for_link(link)
        run_evented(primary.port)
        assert client.execute_command("WAIT", 1, 5000) >= 1
        assert_same_streams(primary, replica)
    finally:
        client.close()
        replica.stop()


def propagated_xadds(aof_dir: Path) -> dict[str, list[list[bytes]]]:
    """Each executor's XADDs of the events stream as the AOF holds them (the fills' own XADDs,
    which carry no MAXLEN, left out): scratch prefix dropped, the generated id masked."""
    reader = hiredis.Reader()
    for path in sorted(aof_dir.glob("*.incr.aof")):
        reader.feed(path.read_bytes())
    found: dict[str, list[list[bytes]]] = {"lua": [], "native": []}
    while (command := reader.gets()) is not False:
        if command[0].upper() != b"XADD" or command[2].upper() != b"MAXLEN":
            continue
        scratch, key = command[1][1:].split(b"}", 1)
        token, executor = scratch.rsplit(b"-", 1)
        found[executor.decode()].append([token, key, *command[2:5], b"<id>", *command[6:]])
    return found


def test_both_executors_propagate_the_same_xadd() -> None:
    """Each entry travels as the script's XADD is propagated: the generated id and
    MAXLEN = <the length left>, trimmed or not (the server rewrites an approximate trim so)."""
    aof = {"appendonly": "yes", "appenddirname": "aof", "appendfsync": "always"}
    source = start_server(config=aof)
    try:
        run_evented(source.port)
        found = propagated_xadds(Path(source.directory, "aof"))
    finally:
        source.stop()
    assert len(found["lua"]) >= len(evented_calls())
    assert found["native"] == found["lua"]
    assert {command[3] for command in found["lua"]} == {b"="}


def test_aof_loads_the_streams_without_module() -> None:
    aof = {"appendonly": "yes", "appenddirname": "aof", "appendfsync": "always"}
    source = start_server(config=aof)
    copy_dir = tempfile.mkdtemp(prefix="echomq-aof-")
    try:
        run_evented(source.port)
        shutil.copytree(Path(source.directory, "aof"), Path(copy_dir, "aof"))
        loaded = EmbeddedValkey(prefer="path", module=False, directory=copy_dir, config=aof)
        with loaded:
            assert_same_streams(source, loaded)
    finally:
        source.stop()
        shutil.rmtree(copy_dir, ignore_errors=True)
