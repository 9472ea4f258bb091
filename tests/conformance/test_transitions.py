"""Every transition on both executors: raw replies under RESP2 and RESP3, and the keyspaces.

The case table and the comparison are the package's (echomq.conformance), the ones
``echomq conformance`` runs against any server.
"""

from __future__ import annotations

import pytest

from echomq.conformance.cases import Case, all_cases, case_differences
from echomq.conformance.harness import Pair

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_case(pair: Pair, case: Case) -> None:
    assert case_differences(pair, case) == []


def test_every_transition_has_cases() -> None:
    from echomq.engine.transitions import TRANSITIONS

    covered = {case.transition.name for case in CASES if not case.expect.startswith(b"-")}
    assert covered == {t.name for t in TRANSITIONS}
