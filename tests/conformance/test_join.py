"""Dependencies and the join, case by case (echomq/conformance/cases/after.py): the model agrees
with both executors — reply, and keyspace with its expiries — under RESP2 and RESP3.

Until trafikey has EMQ.ENQUEUE_AFTER, EMQ.AFTER and the end hook, run the script side alone:
ECHOMQ_CONFORMANCE_SCRIPTS_ONLY=enqueue_after,after,ack,ack_result,retry,settle,recover,cancel
(echomq.conformance.harness.SCRIPTS_ONLY)."""

from __future__ import annotations

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.after import join_cases
from echomq.conformance.harness import Pair
from tests.conformance.lockstep import model_agrees

CASES = join_cases()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_model_agrees_with_both_executors(pair: Pair, case: Case) -> None:
    expected = model_agrees(pair, case)
    assert expected.startswith(case.expect)
