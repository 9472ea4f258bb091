"""The events stream, case by case (echomq/conformance/cases/events.py): each call declaring
``<base>events`` appends what the model says, in order, under RESP2 and RESP3, on both executors
(ids compared by their order: they carry the server's clock; each case under the protocols
``under_each_protocol`` gives it); a refusal, a duplicate, a stale or
replayed settlement append nothing. The model does not trim (MAXLEN ~ trims whole nodes), so the
trim is checked on the two executors alone."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.events import EVENTS, evented
from echomq.conformance.harness import BY_NAME, Pair, assert_parity
from echomq.conformance.model import Model, normalise
from echomq.conformance.resp import parse
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import EVENTS_MAXLEN
from tests.conformance.conftest import Pairs, under_each_protocol
from tests.conformance.table import TABLE

EVENTS_KEY = EVENTS.encode()
# The model keeps no lane slots (leased, parked) and no paused queue: a lane lease's end, the lane
# bookkeeping's refusals and a paused claim are the executors' alone (test_transitions.py compares
# them).
NOT_MODELLED = ("lane", "paused")


def _modelled(case: Case) -> bool:
    """The case's setup and call are ones the model runs (an explicit clock, known commands)."""
    if any(word in case.label for word in NOT_MODELLED):
        return False
    model = Model(2)
    try:
        for command in case.setup:
            model.apply_setup(command)
        model.call(case.transition, case.argv)
    except ValueError:
        return False
    return True


CASES = [case for case in TABLE
         if case.label.startswith(("evented-", "events-")) and _modelled(case)]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_stream_is_the_models(pairs: Pairs, case: Case) -> None:
    under_each_protocol(pairs, case, lambda pair: stream_is_the_models(pair, case))


def stream_is_the_models(pair: Pair, case: Case) -> None:
    pair.reset(case.setup)
    model = Model(pair.protocol)
    for command in case.setup:
        model.apply_setup(command)
    before = len(_entries(model.render().get(EVENTS_KEY)))
    expected = model.call(case.transition, case.argv)
    outcomes = pair.run(case.transition, case.argv)
    stream = model.render().get(EVENTS_KEY)
    for name in ("lua", "native"):
        assert outcomes[name].reply == expected, name
        assert normalise(outcomes[name].after).get(EVENTS_KEY) == stream, name
    kinds = {entry[1].decode() for entry in _entries(stream)[before:]}
    assert kinds <= set(case.transition.events), kinds  # the row names every kind it appends


def _entries(value: tuple[Any, ...] | None) -> list[tuple[bytes, ...]]:
    return [] if value is None else list(value[1])


def test_every_transition_with_events_appends_on_its_good_call() -> None:
    appended = {case.transition.name for case in CASES if case.label == "evented-good"}
    assert appended == {t.name for t in BY_NAME.values() if t.events}


def _xlen_and_entries(pair: Pair, executor: str) -> tuple[int, list[Any]]:
    key = pair.scratch.prefix(executor) + EVENTS_KEY
    length = int(parse(pair.inspect.call("XLEN", key)))
    return length, parse(pair.inspect.call("XRANGE", key, "-", "+"))


def test_a_full_stream_is_trimmed_alike(pair: Pair) -> None:
    """10,150 entries, then one evented enqueue: both executors trim the same whole nodes (the
    same entries, ids included, are left) and keep at least EVENTS_MAXLEN."""
    setup = [["XADD", EVENTS, f"1-{i}", "kind", "old"] for i in range(1, EVENTS_MAXLEN + 151)]
    pair.reset(setup)
    good = evented([3, "emq:{q}:job:JOB:1", "emq:{q}:pending", "emq:{q}:wake", "JOB:1", b"p",
                    1_700_000_000_000])
    assert_parity(pair.run(BY_NAME["enqueue"], good), "trim")
    lua, native = _xlen_and_entries(pair, "lua"), _xlen_and_entries(pair, "native")
    assert EVENTS_MAXLEN <= lua[0] <= EVENTS_MAXLEN + 150
    assert lua[0] < EVENTS_MAXLEN + 151  # something was trimmed
    assert lua[0] == native[0]
    assert [entry[0] for entry in lua[1][:-1]] == [entry[0] for entry in native[1][:-1]]


