"""Random argument lists to every native command and its Lua twin, on a state holding jobs.

Whatever the list — numkeys of any shape, keys mixing the queue's and junk (the events key with
them, or after the right ones), binary, empty and huge strings, numbers at their edges — both
executors must send the same bytes, leave the same
keyspace (an error changes nothing), agree with the model (echomq/conformance/model/), and the
server must still answer PING afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from echomq.conformance.harness import Pair, assert_parity
from echomq.conformance.model import Model, normalise
from echomq.conformance.resp import RawConnection
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import TRANSITIONS, Transition

BASE = b"emq:{q}:"
NOW = 1_700_000_000_000
ROLES = [b"pending", b"active", b"delayed", b"dead", b"wake", b"ring", b"lane:a", b"fence",
         b"events"]
IDS = [b"JOB:1", b"JOB:2", b"JOB:3", b"JOB:4", b"JOB:5", b"JOB:6", b"JOB:ghost", b"JOB:new"]

# A queue with a job in every place: pending (and a ghost there), active (flat and lane),
# delayed (due and not), dead (with its waiters' token), an acked job's tombstone, a wake token,
# the fence counter, and an ended key of the wrong type (a leased job's: its retry and its death
# by recover are refused).
STATE: list[list[Any]] = [
    [b"HSET", BASE + b"job:JOB:1", b"p", b"one", b"a", b"0", b"t", NOW],
    [b"ZADD", BASE + b"pending", NOW, b"JOB:1"],
    [b"ZADD", BASE + b"pending", NOW - 5, b"JOB:ghost"],
    [b"HSET", BASE + b"job:JOB:2", b"p", b"", b"a", b"1", b"t", NOW,
     b"f", b"2"],
    [b"ZADD", BASE + b"active", NOW + 10, b"JOB:2"],
    [b"HSET", BASE + b"job:JOB:3", b"p", b"3", b"a", b"2", b"t", NOW,
     b"lane", b"a", b"f", b"1"],
    [b"ZADD", BASE + b"active", NOW - 10, b"JOB:3"],
    [b"HSET", BASE + b"job:JOB:4", b"p", b"4", b"a", b"1", b"t", NOW,
     b"error", b"e"],
    [b"ZADD", BASE + b"delayed", NOW, b"JOB:4"],
    [b"HSET", BASE + b"job:JOB:5", b"a", b"3", b"t", NOW, b"error", b"x"],
    [b"ZADD", BASE + b"dead", NOW, b"JOB:5"],
    [b"RPUSH", BASE + b"ended:JOB:5", b"1"],
    [b"SET", BASE + b"ended:JOB:3", b"x"],
    [b"HSET", BASE + b"job:JOB:6", b"a", b"1", b"t", NOW],
    [b"PEXPIRE", BASE + b"job:JOB:6", b"600000"],
    [b"RPUSH", BASE + b"wake", b"1"],
    [b"SET", BASE + b"fence", b"2"],
]

NUMBERS = [b"0", b"1", b"2", b"10", b"999999999999999", b"1000000000000000", b"000000000000001",
           b"0000000000000001", b"-1", b"-0", b"+1", b"1.5", b"1e3", b" 1", b"0x1", b"",
           b"\xd9\xa1", str(NOW).encode(), str(NOW + 20).encode(), b"9223372036854775808"]
JUNK_KEYS = [b"", b"pending", b"emq:{r}:pending", b"emq:{q}:job:", b"emq:{q}:", b"job:JOB:1",
             b"x" * 300]
NUMKEYS = st.one_of(
    st.sampled_from([b"0", b"1", b"2", b"3", b"4", b"5", b"-1", b"-0", b"01", b"+2", b"2 ",
                     b"x", b"", b"9223372036854775807", b"9223372036854775808"]),
    st.integers(-(10**20), 10**20).map(lambda n: str(n).encode()),
)
VALID_KEYS = [BASE + role for role in ROLES] + [BASE + b"job:" + job_id for job_id in IDS]
KEYS = st.lists(st.one_of(st.sampled_from(VALID_KEYS), st.sampled_from(JUNK_KEYS),
                          st.binary(max_size=24)), max_size=6)
ARGS = st.lists(
    st.one_of(st.sampled_from(NUMBERS), st.sampled_from(IDS), st.binary(max_size=24),
              st.sampled_from([b"JOB:" + b"a" * 200, b"JOB:" + b"a" * 201, b"\x00" * 64,
                               b"9" * 100_000, b"JOB:1\r\n", b"done", b"ack",
                               b"r" * 524_289])),
    max_size=8,
).filter(lambda args: b"*" not in args)  # the server clock would make the two runs differ

FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def pairs(valkey: EmbeddedValkey) -> Iterator[dict[int, Pair]]:
    """The executors under RESP2 and under RESP3: each example draws its protocol (120 argument
    lists a transition under one protocol or the other, where each ran under both before: most
    lists are refused, and a refusal's bytes are the same under both)."""
    made = {protocol: Pair(valkey.port, protocol) for protocol in (2, 3)}
    yield made
    for both in made.values():
        both.close()


@st.composite
def argvs(draw: st.DrawFn, transition: Transition) -> list[bytes]:
    """numkeys, keys and arguments; numkeys usually counts the keys, so deeper checks run."""
    keys = draw(KEYS)
    if draw(st.booleans()):  # the right roles in the right order, with some id
        job_id = draw(st.sampled_from(IDS))
        keys = [BASE + (b"job:" + job_id if role == "job" else role.encode())
                for role in transition.keys]
        if transition.events and draw(st.booleans()):  # declared: its events are appended
            keys.append(BASE + b"events")
    args = draw(ARGS)
    numkeys = str(len(keys)).encode() if draw(st.booleans()) else draw(NUMKEYS)
    return [numkeys, *keys, *args]


@pytest.mark.parametrize("transition", TRANSITIONS, ids=[t.name for t in TRANSITIONS])
@FUZZ
@given(data=st.data())
def test_random_arguments(pairs: dict[int, Pair], transition: Transition,
                          data: st.DataObject) -> None:
    pair = pairs[data.draw(st.sampled_from([2, 3]), label="protocol")]
    argv = data.draw(argvs(transition), label="argv")
    pair.reset(STATE)
    model = Model(pair.protocol)
    for command in STATE:
        model.apply_setup(command)
    expected = model.call(transition, argv)
    outcomes = pair.run(transition, argv)
    reply = assert_parity(outcomes, (transition.name, argv))
    assert reply == expected, f"server sent {reply!r}, the model {expected!r}"
    assert normalise(outcomes["native"].after) == model.render()
    for _, conn in pair.both():
        assert conn.call("PING") == b"+PONG\r\n"


@pytest.mark.parametrize("transition", TRANSITIONS, ids=[t.name for t in TRANSITIONS])
def test_no_arguments_is_the_servers_arity_error(valkey: EmbeddedValkey,
                                                 transition: Transition) -> None:
    assert transition.native is not None
    with RawConnection(valkey.port) as conn:
        reply = conn.call(transition.native)
        name = transition.native.lower().encode()
        assert reply == b"-ERR wrong number of arguments for '" + name + b"' command\r\n"
        assert conn.call("EVALSHA") == b"-ERR wrong number of arguments for 'evalsha' command\r\n"
        assert conn.call("PING") == b"+PONG\r\n"
