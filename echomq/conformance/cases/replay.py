"""Cases of replays: a settlement sent again after its reply was lost answers what it did the
first time and changes nothing — an ack of a lease whose tombstone keeps its fence ACKED, a retry
of a lease whose row keeps its fence and its error RETRYING (DEAD while dead) — on the single
verbs and as settle's items; anything else that is not the current lease stays STALE."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    NOW,
    Case,
    Command,
    _argv,
    _case,
    key,
    leased,
    replied,
    row,
    settle,
)

# What the first ack of lease (JOB:1, 1) left: a tombstone at fence 1, expiring.
ACKED: list[Command] = [row("JOB:1", "a", "1", "t", str(NOW - 5), "f", "1"),
                        ["PEXPIRE", key("job"), "60000"]]
ACKED_WITH_RESULT: list[Command] = [*ACKED, ["HSET", key("job"), "result", "r"]]
RETRIED_FIELDS = ("p", "p", "a", "1", "t", str(NOW - 5), "f", "1")


def retried(where: str, error: str = "boom") -> list[Command]:
    """What the first retry of lease (JOB:1, 1) with ``error`` left: the row at fence 1 with
    its error, in ``where`` (delayed, pending after a promote, or dead)."""
    return [row("JOB:1", *RETRIED_FIELDS, "error", error),
            ["ZADD", key(where), str(NOW + 1_000), "JOB:1"]]


def single_verb_cases() -> Iterator[Case]:
    for name in ("ack", "ack_result"):
        yield _case(name, "replay-of-an-ack", _argv(name), b"+ACKED", ACKED)
        yield _case(name, "replay-of-an-ack-with-result", _argv(name), b"+ACKED",
                    ACKED_WITH_RESULT)
        yield _case(name, "replay-other-fence", _argv(name, fence=2), b"+STALE", ACKED)
        yield _case(name, "replay-row-without-payload-not-expiring", _argv(name), b"+STALE",
                    ACKED[:1])
        yield _case(name, "replay-after-a-retry", _argv(name), b"+STALE", retried("delayed"))
        yield _case(name, "replay-while-leased-again", _argv(name), b"+STALE",
                    leased("JOB:1", attempt=2, fence=2))
    yield _case("retry", "replay-of-a-retry", _argv("retry"), b"+RETRYING", retried("delayed"))
    yield _case("retry", "replay-after-a-promote", _argv("retry"), b"+RETRYING",
                retried("pending"))
    yield _case("retry", "replay-of-a-retry-to-dead", _argv("retry"), b"+DEAD",
                retried("dead"))
    yield _case("retry", "replay-of-a-retry-to-dead-without-payload", _argv("retry"), b"+STALE",
                [*retried("dead"), ["HDEL", key("job"), "p"]])
    yield _case("retry", "replay-other-error", _argv("retry"), b"+STALE",
                retried("delayed", "other"))
    yield _case("retry", "replay-other-fence", _argv("retry", fence=2), b"+STALE",
                retried("delayed"))
    yield _case("retry", "replay-after-a-recover", _argv("retry"), b"+STALE",
                retried("pending", "lease expired during attempt 1: the worker was lost"))
    yield _case("retry", "replay-after-an-ack", _argv("retry"), b"+STALE", ACKED)


def settle_replay_cases() -> Iterator[Case]:
    yield _case("settle", "replay-ack", settle("ack", "JOB:1", 1), replied([b"ACKED"], []),
                ACKED)
    yield _case("settle", "replay-done", settle("done", "JOB:1", 1, b"r"),
                replied([b"ACKED"], []), ACKED_WITH_RESULT)
    yield _case("settle", "replay-retry", settle("retry", "JOB:1", 1, 0, 3, b"boom"),
                replied([b"RETRYING"], []), retried("delayed"))
    yield _case("settle", "replay-retry-to-dead", settle("retry", "JOB:1", 1, 0, 3, b"boom"),
                replied([b"DEAD"], []), retried("dead"))
    yield _case("settle", "replay-retry-other-error",
                settle("retry", "JOB:1", 1, 0, 3, b"other"), replied([b"STALE"], []),
                retried("delayed"))
    yield _case("settle", "replay-release", settle("release", "JOB:1", 1),
                replied([b"STALE"], []), ACKED)
    yield _case("settle", "retry-twice", settle("retry", "JOB:1", 1, 0, 3, b"e",
                                                "retry", "JOB:1", 1, 0, 3, b"e"),
                replied([b"RETRYING", b"RETRYING"], []), leased("JOB:1"))

def replay_cases() -> list[Case]:
    return [*single_verb_cases(), *settle_replay_cases()]
