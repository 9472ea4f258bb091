"""A case run on the model and on both executors at once."""

from __future__ import annotations

from echomq.conformance.cases import Case
from echomq.conformance.harness import Pair
from echomq.conformance.model import Model, normalise
from tests.conformance.conftest import Pairs, under_each_protocol


def model_agrees(pair: Pair, case: Case) -> bytes:
    """Run ``case`` from its setup on the model and on both executors; assert that each
    executor's reply and keyspace (with expiries) are the model's, and return the model's reply."""
    pair.reset(case.setup)
    model = Model(pair.protocol)
    for command in case.setup:
        model.apply_setup(command)
    expected = model.call(case.transition, case.argv)
    outcomes = pair.run(case.transition, case.argv)
    for name in ("lua", "native"):
        assert outcomes[name].reply == expected, name
        assert normalise(outcomes[name].after) == model.render(), name
    return expected


def model_agrees_under_each(pairs: Pairs, case: Case) -> dict[int, bytes]:
    """``model_agrees`` under each protocol ``case`` runs under (``under_each_protocol``): the
    model's reply by protocol."""
    return under_each_protocol(pairs, case, lambda pair: model_agrees(pair, case))
