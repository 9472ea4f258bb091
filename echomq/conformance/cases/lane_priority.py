"""Cases of priority inside a lane, on the transitions both executors run: a lane job of priority
p != 0 waits in its group's ``prio:<group>`` zset at pending_score(p, t), next to the lane's list
of its priority-0 jobs. recover and settle's release put such a job back at its enqueued_at,
promote at its due time (clamped at TIME_CAP), a bad ``priority`` field counting as 0; a group is
empty only when both keys are (the ring joined once, a group parked at its limit or over its rate
back to the ring when its jobs are only prioritised); ``prio:<group>`` is checked (its type)
wherever the lane key is; cancel takes a job out of it."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    NOW,
    Case,
    Command,
    _argv,
    _case,
    delayed,
    key,
    leased,
    settle,
)

BAND = 2**45
INT_MAX = 999_999_999_999_999


def prioritised(job_id: str, priority: str, group: str = "a") -> list[Command]:
    """The row of ``job_id`` given a ``priority`` field (bytes as stored)."""
    return [["HSET", key("job", job_id), "priority", priority, "lane", group]]


def in_prio(job_id: str, score: int, group: str = "a") -> list[Command]:
    """A prioritised lane job waiting in its group's prio zset, its group in the ring."""
    return [["HSET", key("job", job_id), "p", "p", "a", "0", "t",
             str(NOW - 50), "lane", group, "priority", "9"],
            ["ZADD", key(f"prio:{group}"), str(score), job_id]]


def parked_full(group: str = "a", held: int = 1) -> list[Command]:
    return [["HSET", key("leased"), group, str(held)], ["HSET", key("parked"), group, "1"],
            ["HSET", key("laneconf"), f"concurrency:{group}", "1"]]


def put_back_cases() -> Iterator[Case]:
    """recover, release and promote of a prioritised lane job: into the prio zset, the group
    joining the ring only when both its keys were empty."""
    for p in ("7", "-3", "100", "-100"):
        yield _case("recover", f"lane-prio-{p}-back", _argv("recover"), b":1",
                    [*leased("JOB:1", deadline=1, lane="a"), *prioritised("JOB:1", p)])
        yield _case("settle", f"lane-prio-{p}-released", settle("release", "JOB:1", 1), b"*2",
                    [*leased("JOB:1", lane="a"), *prioritised("JOB:1", p)])
        yield _case("promote", f"lane-prio-{p}-due", _argv("promote"), b":1",
                    [*delayed("JOB:1", NOW - 10, "a"), *prioritised("JOB:1", p)])
    for bad in ("abc", "101", "+1", "", "5 "):
        yield _case("recover", f"lane-prio-field-{bad.strip() or 'empty'}-counts-0",
                    _argv("recover"), b":1",
                    [*leased("JOB:1", deadline=1, lane="a"), *prioritised("JOB:1", bad)])
    # the group holds prioritised jobs: already in the ring, not pushed again
    behind = [*in_prio("JOB:9", -5 * BAND), ["RPUSH", key("ring"), "a"]]
    yield _case("recover", "lane-p0-back-behind-prio", _argv("recover"), b":1",
                [*leased("JOB:1", deadline=1, lane="a"), *behind])
    yield _case("recover", "lane-prio-back-behind-prio", _argv("recover"), b":1",
                [*leased("JOB:1", deadline=1, lane="a"), *prioritised("JOB:1", "2"), *behind])
    yield _case("settle", "lane-p0-released-behind-prio", settle("release", "JOB:1", 1), b"*2",
                [*leased("JOB:1", lane="a"), *behind])
    yield _case("promote", "lane-p0-due-behind-prio", _argv("promote"), b":1",
                [*delayed("JOB:1", NOW - 10, "a"), *behind])
    yield _case("promote", "lane-prio-due-behind-list", _argv("promote"), b":1",
                [*delayed("JOB:1", NOW - 10, "a"), *prioritised("JOB:1", "4"),
                 ["RPUSH", key("lane:a"), "JOB:8"], ["RPUSH", key("ring"), "a"]])
    yield _case("promote", "lane-prio-due-parked", _argv("promote"), b":1",
                [*delayed("JOB:1", NOW - 10, "a"), *prioritised("JOB:1", "4"),
                 ["HSET", key("parked"), "a", "4"]])
    # a due score set behind the queue's back: its integer part, never below 0, as a flat job's
    for label, due in (("fractional", "1.5"), ("minus-inf", "-inf")):
        yield _case("promote", f"lane-prio-due-{label}", _argv("promote"), b":1",
                    [*delayed("JOB:1", 1, "a"), *prioritised("JOB:1", "6"),
                     ["ZADD", key("delayed"), due, "JOB:1"]])
    # the score's time is clamped at TIME_CAP: priority order holds past the year 3084
    yield _case("promote", "lane-prio-due-clamped", _argv("promote", now=INT_MAX), b":1",
                [*delayed("JOB:1", BAND + 5, "a"), *prioritised("JOB:1", "3")])
    yield _case("recover", "lane-prio-enqueued-clamped", _argv("recover", now=INT_MAX), b":1",
                [*leased("JOB:1", deadline=1, lane="a"), *prioritised("JOB:1", "-2"),
                 ["HSET", key("job"), "t", str(INT_MAX)]])


