"""Cases of the lane bookkeeping the flat transitions keep on both executors: a lease of a lane
job leaving active (ack, retry, recover, settle's ack, retry and release) gives its group's slot
back and brings a group parked at its concurrency limit back to the ring; a lane job going back
to its lane leaves a parked group out of the ring; promote reopens the groups whose rate window
has opened; a paused queue leases nothing."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    NOW,
    NULL,
    Case,
    Command,
    _argv,
    _case,
    delayed,
    job,
    key,
    leased,
    settle,
    waiting,
)


def parked(group: str, bits: int, held: int, limit: int | None = 1,
           waiting_ids: tuple[str, ...] = ("JOB:w1",)) -> list[Command]:
    """Group ``group`` holding ``held`` leases, parked with ``bits``, its lane holding jobs."""
    setup: list[Command] = [["HSET", key("leased"), group, str(held)],
                            ["HSET", key("parked"), group, str(bits)]]
    if limit is not None:
        setup.append(["HSET", key("laneconf"), f"concurrency:{group}", str(limit)])
    if waiting_ids:
        setup.append(["RPUSH", key(f"lane:{group}"), *waiting_ids])
    return setup


def lane_lease(group: str = "a", **kwargs: int) -> list[Command]:
    return leased("JOB:1", lane=group, **kwargs)


def release_cases() -> Iterator[Case]:
    """Each way a lane lease leaves active, at the limit and below it."""
    full = parked("a", 1, 1)
    yield _case("ack", "lane-slot-back-to-the-ring", _argv("ack"), b"+ACKED", lane_lease() + full)
    yield _case("ack", "lane-still-at-limit", _argv("ack"), b"+ACKED",
                lane_lease() + parked("a", 1, 3, limit=2))
    yield _case("ack", "lane-full-and-paused", _argv("ack"), b"+ACKED",
                lane_lease() + parked("a", 5, 1))
    yield _case("ack", "lane-full-empty-lane", _argv("ack"), b"+ACKED",
                lane_lease() + parked("a", 1, 1, waiting_ids=()))
    yield _case("ack", "lane-default-limit", _argv("ack"), b"+ACKED",
                lane_lease() + parked("a", 1, 2, limit=None)
                + [["HSET", key("laneconf"), "concurrency", "2"]])
    yield _case("ack", "lane-no-limit-left", _argv("ack"), b"+ACKED",
                lane_lease() + parked("a", 3, 4, limit=None) + [["ZADD", key("throttled"), "9",
                                                                 "a"]])
    yield _case("ack", "lane-held-not-counted", _argv("ack"), b"+ACKED", lane_lease())
    yield _case("ack_result", "lane-slot-back", _argv("ack_result"), b"+ACKED",
                lane_lease() + full)
    yield _case("settle", "lane-done-slot-back", settle("done", "JOB:1", 1, b"r"), b"*2",
                lane_lease() + full)
    yield _case("retry", "lane-slot-back", _argv("retry"), b"+RETRYING", lane_lease() + full)
    yield _case("retry", "lane-dead-slot-back", _argv("retry", max_attempts=1), b"+DEAD",
                lane_lease() + full)
    yield _case("recover", "lane-slot-back", _argv("recover"), b":1",
                lane_lease(deadline=1) + full)
    yield _case("recover", "lane-spent-slot-back", _argv("recover"), b":1",
                lane_lease(attempt=3, deadline=1) + full)
    yield _case("recover", "lane-paused-stays-out", _argv("recover"), b":1",
                lane_lease(deadline=1) + parked("a", 4, 1, waiting_ids=()))
    yield _case("settle", "lane-ack-slot-back", settle("ack", "JOB:1", 1), b"*2",
                lane_lease() + full)
    yield _case("settle", "lane-retry-slot-back",
                settle("retry", "JOB:1", 1, 0, 1, "x"), b"*2", lane_lease() + full)
    yield _case("settle", "lane-release-slot-back", settle("release", "JOB:1", 1), b"*2",
                lane_lease() + full)
    yield _case("settle", "lane-release-ring-empty", settle("release", "JOB:1", 1), b"*2",
                lane_lease() + parked("a", 1, 1, waiting_ids=()))
    yield _case("settle", "lane-release-paused", settle("release", "JOB:1", 1), b"*2",
                lane_lease() + parked("a", 4, 1, waiting_ids=()))


def pause_cases() -> Iterator[Case]:
    paused: list[Command] = [["SET", key("paused"), "1"]]
    yield _case("claim", "queue-paused", _argv("claim"), NULL, waiting("JOB:1") + paused)
    yield _case("claim", "queue-paused-bad-fence", _argv("claim"), b"-EMQFENCE",
                waiting("JOB:1") + paused + [["SET", key("fence"), "x"]])
    yield _case("settle", "queue-paused-claims-none",
                settle("ack", "JOB:1", 1, count=5), b"*2\r\n*1\r\n+ACKED\r\n*0\r\n",
                leased("JOB:1") + waiting("JOB:2") + paused)
    yield _case("settle", "queue-paused-fence-unread", settle(count=1),
                b"*2\r\n*0\r\n*0\r\n", waiting("JOB:2") + paused + [["SET", key("fence"), "x"]])


def reopen_cases() -> Iterator[Case]:
    rated: list[Command] = [["HSET", key("parked"), "a", "2"], ["ZADD", key("throttled"), "5",
                                                                 "a"]]
    yield _case("promote", "lane-window-opens", _argv("promote"), b":0",
                [*rated, ["RPUSH", key("lane:a"), "JOB:w1"]])
    yield _case("promote", "lane-window-opens-still-full", _argv("promote"), b":0",
                [["HSET", key("parked"), "a", "3"], ["ZADD", key("throttled"), "5", "a"],
                 ["RPUSH", key("lane:a"), "JOB:w1"]])
    yield _case("promote", "lane-window-opens-empty-lane", _argv("promote"), b":0", rated)
    yield _case("promote", "lane-window-not-yet", _argv("promote"), b":0",
                [["HSET", key("parked"), "a", "2"], ["ZADD", key("throttled"), str(NOW + 1), "a"],
                 ["RPUSH", key("lane:a"), "JOB:w1"]])
    yield _case("promote", "lane-window-and-jobs", _argv("promote"), b":1",
                [*rated, ["RPUSH", key("lane:a"), "JOB:w1"], *delayed("JOB:b1", 3, "b")])
    yield _case("promote", "lane-job-into-parked-group", _argv("promote"), b":1",
                [*delayed("JOB:a1", 3, "a"), ["HSET", key("parked"), "a", "1"]])
    yield _case("promote", "lane-window-lane-wrongtype", _argv("promote"), b"-WRONGTYPE",
                [*rated, ["SET", key("lane:a"), "x"]])
    # A due job and a reopening group whose lane cannot be touched: nothing moves.
    yield _case("promote", "lane-window-lane-wrongtype-job-due", _argv("promote"), b"-WRONGTYPE",
                [*rated, ["SET", key("lane:a"), "x"], *delayed("JOB:f1", 3)])


def bookkeeping_cases() -> Iterator[Case]:
    """A lane lease whose bookkeeping keys are of another type: refused before anything is
    written, on each transition a lane lease leaves active by; a flat lease does not look."""
    for suffix, value in (("leased", ["SET", key("leased"), "x"]),
                          ("parked", ["RPUSH", key("parked"), "x"]),
                          ("laneconf", ["SADD", key("laneconf"), "x"]),
                          ("ring", ["SET", key("ring"), "x"])):
        broken: list[Command] = [value]
        yield _case("ack", f"lane-{suffix}-wrongtype", _argv("ack"), b"-WRONGTYPE",
                    lane_lease() + broken)
        yield _case("retry", f"lane-{suffix}-wrongtype", _argv("retry"), b"-WRONGTYPE",
                    lane_lease() + broken)
        yield _case("ack_result", f"lane-{suffix}-wrongtype", _argv("ack_result"), b"-WRONGTYPE",
                    lane_lease() + broken)
        yield _case("recover", f"lane-{suffix}-wrongtype", _argv("recover"), b"-WRONGTYPE",
                    lane_lease(deadline=1) + broken)
        if suffix != "ring":  # settle declares the ring: the server's own type check
            yield _case("settle", f"lane-{suffix}-wrongtype", settle("ack", "JOB:1", 1),
                        b"-WRONGTYPE", lane_lease() + broken)
        yield _case("ack", f"flat-{suffix}-wrongtype", _argv("ack"), b"+ACKED",
                    leased("JOB:1") + broken)
    yield _case("recover", "lane-spent-leased-wrongtype", _argv("recover"), b"-WRONGTYPE",
                [*lane_lease(attempt=3, deadline=1), ["SET", key("leased"), "x"]])
    # At its limit the group may come back to the ring if its lane holds jobs: the lane is read,
    # so it is checked, on every way a lane lease leaves active; below its limit it is not read.
    other_lane: list[Command] = [*parked("a", 1, 1, waiting_ids=()), ["SET", key("lane:a"), "x"]]
    yield _case("ack", "lane-full-lane-of-other-type", _argv("ack"), b"-WRONGTYPE",
                lane_lease() + other_lane)
    yield _case("retry", "lane-full-lane-of-other-type", _argv("retry"), b"-WRONGTYPE",
                lane_lease() + other_lane)
    yield _case("recover", "lane-full-lane-of-other-type", _argv("recover"), b"-WRONGTYPE",
                lane_lease(attempt=3, deadline=1) + other_lane)
    yield _case("settle", "lane-full-lane-of-other-type", settle("ack", "JOB:1", 1),
                b"-WRONGTYPE", lane_lease() + other_lane)
    yield _case("ack", "lane-paused-lane-of-other-type", _argv("ack"), b"+ACKED",
                [*lane_lease(), *parked("a", 4, 1, waiting_ids=()), ["SET", key("lane:a"), "x"]])
    yield _case("settle", "lane-stale-leased-wrongtype", settle("ack", "JOB:1", 7),
                b"-WRONGTYPE", [*lane_lease(), ["SET", key("leased"), "x"]])


def promote_bookkeeping_cases() -> Iterator[Case]:
    """promote reads and writes the parked groups (a lane job going back to its lane, a group
    reopened) and the groups over their rate: either of another type is refused before anything
    is written, whatever is due."""
    for suffix, value in (("parked", ["SET", key("parked"), "x"]),
                          ("throttled", ["SET", key("throttled"), "x"])):
        broken: list[Command] = [value]
        yield _case("promote", f"{suffix}-wrongtype-lane-job-due", _argv("promote"),
                    b"-WRONGTYPE", [*delayed("JOB:a1", 3, "a"), *broken])
        yield _case("promote", f"{suffix}-wrongtype-flat-job-due", _argv("promote"),
                    b"-WRONGTYPE", [*delayed("JOB:f1", 3), *broken])
        yield _case("promote", f"{suffix}-wrongtype-nothing-due", _argv("promote"),
                    b"-WRONGTYPE", broken)
    yield _case("promote", "parked-wrongtype-window-opens", _argv("promote"), b"-WRONGTYPE",
                [["ZADD", key("throttled"), "5", "a"], ["RPUSH", key("lane:a"), "JOB:w1"],
                 ["SET", key("parked"), "x"]])


def fence_counter_cases() -> Iterator[Case]:
    """A lease takes the next fence by SET on the counter: an existing counter is overwritten
    (one "set" event, no "new"), an absent one created."""
    yield _case("claim", "fence-counter-exists", _argv("claim"),
                job("JOB:1", 1, 8),
                [*waiting("JOB:1"), ["SET", key("fence"), "7"]])
    yield _case("claim", "fence-counter-large", _argv("claim"), b"*4",
                [*waiting("JOB:1"), ["SET", key("fence"), "123456789012"]])
    yield _case("settle", "fence-counter-exists-two-leases", settle(count=2), b"*2",
                [*waiting("JOB:1"), *waiting("JOB:2", NOW + 1), ["SET", key("fence"), "7"]])
    # Nothing to lease: the counter is read, not written, and stays as it was stored.
    yield _case("claim", "fence-counter-empty-queue", _argv("claim"), NULL,
                [["SET", key("fence"), "7"]])
    yield _case("settle", "fence-counter-empty-queue", settle(count=2), b"*2\r\n*0\r\n*0\r\n",
                [["SET", key("fence"), "7"]])


def parity_cases() -> list[Case]:
    """The cases whose keyspace events are compared too (tests/conformance/test_events.py)."""
    return [*promote_bookkeeping_cases(), *fence_counter_cases()]


def lane_cases() -> list[Case]:
    return [*release_cases(), *pause_cases(), *reopen_cases(), *bookkeeping_cases(),
            *parity_cases()]
