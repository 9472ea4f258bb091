"""cancel, case by case (echomq/conformance/cases/cancel.py): the model agrees with both
executors — reply, and keyspace with its expiries — under RESP2 and RESP3; and a flagged
lease's settlements, heartbeats and recover."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.cancel import cancel_cases
from echomq.conformance.harness import Pair
from echomq.conformance.model import Model, normalise
from echomq.embedded import EmbeddedValkey

# The model keeps no lane slots (leased, parked): a lane lease's end is the executors' alone
# (tests/conformance/test_transitions.py).
CASES = [case for case in cancel_cases() if "lane-lease" not in case.label]


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
    assert expected.startswith(case.expect)