def _filled(count: int) -> list[list[Any]]:
    return [["XADD", EVENTS, f"1-{i}", "kind", "old"] for i in range(1, count + 1)]


@pytest.mark.parametrize("node_entries", [0, 100], ids=["node-entries-0", "node-entries-100"])
def test_a_stream_far_over_the_cap_is_trimmed_alike(pair: Pair, valkey: EmbeddedValkey,
                                                    node_entries: int) -> None:
    """25,000 entries (written behind the queue's back), then one evented enqueue: the trim has
    more than 10,000 entries to remove, so XADD's cap on its work decides where it stops. With
    ``stream-node-max-entries 0`` that cap is 10,000 entries for XADD and none for the module
    API's trim: both executors must stop where XADD stops."""
    admin = valkey.client()
    previous = admin.config_get("stream-node-max-entries")["stream-node-max-entries"]
    admin.config_set("stream-node-max-entries", node_entries)
    try:
        pair.reset(_filled(2 * EVENTS_MAXLEN + 5_000))
        good = evented([3, "emq:{q}:job:JOB:1", "emq:{q}:pending", "emq:{q}:wake", "JOB:1", b"p",
                        1_700_000_000_000])
        assert_parity(pair.run(BY_NAME["enqueue"], good), "trim")
        lua, native = _xlen_and_entries(pair, "lua"), _xlen_and_entries(pair, "native")
        assert EVENTS_MAXLEN <= lua[0] < 2 * EVENTS_MAXLEN + 5_001  # something was trimmed
        assert lua[0] == native[0]
        assert [entry[0] for entry in lua[1][:-1]] == [entry[0] for entry in native[1][:-1]]
    finally:
        admin.config_set("stream-node-max-entries", previous)
        admin.close()


def _blocked_clients(valkey: EmbeddedValkey) -> int:
    with valkey.client() as admin:
        return int(admin.info("clients")["blocked_clients"])


@pytest.mark.parametrize("existing", [False, True], ids=["absent-stream", "existing-stream"])
def test_an_evented_call_wakes_xread_block(pair: Pair, valkey: EmbeddedValkey,
                                           existing: bool) -> None:
    """A client blocked in ``XREAD BLOCK`` on the events key is served the entry as soon as an
    evented enqueue appends it, on both executors: the native command's append signals the key
    ready (the server does on creating the key, the module API when the call closes it), as the
    script's XADD does. The block is far longer than the wait allowed."""
    pair.reset(_filled(3) if existing else [])
    good = evented([3, "emq:{q}:job:JOB:1", "emq:{q}:pending", "emq:{q}:wake", "JOB:1", b"p",
                    1_700_000_000_000])
    before = _blocked_clients(valkey)
    readers = {name: valkey.client(socket_timeout=30) for name, _ in pair.both()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        reads = {name: pool.submit(reader.xread,
                                   {pair.scratch.prefix(name) + EVENTS_KEY: "$"}, block=20_000)
                 for name, reader in readers.items()}
        deadline = time.monotonic() + 10
        while _blocked_clients(valkey) < before + 2:
            assert time.monotonic() < deadline, "the readers never blocked"
            time.sleep(0.01)
        started = time.monotonic()
        for outcome in pair.run(BY_NAME["enqueue"], good).values():
            assert outcome.reply == b"+ENQUEUED\r\n"
        for name, read in reads.items():
            served = read.result(timeout=10)
            assert time.monotonic() - started < 5, name
            [(key, entries)] = served
            assert key == pair.scratch.prefix(name) + EVENTS_KEY
            assert [fields[b"kind"] for _, fields in entries] == [b"enqueued"], name
    for reader in readers.values():
        reader.close()
