"""Cases of cancel: each verdict on the state that gives it (a job pending, delayed, in its
lane, leased, flagged, cancelled, done, dead, absent), the tombstone with and without retention,
the ended token, and the keys cancel derives (the ended key, a lane job's lane, parked and
ringleft); a lane left empty leaving the ring without its being walked (its entry counted in
``ringleft``); a flagged lease's heartbeat."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    E_TYPE,
    GOOD,
    NOW,
    Case,
    Command,
    _argv,
    _case,
    delayed,
    job,
    key,
    leased,
    replied,
    row,
    settle,
    waiting,
)

ENDED = key("ended:JOB:1")


def in_lane(job_id: str, group: str = "a", *others: str) -> list[Command]:
    """A lane job waiting in its group's lane (behind ``others``), its group in the ring."""
    return [row(job_id, "p", b"p", "a", "0", "t", str(NOW - 5),
                "lane", group),
            ["RPUSH", key(f"lane:{group}"), *others, job_id], ["RPUSH", key("ring"), group]]


def flagged(job_id: str = "JOB:1", retention: str = "5000", *, attempt: int = 1,
            deadline: int = NOW + 30_000, lane: str | None = None,
            fence: int | None = None) -> list[Command]:
    """A leased job already flagged by a cancel (``leased``'s lease)."""
    return [*leased(job_id, attempt, deadline, lane, fence),
            ["HSET", key("job", job_id), "cancel", retention, "cancelled", "7"]]


