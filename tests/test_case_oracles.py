"""Every case of the conformance table has an oracle that knows its answer without asking either
executor (echomq/conformance/oracle.py): the model runs it, or the case states its keyspace.
None is silently skipped."""

from __future__ import annotations

import pytest

from echomq.conformance.cases import Case, all_cases
from echomq.conformance.oracle import (
    EXPLICIT,
    MODEL,
    NoOracle,
    expected,
    on_server_clock,
    oracle_differences,
    oracle_of,
)
from echomq.engine.transitions import TRANSITIONS

CASES = all_cases()
# The cases the model cannot run, each with the keyspace it must leave stated in the table.
EXPLICIT_CASES = {"trim_dead:now-star"}


def test_every_case_has_an_oracle_that_runs() -> None:
    by_oracle: dict[str, set[str]] = {MODEL: set(), EXPLICIT: set()}
    for case in CASES:
        by_oracle[oracle_of(case)].add(case.id)
        for protocol in (2, 3):
            reply, _ = expected(case, protocol)
            if oracle_of(case) == MODEL:
                assert reply is not None and reply[:1] in b"+-:$*_", case.id
    assert by_oracle[EXPLICIT] == EXPLICIT_CASES
    assert len(by_oracle[MODEL]) == len(CASES) - len(EXPLICIT_CASES)


def test_the_server_clock_cases_state_their_keyspace() -> None:
    assert {case.id for case in CASES if on_server_clock(case)} == EXPLICIT_CASES


def test_a_case_without_an_oracle_is_refused() -> None:
    star = next(case for case in CASES if case.id == "trim_dead:now-star")
    bare = Case(star.transition, "bare", star.argv, star.expect, star.setup)
    with pytest.raises(NoOracle):
        oracle_of(bare)


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_model_replies_in_the_pairs_protocol(protocol: int) -> None:
    claim = next(case for case in CASES if case.id == "claim:empty-queue")
    reply, _ = expected(claim, protocol)
    assert reply == {2: b"$-1\r\n", 3: b"_\r\n"}[protocol]


def test_a_keyspace_both_executors_share_but_the_model_does_not_is_reported() -> None:
    """The twin bug of issue 33: an ack that leaves a dedupe key behind, in both executors."""
    ack = next(case for case in CASES if case.transition.name == "ack"
               and oracle_of(case) == MODEL and not case.expect.startswith(b"-"))
    reply, keyspace = expected(ack, 2)
    assert reply is not None
    left = {key: (kind, value, expires) for key, (kind, value, expires) in keyspace.items()}
    left[b"emq:{q}:dedupe:k1"] = (b"string", b"JOB:1", False)
    assert oracle_differences(ack, 2, reply, left) == [
        "key b'emq:{q}:dedupe:k1': executors (b'string', b'JOB:1', False), model None"]
    assert oracle_differences(ack, 2, reply, keyspace) == []
    assert oracle_differences(ack, 2, b"+STALE\r\n", keyspace) == [
        f"reply b'+STALE\\r\\n' is not the model's {reply!r}"]


def test_every_transition_has_a_case_the_model_judges() -> None:
    judged = {case.transition.name for case in CASES if oracle_of(case) == MODEL
              and not case.expect.startswith(b"-")}
    assert judged == {t.name for t in TRANSITIONS}
