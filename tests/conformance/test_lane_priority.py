"""Priority inside a lane on the transitions both executors run
(echomq/conformance/cases/lane_priority.py): the model agrees with both executors — reply, and
keyspace with its expiries — under RESP2 and RESP3, where it follows the case (no lane slots);
every case's executors agree with each other in tests/conformance/test_transitions.py."""

from __future__ import annotations

import pytest

from echomq.conformance.cases import Case, case_differences
from echomq.conformance.cases.lane_priority import lane_priority_cases, model_cases
from echomq.conformance.harness import Pair
from tests.conformance.conftest import Pairs, under_each_protocol
from tests.conformance.lockstep import model_agrees_under_each

MODEL_CASES = model_cases()
CASES = lane_priority_cases()


@pytest.mark.parametrize("case", MODEL_CASES, ids=[case.id for case in MODEL_CASES])
def test_the_model_agrees_with_both_executors(pairs: Pairs, case: Case) -> None:
    for expected in model_agrees_under_each(pairs, case).values():
        assert expected.startswith(case.expect)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_both_executors_agree(pairs: Pairs, case: Case) -> None:
    found = under_each_protocol(pairs, case, lambda pair: case_differences(pair, case))
    assert found == {protocol: [] for protocol in found}


BAND, CAP, ENQUEUED = 2**45, 2**45 - 1, 1_699_999_999_995
# Where the job lands, on both executors: (the prio zset, the lane's list, the ring).
LANDS: dict[str, tuple[list[bytes], list[bytes], list[bytes]]] = {
    "recover:lane-prio-7-back": ([b"JOB:1", b"%d" % (ENQUEUED - 7 * BAND)], [], [b"a"]),
    "settle:lane-prio--3-released": ([b"JOB:1", b"%d" % (ENQUEUED + 3 * BAND)], [], [b"a"]),
    "recover:lane-prio-field-abc-counts-0": ([], [b"JOB:1"], [b"a"]),
    "recover:lane-p0-back-behind-prio": ([b"JOB:9", b"%d" % (-5 * BAND)], [b"JOB:1"], [b"a"]),
    "recover:lane-prio-enqueued-clamped": ([b"JOB:1", b"%d" % (CAP + 2 * BAND)], [], [b"a"]),
    "promote:lane-prio-due-fractional": ([b"JOB:1", b"%d" % (1 - 6 * BAND)], [], [b"a"]),
    "promote:lane-prio-due-minus-inf": ([b"JOB:1", b"%d" % (-6 * BAND)], [], [b"a"]),
    "ack:lane-full-only-prio-jobs": ([b"JOB:9", b"%d" % -BAND], [], [b"a"]),
    "recover:lane-full-only-prio-jobs": ([b"JOB:9", b"%d" % -BAND], [], [b"a"]),
}


@pytest.mark.parametrize("case", [c for c in CASES if c.id in LANDS],
                         ids=[c.id for c in CASES if c.id in LANDS])
def test_a_prioritised_lane_job_lands_in_its_band(pair: Pair, case: Case) -> None:
    pair.reset(case.setup)
    outcomes = pair.run(case.transition, case.argv)
    for outcome in outcomes.values():
        prio, lane, ring = LANDS[case.id]
        found = {key: value[1] for key, value in outcome.after.items()}
        assert found.get(b"emq:{q}:prio:a", []) == prio
        assert found.get(b"emq:{q}:lane:a", []) == lane
        assert found.get(b"emq:{q}:ring", []) == ring