def cancelled(job_id: str = "JOB:1") -> list[Command]:
    """A cancelled tombstone."""
    return [row(job_id, "a", "0", "t", "5", "cancel", "5000", "cancelled", "7"),
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
    yield from ring_left_cases()
    yield _case(name, "lane-job-not-in-its-lane", _argv(name), b"+CANCELLED",
                [row("JOB:1", "p", b"p", "a", "0", "lane", "a")])
    yield _case(name, "in-no-set", _argv(name), b"+CANCELLED",
                [row("JOB:1", "p", b"p", "a", "2", "f", "4")])
    yield _case(name, "leased", _argv(name), b"+CANCELLING", leased("JOB:1"))
    yield _case(name, "leased-no-retention", _argv(name, retention_ms=0), b"+CANCELLING",
                leased("JOB:1"))
    yield _case(name, "leased-lane-job", _argv(name), b"+CANCELLING",
                leased("JOB:1", lane="a"))
    yield _case(name, "already-flagged", _argv(name), b"+CANCELLING", flagged())
    yield _case(name, "already-cancelled", _argv(name), b"+CANCELLED", cancelled())
    yield _case(name, "done", _argv(name), b"+DONE",
                [row("JOB:1", "a", "1", "f", "1", "result", "r"),
                 ["PEXPIRE", key("job"), "100000"]])
    yield _case(name, "dead", _argv(name), b"+DEAD",
                [row("JOB:1", "p", "p", "a", "5", "error", "e"),
                 ["ZADD", key("dead"), "9", "JOB:1"], ["RPUSH", ENDED, "1"]])
    yield _case(name, "unknown", _argv(name), b"+UNKNOWN")
    yield _case(name, "unknown-with-a-token", _argv(name), b"+UNKNOWN", [["RPUSH", ENDED, "1"]])
    yield _case(name, "ended-token-already-there", _argv(name), b"+CANCELLED",
                [*waiting("JOB:1"), ["RPUSH", ENDED, "1"]])
    yield from derived_cases()
    yield from notice_cases()
    yield from heartbeat_cases()
    yield from settlement_cases()
    yield from settle_cases()


def settlement_cases() -> Iterator[Case]:
    """A flagged lease's settlement, whatever it is, ends the attempt as cancelled (no result
    kept, no retry, never dead); sent again, it answers CANCELLED; a flagged row's ended key is
    checked whatever the lease."""
    for name in ("ack", "ack_result", "retry"):
        yield _case(name, "flagged", _argv(name), b"+CANCELLED", flagged())
        yield _case(name, "flagged-no-retention", _argv(name), b"+CANCELLED",
                    flagged(retention="0"))
        yield _case(name, "flagged-lane-lease", _argv(name), b"+CANCELLED",
                    [*flagged(lane="a"), ["HSET", key("leased"), "a", "1"],
                     ["HSET", key("parked"), "a", "1"], ["RPUSH", key("lane:a"), "JOB:w"],
                     ["HSET", key("laneconf"), "concurrency:a", "1"]])
        yield _case(name, "flagged-ended-wrongtype", _argv(name), E_TYPE,
                    [*flagged(), ["SET", ENDED, "x"]])
        yield _case(name, "flagged-ended-wrongtype-when-stale", _argv(name, fence=2), E_TYPE,
                    [*flagged(), ["SET", ENDED, "x"]])
        yield _case(name, "replay-of-a-cancelled-end", _argv(name), b"+CANCELLED",
                    [*cancelled(), ["HSET", key("job"), "f", "1"]])
        yield _case(name, "other-fence-of-a-cancelled-end", _argv(name, fence=2), b"+STALE",
                    [*cancelled(), ["HSET", key("job"), "f", "1"]])
    yield _case("retry", "flagged-at-its-last-attempt", _argv("retry", max_attempts=1),
                b"+CANCELLED", flagged(attempt=3, fence=1))
    yield _case("ack", "unflagged-ended-wrongtype", _argv("ack"), b"+ACKED",
                [*leased("JOB:1"), ["SET", ENDED, "x"]])
    yield _case("recover", "flagged-expired", list(GOOD["recover"]), b":2",
                [*flagged(deadline=NOW - 1), *leased("JOB:2", deadline=NOW - 2)])
    yield _case("recover", "flagged-spent", list(GOOD["recover"]), b":1",
                flagged(attempt=9, deadline=NOW - 1))
    yield _case("recover", "flagged-lane-lease", list(GOOD["recover"]), b":1",
                [*flagged(lane="a", deadline=NOW - 1), ["HSET", key("leased"), "a", "1"]])
    yield _case("recover", "flagged-no-retention", list(GOOD["recover"]), b":1",
                flagged(retention="0", deadline=NOW - 1))
    yield _case("recover", "flagged-ended-wrongtype", list(GOOD["recover"]), E_TYPE,
                [*flagged(deadline=NOW - 1), ["SET", ENDED, "x"]])
    yield _case("recover", "flagged-not-expired", list(GOOD["recover"]), b":0", flagged())


def settle_cases() -> Iterator[Case]:
    """settle's items on flagged leases: each ends cancelled; a release's replay over its
    cancelled end answers CANCELLED; the ended key of a flagged item's row is checked."""
    for op, tail in (("ack", []), ("done", [b"r"]), ("release", []),
                     ("retry", [0, 1, b"e"])):
        yield _case("settle", f"{op}-flagged", settle(op, "JOB:1", 1, *tail, count=1),
                    replied([b"CANCELLED"], [job("JOB:3", 1, 1)]), [*flagged(), *waiting("JOB:3")])
        yield _case("settle", f"{op}-flagged-twice", settle(op, "JOB:1", 1, *tail, op, "JOB:1", 1,
                                                             *tail),
                    replied([b"CANCELLED", b"CANCELLED"], []), flagged())
        yield _case("settle", f"{op}-flagged-ended-wrongtype", settle(op, "JOB:1", 1, *tail),
                    E_TYPE, [*flagged(), ["SET", ENDED, "x"]])
    yield _case("settle", "release-replay-of-a-cancelled-end", settle("release", "JOB:1", 1),
                replied([b"CANCELLED"], []), [*cancelled(), ["HSET", key("job"), "f", "1"]])
    yield _case("settle", "flagged-beside-others",
                settle("ack", "JOB:2", 1, "ack", "JOB:1", 1, "retry", "JOB:4", 1, 0, 1, b"e"),
                replied([b"ACKED", b"CANCELLED", b"DEAD"], []),
                [*leased("JOB:2"), *flagged(), *leased("JOB:4")])


def notice_cases() -> Iterator[Case]:
    """A lease flagged now leaves its holder a notice on <base>cancels, ``job <id> fence
    <fence>`` (the row's fence under either layout's name, 0 when it is not an integer), after
    the entries there, the stream keeping its last 1000; a lease flagged before, or a job ended
    at once, leaves none. The stream is checked (absent or a stream) only where a notice goes."""
    name, notices = "cancel", key("cancels")

    def noticed(n: int) -> list[Command]:
        return [["XADD", notices, f"1-{i}", "job", f"JOB:n{i}", "fence", str(i)]
                for i in range(1, n + 1)]

    yield _case(name, "leased-notice-of-its-fence", _argv(name), b"+CANCELLING",
                leased("JOB:1", attempt=2, fence=7))
    yield _case(name, "leased-notice-after-others", _argv(name), b"+CANCELLING",
                [*noticed(2), *leased("JOB:1")])
    yield _case(name, "leased-notices-full", _argv(name), b"+CANCELLING",
                [*noticed(1000), *leased("JOB:1")])
    yield _case(name, "leased-notice-of-an-old-layout-fence", _argv(name), b"+CANCELLING",
                [row("JOB:1", "payload", b"p", "attempts", "1", "fence", "5"),
                 ["ZADD", key("active"), str(NOW + 30_000), "JOB:1"]])
    yield _case(name, "leased-notice-of-a-fence-not-an-integer", _argv(name), b"+CANCELLING",
                [*leased("JOB:1"), ["HSET", key("job"), "f", "x"]])
    yield _case(name, "leased-notices-wrongtype", _argv(name), E_TYPE,
                [*leased("JOB:1"), ["SET", notices, "x"]])
    yield _case(name, "flagged-notices-wrongtype", _argv(name), b"+CANCELLING",
                [*flagged(), ["SET", notices, "x"]])
    yield _case(name, "flagged-no-second-notice", _argv(name), b"+CANCELLING",
                [*flagged(), *noticed(1)])
    yield _case(name, "pending-notices-wrongtype", _argv(name), b"+CANCELLED",
                [*waiting("JOB:1"), ["SET", notices, "x"]])


def heartbeat_cases() -> Iterator[Case]:
    """A flagged lease's heartbeat: extended all the same (its holder may wind down), answering
    CANCELLING; a stale one of a flagged row is STALE."""
    yield _case("extend", "flagged", _argv("extend"), b"+CANCELLING", flagged())
    yield _case("extend", "flagged-stale", _argv("extend", fence=2), b"+STALE", flagged())
    yield _case("extend_many", "one-flagged", list(GOOD["extend_many"]),
                b"*2\r\n+CANCELLING\r\n+EXTENDED\r\n", [*flagged(), *leased("JOB:2")])
    yield _case("extend_many", "flagged-twice-and-stale",
                [1, key("active"), 30_000, NOW, "JOB:1", 1, "JOB:1", 1, "JOB:1", 3],
                b"*3\r\n+CANCELLING\r\n+CANCELLING\r\n+STALE\r\n", flagged())


def ring_left_cases() -> Iterator[Case]:
    """A lane left empty leaves the ring: its entry stays where it stands (``ring`` as it was),
    one more counted in ``ringleft``; a parked group is out of the ring already (nothing
    counted); a count that is not an integer counts as 0."""
    name, others = "cancel", [["RPUSH", key("ring"), "b", "c"], ["RPUSH", key("lane:b"), "JOB:b"],
                              ["RPUSH", key("lane:c"), "JOB:c"]]
    yield _case(name, "alone-in-its-lane-among-others", _argv(name), b"+CANCELLED",
                [*in_lane("JOB:1"), *others])
    yield _case(name, "alone-in-its-lane-left-before", _argv(name), b"+CANCELLED",
                [["RPUSH", key("ring"), "a"], *in_lane("JOB:1"), *others,
                 ["HSET", key("ringleft"), "a", "1", "b", "2"]])
    yield _case(name, "alone-in-its-lane-left-count-not-an-integer", _argv(name),
                b"+CANCELLED", [*in_lane("JOB:1"), ["HSET", key("ringleft"), "a", "x"]])
    for bits in ("1", "4"):
        yield _case(name, f"alone-in-its-lane-parked-{bits}", _argv(name), b"+CANCELLED",
                    [row("JOB:1", "p", b"p", "a", "0", "t", str(NOW - 5), "lane", "a"),
                     ["RPUSH", key("lane:a"), "JOB:1"], ["HSET", key("parked"), "a", bits],
                     *others])
    yield _case(name, "in-its-lane-with-others-left-before", _argv(name), b"+CANCELLED",
                [*in_lane("JOB:1", "a", "JOB:0"), ["HSET", key("ringleft"), "a", "1"]])


def derived_cases() -> Iterator[Case]:
    """The keys cancel derives (step 6), checked whatever the verdict: the ended key, then a lane
    job's lane."""
    name = "cancel"
    for label, ready in (("pending", waiting("JOB:1")), ("unknown", []),
                         ("dead", [row("JOB:1", "p", "p"),
                                   ["ZADD", key("dead"), "9", "JOB:1"]])):
        yield _case(name, f"ended-wrongtype-{label}", _argv(name), E_TYPE,
                    [*ready, ["SET", ENDED, "x"]])
    yield _case(name, "ended-wrongtype-hash", _argv(name), E_TYPE,
                [*leased("JOB:1"), ["HSET", ENDED, "f", "v"]])
    yield _case(name, "lane-wrongtype", _argv(name), E_TYPE,
                [row("JOB:1", "p", b"p", "lane", "a"), ["SET", key("lane:a"), "x"]])
    yield _case(name, "lane-wrongtype-when-leased", _argv(name), E_TYPE,
                [*leased("JOB:1", lane="a"), ["ZADD", key("lane:a"), "1", "x"]])
    yield _case(name, "ended-before-lane", _argv(name), E_TYPE,
                [*in_lane("JOB:1"), ["SET", ENDED, "x"]])
    yield _case(name, "lane-of-another-group-wrongtype", _argv(name), b"+CANCELLED",
                [*in_lane("JOB:1"), ["SET", key("lane:b"), "x"]])
    for suffix in ("parked", "ringleft"):
        # a lane job's: checked whatever the verdict; a flat job's cancel does not look
        yield _case(name, f"lane-{suffix}-wrongtype", _argv(name), E_TYPE,
                    [*in_lane("JOB:1", "a", "JOB:0"), ["SET", key(suffix), "x"]])
        yield _case(name, f"lane-{suffix}-wrongtype-when-leased", _argv(name), E_TYPE,
                    [*leased("JOB:1", lane="a"), ["RPUSH", key(suffix), "x"]])
        yield _case(name, f"flat-{suffix}-wrongtype", _argv(name), b"+CANCELLED",
                    [*waiting("JOB:1"), ["SET", key(suffix), "x"]])
