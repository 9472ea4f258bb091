"""A row an earlier release wrote (``payload``, ``attempts``, ``enqueued_at``, ``fence``) leased
on both executors: the lease upgrades it to this release's names and replies its payload, and
the keyspace that results is exactly the one docs/PROTOCOL.md ("The job row") says."""

from __future__ import annotations

from echomq.conformance.cases.common import (
    NOW,
    Command,
    _argv,
    key,
    row,
    settle,
)
from echomq.conformance.cases.flat import OLD_LAYOUT
from echomq.conformance.harness import BY_NAME, Pair, assert_parity

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
