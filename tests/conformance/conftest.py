"""The conformance tests' executors: one scratch namespace each for the Lua and the native executor
on the shared server, under RESP2 and under RESP3.

A case of the table runs under one protocol, and under the other too when its reply holds a null
(``under_each_protocol``). A null is the one thing a reply of either executor writes differently
under RESP2 and RESP3: errors, statuses, integers, strings and array headers are the same bytes
under both, and what a call writes never depends on the caller's protocol — no script calls
``redis.setresp``, no native command can learn the client's protocol or replies with a RESP3 type
(``test_transitions.py::test_no_executor_reads_the_callers_protocol``). The first protocol
alternates by the case's id, so each family meets both. ``pair`` (both protocols, a test each)
stays for the few tests that are not a run of the table.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.harness import Outcome, Pair
from echomq.conformance.resp import Arg
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import Transition

PROTOCOLS = (2, 3)
# A null under RESP2 (a bulk string's or an array's) and under RESP3.
NULLS = (b"$-1\r\n", b"*-1\r\n", b"_\r\n")
T = TypeVar("T")


class Recording(Pair):
    """A pair that keeps the outcomes of its last run."""

    last: dict[str, Outcome]

    def run(self, transition: Transition, argv: Sequence[Arg],
            scripts_only: bool = False) -> dict[str, Outcome]:
        self.last = super().run(transition, argv, scripts_only)
        return self.last


Pairs = dict[int, Recording]


def first_protocol(case: Case) -> int:
    return PROTOCOLS[zlib.crc32(case.id.encode()) % 2]


def holds_a_null(pair: Recording) -> bool:
    """Whether either executor's last reply may hold a null (a payload that looks like one
    counts too: the case then runs under both protocols, which costs a run, never a check)."""
    return any(null in outcome.reply for outcome in pair.last.values() for null in NULLS)


def under_each_protocol(pairs: Pairs, case: Case, check: Callable[[Recording], T]
                        ) -> dict[int, T]:
    """``check`` (which runs ``case`` on the pair it is given) under the case's first protocol,
    then under the other when a reply held a null: what each returned, by protocol."""
    first = first_protocol(case)
    pairs[first].last = {}
    done = {first: check(pairs[first])}
    if holds_a_null(pairs[first]):
        other = PROTOCOLS[1 - PROTOCOLS.index(first)]
        done[other] = check(pairs[other])
    return done


@pytest.fixture(scope="module")
def pairs(valkey: EmbeddedValkey) -> Iterator[Pairs]:
    made = {protocol: Recording(valkey.port, protocol) for protocol in PROTOCOLS}
    yield made
    for both in made.values():
        both.close()


@pytest.fixture(scope="module", params=PROTOCOLS, ids=["resp2", "resp3"])
def pair(request: pytest.FixtureRequest, valkey: EmbeddedValkey) -> Iterator[Pair]:
    both = Pair(valkey.port, request.param)
    yield both
    both.close()
