"""Claim records, case by case (echomq/conformance/cases/records.py): the model agrees with both
executors — reply, and keyspace with its expiries — under RESP2 and RESP3; a record read keeps
its encoding on both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.conformance.cases import NULL, NULLS, Case
from echomq.conformance.cases.records import RECORD, record_cases
from echomq.conformance.harness import Pair
from echomq.conformance.model import Model, normalise
from echomq.embedded import EmbeddedValkey

# The model leaves a paused queue aside (lane_pause is scripts only): those cases are the
# executors' alone (tests/conformance/test_transitions.py).
CASES = [case for case in record_cases() if "paused" not in case.label]


@pytest.fixture(scope="module", params=[2, 3], ids=["resp2", "resp3"])
def pair(request: pytest.FixtureRequest, valkey: EmbeddedValkey) -> Iterator[Pair]:
    both = Pair(valkey.port, request.param)
    yield both
    both.close()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_model_agrees_with_both_executors(pair: Pair, case: Case) -> None:
    pair.reset(case.setup)
    model = Model(pair.protocol)
    for command in case.setup:
        model.apply_setup(command)
    expected = model.call(case.transition, case.argv)
    outcomes = pair.run(case.transition, case.argv)
    for name in ("lua", "native"):
        assert outcomes[name].reply == expected, name
        assert normalise(outcomes[name].after) == model.render(), name
    if case.expect == NULL:
        assert expected == NULLS[pair.protocol]
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
