"""Cases of cancel: each verdict on the state that gives it (a job pending, delayed, in its
lane, leased, flagged, cancelled, done, dead, absent), the tombstone with and without retention,
the ended token, and the keys cancel derives (the ended key, a lane job's lane)."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    E_TYPE,
    NOW,
    Case,
    Command,
    _argv,
    _case,
    delayed,
    key,
    leased,
    row,
    waiting,
)

ENDED = key("ended:JOB:1")


def in_lane(job_id: str, group: str = "a", *others: str) -> list[Command]:
    """A lane job waiting in its group's lane (behind ``others``), its group in the ring."""
    return [row(job_id, "payload", b"p", "attempts", "0", "enqueued_at", str(NOW - 5),
                "lane", group),
            ["RPUSH", key(f"lane:{group}"), *others, job_id], ["RPUSH", key("ring"), group]]


def flagged(job_id: str = "JOB:1") -> list[Command]:
    """A leased job already flagged by a cancel."""
    return [*leased(job_id), ["HSET", key("job", job_id), "cancel", "5000", "cancelled", "7"]]


def cancelled(job_id: str = "JOB:1") -> list[Command]:
    """A cancelled tombstone."""
    return [row(job_id, "attempts", "0", "enqueued_at", "5", "cancel", "5000", "cancelled", "7"),
            ["PEXPIRE", key("job", job_id), "100000"]]


def cancel_cases() -> Iterator[Case]:
    name = "cancel"
    yield _case(name, "pending", _argv(name), b"+CANCELLED", waiting("JOB:1") + waiting("JOB:2"))
    yield _case(name, "pending-no-retention", _argv(name, retention_ms=0), b"+CANCELLED",
                waiting("JOB:1"))
    yield _case(name, "pending-last-one", _argv(name), b"+CANCELLED", waiting("JOB:1"))
    yield _case(name, "delayed", _argv(name), b"+CANCELLED", delayed("JOB:1", due=NOW + 9))
    yield _case(name, "delayed-lane-job", _argv(name), b"+CANCELLED",
                delayed("JOB:1", due=NOW + 9, lane="a"))
    yield _case(name, "in-its-lane", _argv(name), b"+CANCELLED",
                [*in_lane("JOB:1", "a", "JOB:0"), ["RPUSH", key("lane:a"), "JOB:2"]])
    yield _case(name, "alone-in-its-lane", _argv(name), b"+CANCELLED", in_lane("JOB:1"))
    yield _case(name, "lane-job-not-in-its-lane", _argv(name), b"+CANCELLED",
                [row("JOB:1", "payload", b"p", "attempts", "0", "lane", "a")])
    yield _case(name, "in-no-set", _argv(name), b"+CANCELLED",
                [row("JOB:1", "payload", b"p", "attempts", "2", "fence", "4")])
    yield _case(name, "leased", _argv(name), b"+CANCELLING", leased("JOB:1"))
    yield _case(name, "leased-no-retention", _argv(name, retention_ms=0), b"+CANCELLING",
                leased("JOB:1"))
    yield _case(name, "leased-lane-job", _argv(name), b"+CANCELLING",
                leased("JOB:1", lane="a"))
    yield _case(name, "already-flagged", _argv(name), b"+CANCELLING", flagged())
    yield _case(name, "already-cancelled", _argv(name), b"+CANCELLED", cancelled())
    yield _case(name, "done", _argv(name), b"+DONE",
                [row("JOB:1", "attempts", "1", "fence", "1", "result", "r"),
                 ["PEXPIRE", key("job"), "100000"]])
    yield _case(name, "dead", _argv(name), b"+DEAD",
                [row("JOB:1", "payload", "p", "attempts", "5", "error", "e"),
                 ["ZADD", key("dead"), "9", "JOB:1"], ["RPUSH", ENDED, "1"]])
    yield _case(name, "unknown", _argv(name), b"+UNKNOWN")
    yield _case(name, "unknown-with-a-token", _argv(name), b"+UNKNOWN", [["RPUSH", ENDED, "1"]])
    yield _case(name, "ended-token-already-there", _argv(name), b"+CANCELLED",
                [*waiting("JOB:1"), ["RPUSH", ENDED, "1"]])
    yield from derived_cases()


def derived_cases() -> Iterator[Case]:
    """The keys cancel derives (step 6), checked whatever the verdict: the ended key, then a lane
    job's lane."""
    name = "cancel"
    for label, ready in (("pending", waiting("JOB:1")), ("unknown", []),
                         ("dead", [row("JOB:1", "payload", "p"),
                                   ["ZADD", key("dead"), "9", "JOB:1"]])):
        yield _case(name, f"ended-wrongtype-{label}", _argv(name), E_TYPE,
                    [*ready, ["SET", ENDED, "x"]])
    yield _case(name, "ended-wrongtype-hash", _argv(name), E_TYPE,
                [*leased("JOB:1"), ["HSET", ENDED, "f", "v"]])
    yield _case(name, "lane-wrongtype", _argv(name), E_TYPE,
                [row("JOB:1", "payload", b"p", "lane", "a"), ["SET", key("lane:a"), "x"]])
    yield _case(name, "lane-wrongtype-when-leased", _argv(name), E_TYPE,
                [*leased("JOB:1", lane="a"), ["ZADD", key("lane:a"), "1", "x"]])
    yield _case(name, "ended-before-lane", _argv(name), E_TYPE,
                [*in_lane("JOB:1"), ["SET", ENDED, "x"]])
    yield _case(name, "lane-of-another-group-wrongtype", _argv(name), b"+CANCELLED",
                [*in_lane("JOB:1"), ["SET", key("lane:b"), "x"]])
