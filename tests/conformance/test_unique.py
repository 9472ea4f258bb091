"""The unique enqueue, case by case (echomq/conformance/cases/unique.py): the model agrees with
both executors — reply, and keyspace with its expiries — under RESP2 and RESP3."""

from __future__ import annotations

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.unique import unique_cases
from tests.conformance.conftest import Pairs
from tests.conformance.lockstep import model_agrees_under_each

CASES = list(unique_cases())


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_model_agrees_with_both_executors(pairs: Pairs, case: Case) -> None:
    for expected in model_agrees_under_each(pairs, case).values():
        assert expected.startswith(case.expect)
