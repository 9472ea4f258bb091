"""Claim records, case by case (echomq/conformance/cases/records.py): the model agrees with both
executors — reply, and keyspace with its expiries — under RESP2 and RESP3; a record read keeps
its encoding on both."""

from __future__ import annotations

import pytest

from echomq.conformance.cases import NULL, NULLS, Case
from echomq.conformance.cases.records import RECORD, record_cases
from echomq.conformance.harness import Pair
from tests.conformance.conftest import Pairs
from tests.conformance.lockstep import model_agrees_under_each

# The model leaves a paused queue aside (lane_pause is scripts only): those cases are the
# executors' alone (tests/conformance/test_transitions.py).
CASES = [case for case in record_cases() if "paused" not in case.label]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_model_agrees_with_both_executors(pairs: Pairs, case: Case) -> None:
    for protocol, expected in model_agrees_under_each(pairs, case).items():
        if case.expect == NULL:
            assert expected == NULLS[protocol]
        else:
            assert expected.startswith(case.expect)


@pytest.mark.parametrize("case", [case for case in CASES if "answers" in case.label],
                         ids=lambda case: case.id)
def test_a_record_read_keeps_its_encoding(pair: Pair, case: Case) -> None:
    """A claim that finds its record reads it as the script does: a direct read of a short
    string would turn it from embstr to raw on the native side."""
    pair.reset(case.setup)
    pair.run(case.transition, case.argv)
    encodings = {name: pair.inspect.call("OBJECT", "ENCODING",
                                         pair.scratch.prefix(name) + RECORD.encode())
                 for name in ("lua", "native")}
    # embstr or raw by the size of key and value together (Valkey 8 embeds the key), which the
    # scratch prefix's length moves from run to run: the property is that both read alike.
    assert encodings["native"] == encodings["lua"], encodings
    assert encodings["lua"] in (b"$6\r\nembstr\r\n", b"$3\r\nraw\r\n"), encodings
