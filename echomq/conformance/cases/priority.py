"""Cases of flat priority: the optional priority argument of enqueue and enqueue_delayed (every
verdict and every bad word), the banded pending score (its clamp at the largest times), the claim
order it gives, and the band a job goes back to on recover, release and promote, read from its
row (a bad field counts as 0)."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    E_ARITY,
    E_TYPE,
    MAXINT,
    NOW,
    Case,
    Command,
    _argv,
    _case,
    job,
    key,
    replied,
    row,
    settle,
)
from echomq.conformance.resp import Arg
from echomq.engine.priority import pending_score as score
from echomq.engine.transitions import TIME_CAP

E_PRIORITY = b"-EMQNUM priority must be an integer from -100 to 100\r\n"

GOOD_PRIORITIES: list[tuple[str, Arg]] = [
    ("ten", "10"), ("highest", "100"), ("lowest", "-100"), ("minus-one", "-1"), ("zero", "0"),
    ("minus-zero", "-0"), ("leading-zeros", "007"), ("zero-zero", "000"),
]
BAD_PRIORITIES: list[tuple[str, Arg]] = [
    ("above", "101"), ("below", "-101"), ("four-digits", "1000"), ("plus", "+5"),
    ("leading-space", " 5"), ("trailing-space", "5 "), ("decimal-point", "5.0"),
    ("exponent", "1e2"), ("hex", "0x1"), ("double-minus", "--5"), ("empty", ""), ("word", "abc"),
    ("nul", b"5\x00"), ("minus-only", "-"), ("high-byte", b"\xff"), ("minus-four-digits", "-1000"),
]


def ranked(job_id: str, priority: int, at: int = NOW) -> list[Command]:
    """A flat job of ``priority`` enqueued at ``at``, not yet claimed (the field only if not 0)."""
    fields: list[Arg] = ["p", b"p", "a", "0", "t", str(at)]
    if priority:
        fields += ["priority", str(priority)]
    return [row(job_id, *fields), ["ZADD", key("pending"), str(score(priority, at)), job_id]]


def leased_at(job_id: str, priority: Arg, deadline: int = NOW - 1,
              enqueued_at: Arg = NOW - 5) -> list[Command]:
    """A job under its first lease until ``deadline``, its row's priority field ``priority``."""
    return [row(job_id, "p", b"p", "a", "1", "t", enqueued_at, "f", "1",
                "priority", priority),
            ["ZADD", key("active"), str(deadline), job_id]]


def delayed_at(job_id: str, priority: Arg, due: int) -> list[Command]:
    return [row(job_id, "p", b"p", "a", "1", "t", str(NOW - 5),
                "priority", priority),
            ["ZADD", key("delayed"), str(due), job_id]]


def with_priority(name: str, priority: Arg, **changes: Arg) -> list[Arg]:
    return [*_argv(name, **changes), priority]


def priority_cases() -> Iterator[Case]:
    yield from admission_cases("enqueue")
    yield from admission_cases("enqueue_delayed")
    yield from order_cases()
    yield from return_cases()


def admission_cases(name: str) -> Iterator[Case]:
    """The argument on its own: every good word is admitted (0, -0, 000 and 007 leave a row
    without the field, as a call without the argument), every bad one refused with nothing
    written, after the fixed arguments' own checks and before the keys' types."""
    for label, priority in GOOD_PRIORITIES:
        yield _case(name, f"priority-good-{label}", with_priority(name, priority),
                    b"+ENQUEUED")
    for label, priority in BAD_PRIORITIES:
        yield _case(name, f"priority-bad-{label}", with_priority(name, priority), E_PRIORITY)
    yield _case(name, "priority-three-extra-args", [*with_priority(name, "5"), "5", "5"], E_ARITY)
    yield _case(name, "priority-bad-after-bad-now", with_priority(name, "abc", now="x"),
                b"-EMQNUM now ")
    yield _case(name, "priority-bad-before-wrong-type", with_priority(name, "abc"), E_PRIORITY,
                [["SET", key("wake"), "x"]])
    yield _case(name, "priority-with-wrong-type", with_priority(name, "5"), E_TYPE,
                [["SET", key("wake"), "x"]])
    yield _case(name, "priority-duplicate", with_priority(name, "9"), b"+DUPLICATE",
                ranked("JOB:1", 0))
    yield _case(name, "priority-largest-now", with_priority(name, "5", now=MAXINT), b"+ENQUEUED")
    yield _case(name, "priority-lowest-largest-now", with_priority(name, "-100", now=MAXINT),
                b"+ENQUEUED")
    yield _case(name, "priority-after-others", with_priority(name, "3"), b"+ENQUEUED",
                ranked("JOB:0", 3, NOW - 10) + ranked("JOB:2", 0) + ranked("JOB:3", 4))
    if name == "enqueue_delayed":
        yield _case(name, "priority-bad-after-bad-delay",
                    with_priority(name, "abc", delay_ms="x"), b"-EMQNUM delay_ms")
        yield _case(name, "priority-at-ms", with_priority(name, "-7", delay_ms=0, at_ms=NOW + 9),
                    b"+ENQUEUED")


