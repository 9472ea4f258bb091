"""A row an earlier release wrote (``payload``, ``attempts``, ``enqueued_at``, ``fence``) leased
on both executors: the lease upgrades it to this release's names and replies its payload, and
the keyspace that results is exactly the one docs/PROTOCOL.md ("The job row") says."""

from __future__ import annotations

import pytest

from echomq.conformance.cases.common import (
    NOW,
    Case,
    Command,
    _argv,
    key,
    row,
    settle,
)
from echomq.conformance.cases.flat import OLD_LAYOUT, old_layout_claim_cases
from echomq.conformance.cases.layout import layout_cases
from echomq.conformance.harness import BY_NAME, Pair, Snapshot, assert_parity
from echomq.conformance.model import Model, normalise
from tests.conformance.conftest import Pairs, under_each_protocol

ROW = key("job").encode()


def leased_row(pair: Pair, name: str, argv: list[object], setup: list[Command]) -> tuple[
        bytes, tuple[object, ...]]:
    pair.reset(setup)
    outcomes = pair.run(BY_NAME[name], argv)  # type: ignore[arg-type]
    reply = assert_parity(outcomes, name)
    return reply, outcomes["lua"].after[ROW]


def test_a_claim_upgrades_a_row_of_the_earlier_layout(pair: Pair) -> None:
    reply, after = leased_row(pair, "claim", _argv("claim"), OLD_LAYOUT)
    assert reply == b"*4\r\n$5\r\nJOB:1\r\n$3\r\nold\r\n:3\r\n:1\r\n"
    assert after == (b"hash", sorted([(b"a", b"3"), (b"error", b"boom"), (b"f", b"1"),
                                      (b"p", b"old"), (b"t", b"7")]), False)


def test_the_new_names_already_set_win(pair: Pair) -> None:
    setup: list[Command] = [row("JOB:1", "payload", b"old", "p", b"new", "attempts", "2",
                                "a", "4", "enqueued_at", "7", "t", "9", "fence", "3"),
                            ["ZADD", key("pending"), "1", "JOB:1"]]
    reply, after = leased_row(pair, "claim", _argv("claim"), setup)
    assert reply == b"*4\r\n$5\r\nJOB:1\r\n$3\r\nnew\r\n:5\r\n:1\r\n"
    assert after == (b"hash", [(b"a", b"5"), (b"f", b"1"), (b"p", b"new"), (b"t", b"9")], False)


def test_a_settle_claims_a_row_of_the_earlier_layout(pair: Pair) -> None:
    reply, after = leased_row(pair, "settle", settle(count=1), OLD_LAYOUT)
    assert reply == b"*2\r\n*0\r\n*1\r\n*4\r\n$5\r\nJOB:1\r\n$3\r\nold\r\n:3\r\n:1\r\n"
    assert after == (b"hash", sorted([(b"a", b"3"), (b"error", b"boom"), (b"f", b"1"),
                                      (b"p", b"old"), (b"t", b"7")]), False)


def test_a_row_of_this_layout_is_leased_as_before(pair: Pair) -> None:
    setup: list[Command] = [row("JOB:1", "p", b"x", "t", str(NOW)),
                            ["ZADD", key("pending"), "1", "JOB:1"]]
    reply, after = leased_row(pair, "claim", _argv("claim"), setup)
    assert reply == b"*4\r\n$5\r\nJOB:1\r\n$1\r\nx\r\n:1\r\n:1\r\n"
    assert after == (b"hash", [(b"a", b"1"), (b"f", b"1"), (b"p", b"x"),
                               (b"t", str(NOW).encode())], False)


OLD_CASES = [*layout_cases(), *old_layout_claim_cases()]