def emptiness_cases() -> Iterator[Case]:
    """A group whose only jobs are prioritised is not empty: back to the ring when a slot is
    given back at its limit, or its rate window opens."""
    yield _case("ack", "lane-full-only-prio-jobs", _argv("ack"), b"+ACKED",
                [*leased("JOB:1", lane="a"), *parked_full(), *in_prio("JOB:9", -BAND)])
    yield _case("settle", "lane-full-only-prio-jobs", settle("ack", "JOB:1", 1), b"*2",
                [*leased("JOB:1", lane="a"), *parked_full(), *in_prio("JOB:9", 2 * BAND)])
    yield _case("recover", "lane-full-only-prio-jobs", _argv("recover"), b":1",
                [*leased("JOB:1", attempt=3, deadline=1, lane="a"), *parked_full(),
                 *in_prio("JOB:9", -BAND)])
    yield _case("promote", "lane-window-opens-only-prio-jobs", _argv("promote"), b":0",
                [["HSET", key("parked"), "a", "2"], ["ZADD", key("throttled"), "5", "a"],
                 *in_prio("JOB:9", -BAND)])


def wrongtype_cases() -> Iterator[Case]:
    """prio:<group> of another type: refused before anything is written, wherever the lane key
    is checked."""
    for value in (["SET", key("prio:a"), "x"], ["RPUSH", key("prio:a"), "x"]):
        kind = value[0].lower()
        yield _case("recover", f"lane-prio-key-{kind}", _argv("recover"), b"-WRONGTYPE",
                    [*leased("JOB:1", deadline=1, lane="a"), value])
        yield _case("settle", f"lane-release-prio-key-{kind}", settle("release", "JOB:1", 1),
                    b"-WRONGTYPE", [*leased("JOB:1", lane="a"), value])
        yield _case("promote", f"lane-prio-key-{kind}", _argv("promote"), b"-WRONGTYPE",
                    [*delayed("JOB:1", NOW - 10, "a"), value])
        yield _case("promote", f"lane-window-prio-key-{kind}", _argv("promote"), b"-WRONGTYPE",
                    [["HSET", key("parked"), "a", "2"], ["ZADD", key("throttled"), "5", "a"],
                     value])
        yield _case("ack", f"lane-full-prio-key-{kind}", _argv("ack"), b"-WRONGTYPE",
                    [*leased("JOB:1", lane="a"), *parked_full(), value])
        yield _case("cancel", f"lane-prio-key-{kind}", _argv("cancel"), b"-WRONGTYPE",
                    [*in_prio("JOB:1", -BAND), ["DEL", key("prio:a")], value])
    # below its limit the group's keys are not read: not checked
    yield _case("ack", "lane-below-limit-prio-key-set", _argv("ack"), b"+ACKED",
                [*leased("JOB:1", lane="a"), ["SET", key("prio:a"), "x"]])


def cancel_prio_cases() -> Iterator[Case]:
    """cancel takes a prioritised lane job out of its zset; the group leaves the ring when both
    its keys are empty, not before."""
    yield _case("cancel", "lane-prio-job", _argv("cancel"), b"+CANCELLED",
                [*in_prio("JOB:1", -BAND), ["RPUSH", key("ring"), "a"]])
    yield _case("cancel", "lane-prio-job-list-left", _argv("cancel"), b"+CANCELLED",
                [*in_prio("JOB:1", -BAND), ["RPUSH", key("lane:a"), "JOB:7"],
                 ["RPUSH", key("ring"), "a"]])
    yield _case("cancel", "lane-list-job-prio-left", _argv("cancel"), b"+CANCELLED",
                [["HSET", key("job"), "p", "p", "a", "0", "t", str(NOW),
                  "lane", "a"], ["RPUSH", key("lane:a"), "JOB:1"], *in_prio("JOB:7", BAND),
                 ["RPUSH", key("ring"), "a"]])
    yield _case("cancel", "lane-prio-job-no-retention", _argv("cancel", retention_ms=0),
                b"+CANCELLED", [*in_prio("JOB:1", -BAND), ["RPUSH", key("ring"), "a"]])


def model_cases() -> list[Case]:
    """The cases the model follows too (it keeps no lane slots: no lane lease ends here; its
    scores are integers: no due score set behind the queue's back)."""
    return [*cancel_prio_cases(),
            *(case for case in put_back_cases() if case.transition.name == "promote"
              and not any(word in case.label for word in ("parked", "fractional", "inf")))]


def lane_priority_cases() -> list[Case]:
    return [*put_back_cases(), *emptiness_cases(), *wrongtype_cases(), *cancel_prio_cases()]
