"""step's main outcomes against the keyspace the table states for them (``STATED`` in
echomq/conformance/cases/steps.py): the model, the oracle of every step case, must leave exactly
that keyspace and reply so — the executors are held to the model by the table itself
(tests/conformance/test_transitions.py) — so a rule the model and both executors got wrong
alike still fails here."""

from __future__ import annotations

import pytest

from echomq.conformance.cases import Case, all_cases
from echomq.conformance.cases.common import BASE
from echomq.conformance.cases.steps import STATED
from echomq.conformance.oracle import expected

CASES = {case.label: case for case in all_cases() if case.transition.name == "step"}


@pytest.mark.parametrize("label", sorted(STATED))
def test_the_model_leaves_the_stated_keyspace(label: str) -> None:
    case: Case = CASES[label]
    for protocol in (2, 3):
        reply, keyspace = expected(case, protocol)
        assert reply is not None and reply.startswith(case.expect)
        stated = STATED[label]
        assert keyspace == {BASE.encode() + suffix: value for suffix, value in stated.items()}