@pytest.mark.parametrize("case", OLD_CASES, ids=[case.id for case in OLD_CASES])
def test_the_model_reads_the_earlier_layout_as_the_executors_do(pairs: Pairs,
                                                                case: Case) -> None:
    """Every old-layout case: the model (the property tests' oracle) replies and leaves what
    both executors do."""
    def agrees(pair: Pair) -> None:
        pair.reset(case.setup)
        model = Model(pair.protocol)
        for command in case.setup:
            model.apply_setup(command)
        expected = model.call(case.transition, case.argv)
        reply = assert_parity(pair.run(case.transition, case.argv), case.id)
        assert reply == expected
        assert normalise(pair.snapshot("native")) == model.render()

    under_each_protocol(pairs, case, agrees)


def run_on_both(pair: Pair, name: str, argv: list[object],
                setup: list[Command]) -> tuple[bytes, Snapshot]:
    pair.reset(setup)
    outcomes = pair.run(BY_NAME[name], argv)  # type: ignore[arg-type]
    return assert_parity(outcomes, name), normalise(outcomes["lua"].after)


CASE = {case.id: case for case in OLD_CASES}
JOB = b"emq:{q}:job:JOB:1"
OLD_ROW = [(b"attempts", b"3"), (b"enqueued_at", str(NOW - 5).encode()), (b"fence", b"3"),
           (b"payload", b"p")]


def run_case(pair: Pair, case_id: str) -> tuple[bytes, Snapshot]:
    case = CASE[case_id]
    return run_on_both(pair, case.transition.name, case.argv, case.setup)


def test_recover_sends_an_old_lease_whose_attempts_are_used_up_to_dead(pair: Pair) -> None:
    reply, after = run_case(pair, "recover:old-layout-spent")
    assert reply == b":1\r\n"
    assert after == {
        b"emq:{q}:dead": (b"zset", [(b"JOB:1", float(NOW))], False),
        b"emq:{q}:ended:JOB:1": (b"list", [b"1"], False),
        JOB: (b"hash", sorted([*OLD_ROW, (
            b"error", b"lease expired during attempt 3: the worker was lost")]), False)}


def test_recover_puts_an_old_lease_back_at_its_enqueued_at(pair: Pair) -> None:
    reply, after = run_case(pair, "recover:old-layout-back-at-enqueued-at")
    assert reply == b":1\r\n"
    assert after[b"emq:{q}:pending"] == (b"zset", [(b"JOB:1", float(NOW - 5))], False)


def test_cancel_ends_an_old_pending_job_as_a_tombstone_without_its_payload(pair: Pair) -> None:
    reply, after = run_case(pair, "cancel:old-layout-pending")
    assert reply == b"+CANCELLED\r\n"
    assert after == {
        b"emq:{q}:ended:JOB:1": (b"list", [b"1"], True),
        JOB: (b"hash", [(b"attempts", b"0"), (b"cancel", b"60000"),
                        (b"cancelled", str(NOW).encode()), (b"enqueued_at", str(NOW).encode())],
              True)}


def test_after_waits_for_an_old_pending_parent(pair: Pair) -> None:
    reply, after = run_case(pair, "after:old-layout-live-parent")
    assert reply == b"+WAITING\r\n"
    assert after[b"emq:{q}:job:JOB:2"] == (b"hash", [
        (b"attempts", b"0"), (b"enqueued_at", str(NOW).encode()), (b"next", b"JOB:1"),
        (b"payload", b"p")], False)
    assert after[b"emq:{q}:waiting"] == (b"zset", [(b"JOB:1", float(NOW - 10))], False)
    assert b"emq:{q}:ended:JOB:1" not in after


def test_an_ack_of_an_old_lease_leaves_a_tombstone_without_its_payload(pair: Pair) -> None:
    reply, after = run_case(pair, "ack:old-layout-lease")
    assert reply == b"+ACKED\r\n"
    assert after == {JOB: (b"hash", [(b"attempts", b"1"), (b"enqueued_at", str(NOW - 5).encode()),
                                     (b"fence", b"1")], True)}


def test_the_end_hook_releases_an_old_child_at_its_enqueued_at(pair: Pair) -> None:
    reply, after = run_case(pair, "ack:old-layout-child-released-at-enqueued-at")
    assert reply == b"+ACKED\r\n"
    assert after[b"emq:{q}:pending"] == (b"zset", [(b"JOB:5", float(NOW - 40))], False)
