"""Dependencies and the join, case by case (echomq/conformance/cases/after.py): the model agrees
with both executors — reply, and keyspace with its expiries — under RESP2 and RESP3.

Until trafikey has EMQ.ENQUEUE_AFTER, EMQ.AFTER and the end hook, run the script side alone:
ECHOMQ_CONFORMANCE_SCRIPTS_ONLY=enqueue_after,after,ack,ack_result,retry,settle,recover,cancel
(echomq.conformance.harness.SCRIPTS_ONLY)."""

from __future__ import annotations

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.after import join_cases
from echomq.conformance.cases.common import BASE
from echomq.conformance.harness import Pair
from echomq.conformance.model import normalise
from tests.conformance.conftest import Pairs
from tests.conformance.lockstep import model_agrees_under_each

CASES = join_cases()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_model_agrees_with_both_executors(pairs: Pairs, case: Case) -> None:
    for expected in model_agrees_under_each(pairs, case).values():
        assert expected.startswith(case.expect)


def test_a_cancel_in_a_cycle_ends_each_job_once(pair: Pair) -> None:
    """A cancel that comes back to its own job through a cycle of dependents (raw AFTER with seal
    0 can make one) ends that job once: one event each, on both executors."""
    case = next(case for case in CASES if case.id == "cancel:hook-cycle")
    pair.reset(case.setup)
    outcomes = pair.run(case.transition, case.argv)
    for name in ("lua", "native"):
        events = normalise(outcomes[name].after)[BASE.encode() + b"events"][1]
        assert [(entry[1], entry[3]) for entry in events] == [
            (b"cancelled", b"JOB:1"), (b"cancelled", b"JOB:5")], name
