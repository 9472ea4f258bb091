"""Flat priority, case by case (echomq/conformance/cases/priority.py): the model agrees with
both executors (reply, and keyspace with its expiries) under RESP2 and RESP3; and, written out
here rather than taken from the model, where each case leaves its jobs: the score of each in
pending or delayed, and the row's priority field."""

from __future__ import annotations

from typing import Any

import pytest

from echomq.conformance.cases import Case
from echomq.conformance.cases.common import NOW
from echomq.conformance.cases.priority import priority_cases, score
from echomq.conformance.harness import Pair
from echomq.conformance.model import normalise
from echomq.engine.transitions import TIME_CAP
from tests.conformance.conftest import Pairs
from tests.conformance.lockstep import model_agrees_under_each

# The model's setup reads integer scores only: the odd due scores (-inf, 1.5) are the
# executors' alone (tests/conformance/test_transitions.py).
CASES = [case for case in priority_cases() if "odd-scores" not in case.label]
BY_ID = {case.id: case for case in priority_cases()}

# case id -> (zset role, job id, its score there)
PLACES: list[tuple[str, bytes, bytes, float]] = [
    ("enqueue:priority-good-ten", b"pending", b"JOB:1", score(10, NOW)),
    ("enqueue:priority-good-highest", b"pending", b"JOB:1", score(100, NOW)),
    ("enqueue:priority-good-lowest", b"pending", b"JOB:1", score(-100, NOW)),
    ("enqueue:priority-good-minus-zero", b"pending", b"JOB:1", NOW),
    ("enqueue:priority-good-leading-zeros", b"pending", b"JOB:1", score(7, NOW)),
    ("enqueue:priority-largest-now", b"pending", b"JOB:1", score(5, TIME_CAP)),
    ("enqueue:priority-lowest-largest-now", b"pending", b"JOB:1", score(-100, TIME_CAP)),
    ("enqueue_delayed:priority-good-ten", b"delayed", b"JOB:1", NOW + 5_000),
    ("enqueue_delayed:priority-at-ms", b"delayed", b"JOB:1", NOW + 9),
    ("recover:priority-seven", b"pending", b"JOB:1", score(7, NOW - 5)),
    ("recover:priority-negative", b"pending", b"JOB:1", score(-7, NOW - 5)),
    ("recover:priority-bad-word", b"pending", b"JOB:1", NOW - 5),
    ("recover:priority-bad-above", b"pending", b"JOB:1", NOW - 5),
    ("recover:priority-bad-plus", b"pending", b"JOB:1", NOW - 5),
    ("recover:priority-largest-enqueued-at", b"pending", b"JOB:1", TIME_CAP),
    ("recover:priority-largest-enqueued-at", b"pending", b"JOB:2", score(5, TIME_CAP)),
    ("recover:priority-no-enqueued-at", b"pending", b"JOB:1", score(3, NOW)),
    ("settle:priority-release-seven", b"pending", b"JOB:1", score(7, NOW - 5)),
    ("settle:priority-release-negative", b"pending", b"JOB:1", score(-7, NOW - 5)),
    ("settle:priority-release-bad-word", b"pending", b"JOB:1", NOW - 5),
    ("promote:priority-seven", b"pending", b"JOB:1", score(7, NOW - 1)),
    ("promote:priority-negative", b"pending", b"JOB:1", score(-7, NOW - 1)),
    ("promote:priority-bad-empty", b"pending", b"JOB:1", NOW - 1),
    ("promote:priority-negative-due", b"pending", b"JOB:1", score(3, 0)),
    ("promote:priority-due-past-the-cap", b"pending", b"JOB:1", score(5, TIME_CAP)),
    ("promote:priority-due-past-the-cap", b"pending", b"JOB:2", TIME_CAP),
    ("promote:priority-odd-scores", b"pending", b"JOB:1", score(2, 0)),
    ("promote:priority-odd-scores", b"pending", b"JOB:2", score(-2, 1)),
]
# case id -> the row's priority field after it (None: no field)
FIELDS: list[tuple[str, bytes | None]] = [
    ("enqueue:priority-good-ten", b"10"), ("enqueue:priority-good-lowest", b"-100"),
    ("enqueue:priority-good-zero", None), ("enqueue:priority-good-minus-zero", None),
    ("enqueue:priority-good-zero-zero", None), ("enqueue:priority-good-leading-zeros", b"7"),
    ("enqueue_delayed:priority-good-ten", b"10"),
    ("enqueue_delayed:priority-good-minus-zero", None),
    ("enqueue_delayed:priority-at-ms", b"-7"),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_model_agrees_with_both_executors(pairs: Pairs, case: Case) -> None:
    for expected in model_agrees_under_each(pairs, case).values():
        assert expected.startswith(case.expect)


def after(pair: Pair, case: Case) -> dict[str, dict[bytes, tuple[Any, ...]]]:
    """Each executor's keyspace after ``case``, keyed by the key's role (the part after the
    queue's base)."""
    pair.reset(case.setup)
    outcomes = pair.run(case.transition, case.argv)
    return {name: {key.split(b"}:", 1)[1]: value
                   for key, value in normalise(outcomes[name].after).items()}
            for name in ("lua", "native")}


@pytest.mark.parametrize(("case_id", "role", "job_id", "expected"), PLACES,
                         ids=[f"{p[0]}-{p[2].decode()}" for p in PLACES])
def test_the_job_waits_at_its_bands_score(pair: Pair, case_id: str, role: bytes, job_id: bytes,
                                          expected: float) -> None:
    for name, keys in after(pair, BY_ID[case_id]).items():
        assert dict(keys[role][1])[job_id] == expected, name


@pytest.mark.parametrize(("case_id", "field"), FIELDS, ids=[f[0] for f in FIELDS])
def test_the_row_keeps_its_priority_only_when_not_zero(pair: Pair, case_id: str,
                                                       field: bytes | None) -> None:
    for name, keys in after(pair, BY_ID[case_id]).items():
        row = dict(keys[b"job:JOB:1"][1])
        assert row.get(b"priority") == field, name
        assert {b"p", b"t"} <= row.keys() and b"a" not in row  # no attempt yet: no a
