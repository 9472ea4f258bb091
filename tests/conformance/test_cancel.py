"""cancel, case by case (echomq/conformance/cases/cancel.py): the model agrees with both
executors — reply, and keyspace with its expiries — under RESP2 and RESP3; and a flagged
lease's settlements, heartbeats and recover."""

from __future__ import annotations

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.cancel import cancel_cases
from tests.conformance.conftest import Pairs
from tests.conformance.lockstep import model_agrees_under_each

# The model keeps no lane slots (leased, parked): a lane lease's end is the executors' alone
# (tests/conformance/test_transitions.py).
CASES = [case for case in cancel_cases() if "lane-lease" not in case.label]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_model_agrees_with_both_executors(pairs: Pairs, case: Case) -> None:
    for expected in model_agrees_under_each(pairs, case).values():
        assert expected.startswith(case.expect)
