"""Queue-wide limits, case by case (echomq/conformance/cases/limits.py): the model agrees with
both executors (reply, and keyspace with its expiries) under RESP2 and RESP3; and, written out
here rather than taken from the model, what a few cases leave: the queue held, a wake token,
the window counted, its opening in ``throttled``."""

from __future__ import annotations

from typing import Any

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.common import NOW
from echomq.conformance.cases.limits import limit_cases
from echomq.conformance.harness import Pair
from echomq.conformance.model import normalise
from tests.conformance.conftest import Pairs
from tests.conformance.lockstep import model_agrees_under_each

BY_ID = {case.id: case for case in limit_cases()}
# The model keeps no paused queue (as tests/conformance/test_event_stream.py says).
CASES = [case for case in BY_ID.values() if "paused" not in case.label]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_model_agrees_with_both_executors(pairs: Pairs, case: Case) -> None:
    for expected in model_agrees_under_each(pairs, case).values():
        assert expected.startswith(case.expect) or case.expect == b"<null>"


def after(pair: Pair, case_id: str) -> dict[str, dict[bytes, Any]]:
    case = BY_ID[case_id]
    pair.reset(case.setup)
    outcomes = pair.run(case.transition, case.argv)
    return {name: {key.split(b"}:", 1)[1]: value[1]
                   for key, value in normalise(outcomes[name].after).items()}
            for name in ("lua", "native")}


@pytest.mark.parametrize("name", ["lua", "native"])
def test_a_claim_at_the_limit_holds_the_queue(pair: Pair, name: str) -> None:
    keys = after(pair, "claim:limits-concurrency-full")[name]
    assert (b"held", b"1") in keys[b"queueconf"]
    assert b"wake" not in keys


@pytest.mark.parametrize("name", ["lua", "native"])
def test_a_lease_leaving_a_held_queue_leaves_a_wake_token(pair: Pair, name: str) -> None:
    assert after(pair, "ack:limits-held-wakes")[name][b"wake"] == [b"1"]
    assert b"wake" not in after(pair, "ack:limits-not-held")[name]


@pytest.mark.parametrize("name", ["lua", "native"])
def test_over_its_rate_the_window_opening_waits_in_throttled(pair: Pair, name: str) -> None:
    keys = after(pair, "claim:limits-rate-over")[name]
    assert keys[b"throttled"] == [(b"*", float(NOW - 100 + 1000))]
    keys = after(pair, "settle:limits-rate-cut")[name]
    assert (b"window", b"%d 2" % NOW) in keys[b"queueconf"]
    assert keys[b"throttled"] == [(b"*", float(NOW + 1000))]