def order_cases() -> Iterator[Case]:
    """The claim walks pending from its lowest score: the highest priority first, FIFO within
    one, whatever their times."""
    yield _case("claim", "priority-higher-newer-first", _argv("claim"), job("JOB:2", 1, 1),
                ranked("JOB:1", 0, NOW - 1000) + ranked("JOB:2", 10))
    yield _case("claim", "priority-zero-before-negative", _argv("claim"), job("JOB:2", 1, 1),
                ranked("JOB:1", -5, NOW - 1000) + ranked("JOB:2", 0))
    yield _case("claim", "priority-fifo-within", _argv("claim"), job("JOB:2", 1, 1),
                ranked("JOB:1", 4, NOW) + ranked("JOB:2", 4, NOW - 1) + ranked("JOB:3", 0, 1))
    yield _case("claim", "priority-highest-at-the-largest-time", _argv("claim"),
                job("JOB:2", 1, 1),
                ranked("JOB:1", 99, 0) + ranked("JOB:2", 100, int(MAXINT)))
    yield _case("settle", "priority-claim-walk", settle(count=4),
                replied([], [job("JOB:4", 1, 1), job("JOB:2", 1, 2), job("JOB:1", 1, 3),
                             job("JOB:3", 1, 4)]),
                ranked("JOB:1", 0, NOW - 3) + ranked("JOB:2", 2, NOW) + ranked("JOB:3", -2, 1)
                + ranked("JOB:4", 100, NOW + 5) + ranked("JOB:5", -100, 0))


def return_cases() -> Iterator[Case]:
    """A job put back to pending goes to the band its row names (a field that is not a priority
    counts as 0), at its enqueued_at (recover, release) or its due time (promote), clamped."""
    for label, priority in [("seven", "7"), ("negative", "-7"), ("bad-word", "abc"),
                            ("bad-above", "101"), ("bad-plus", "+1"), ("bad-empty", "")]:
        yield _case("recover", f"priority-{label}", _argv("recover"), b":1",
                    leased_at("JOB:1", priority) + ranked("JOB:2", 7, NOW - 6))
        yield _case("settle", f"priority-release-{label}", settle("release", "JOB:1", 1),
                    replied([b"RELEASED"], []),
                    leased_at("JOB:1", priority, deadline=NOW + 30_000))
        yield _case("promote", f"priority-{label}", _argv("promote"), b":1",
                    delayed_at("JOB:1", priority, NOW - 1) + ranked("JOB:2", 7))
    yield _case("recover", "priority-largest-enqueued-at", _argv("recover", now=MAXINT), b":2",
                leased_at("JOB:1", "0", enqueued_at=MAXINT)
                + leased_at("JOB:2", "5", deadline=NOW, enqueued_at=MAXINT))
    yield _case("recover", "priority-no-enqueued-at", _argv("recover"), b":1",
                [row("JOB:1", "p", "p", "a", "1", "priority", "3"),
                 ["ZADD", key("active"), "5", "JOB:1"]])
    yield _case("promote", "priority-negative-due", _argv("promote"), b":1",
                delayed_at("JOB:1", "3", -5))
    yield _case("promote", "priority-due-past-the-cap", _argv("promote", now=MAXINT), b":2",
                delayed_at("JOB:1", "5", TIME_CAP + 5) + delayed_at("JOB:2", "0", TIME_CAP + 1))
    yield _case("promote", "priority-odd-scores", _argv("promote"), b":2",
                [row("JOB:1", "a", "1", "priority", "2"),
                 row("JOB:2", "a", "1", "priority", "-2"),
                 ["ZADD", key("delayed"), "-inf", "JOB:1", "1.5", "JOB:2"]])
