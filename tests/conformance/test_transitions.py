"""Every transition on both executors: raw replies under RESP2 and RESP3, and the keyspaces."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.embedded import EmbeddedValkey
from tests.conformance.cases import NULL, Case, all_cases
from tests.conformance.harness import Pair, assert_parity

CASES = all_cases()
NULLS = {2: b"$-1\r\n", 3: b"_\r\n"}


@pytest.fixture(scope="module", params=[2, 3], ids=["resp2", "resp3"])
def pair(request: pytest.FixtureRequest, valkey: EmbeddedValkey) -> Iterator[Pair]:
    both = Pair(valkey.port, request.param)
    yield both
    both.close()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_case(pair: Pair, case: Case) -> None:
    pair.reset(case.setup)
    reply = assert_parity(pair.run(case.transition, case.argv), case.id)
    if case.expect == NULL:
        assert reply == NULLS[pair.protocol]
    else:
        assert reply.startswith(case.expect), reply


def test_every_transition_has_cases() -> None:
    from echomq.transitions import TRANSITIONS

    covered = {case.transition.name for case in CASES if not case.expect.startswith(b"-")}
    assert covered == {t.name for t in TRANSITIONS}
