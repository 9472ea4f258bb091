"""Cases of the queue-wide limits (``<base>queueconf``: ``concurrency``, ``rate``,
``window_ms``) on both executors: claim and settle's claim part lease what fits (possibly
nothing); the queue is held (field ``held``) while active holds ``concurrency`` leases and jobs
wait, and a lease leaving active while it is held leaves a wake token; over its rate with jobs
waiting, its window's opening waits in ``throttled`` under the member ``*``; the derived keys'
checks (``WRONGTYPE``)."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    E_TYPE,
    NOW,
    NULL,
    Case,
    Command,
    _argv,
    _case,
    job,
    key,
    leased,
    replied,
    settle,
    waiting,
)


def conf(*fields: str) -> list[Command]:
    """The queue's ``queueconf`` holding ``fields`` (pairs)."""
    return [["HSET", key("queueconf"), *fields]]


def held() -> list[Command]:
    return conf("concurrency", "1", "held", "1")


def claim_cases() -> Iterator[Case]:
    """claim under each limit, below and at it."""
    yield _case("claim", "limits-none-set", _argv("claim"), b"*4", waiting("JOB:1"))
    yield _case("claim", "limits-concurrency-room", _argv("claim"), b"*4",
                waiting("JOB:1") + conf("concurrency", "2") + leased("JOB:9"))
    yield _case("claim", "limits-concurrency-full", _argv("claim"), NULL,
                waiting("JOB:1") + conf("concurrency", "1") + leased("JOB:9"))
    yield _case("claim", "limits-concurrency-full-held-already", _argv("claim"), NULL,
                waiting("JOB:1") + held() + leased("JOB:9"))
    yield _case("claim", "limits-concurrency-last-slot", _argv("claim"), b"*4",
                waiting("JOB:1") + waiting("JOB:2") + conf("concurrency", "2") + leased("JOB:9"))
    yield _case("claim", "limits-concurrency-last-slot-last-job", _argv("claim"), b"*4",
                waiting("JOB:1") + held() + conf("concurrency", "2") + leased("JOB:9"))
    yield _case("claim", "limits-concurrency-empty-queue", _argv("claim"), NULL,
                held() + leased("JOB:9"))
    yield _case("claim", "limits-concurrency-bad-knob", _argv("claim"), b"*4",
                waiting("JOB:1") + conf("concurrency", "0") + leased("JOB:9"))
    yield _case("claim", "limits-concurrency-lowered-held-cleared", _argv("claim"), b"*4",
                waiting("JOB:1") + conf("held", "1"))
    yield _case("claim", "limits-rate-new-window", _argv("claim"), b"*4",
                waiting("JOB:1") + waiting("JOB:2") + conf("rate", "2"))
    yield _case("claim", "limits-rate-last-in-window", _argv("claim"), b"*4",
                waiting("JOB:1") + waiting("JOB:2")
                + conf("rate", "2", "window_ms", "500", "window", f"{NOW - 100} 1"))
    yield _case("claim", "limits-rate-over", _argv("claim"), NULL,
                waiting("JOB:1") + conf("rate", "2", "window", f"{NOW - 100} 2"))
    yield _case("claim", "limits-rate-over-throttled-already", _argv("claim"), NULL,
                [*waiting("JOB:1"), *conf("rate", "2", "window", f"{NOW - 100} 2"),
                 ["ZADD", key("throttled"), str(NOW + 900), "*"]])
    yield _case("claim", "limits-rate-window-opened", _argv("claim"), b"*4",
                [*waiting("JOB:1"), *conf("rate", "2", "window", f"{NOW - 1000} 2"),
                 ["ZADD", key("throttled"), str(NOW), "*"]])
    yield _case("claim", "limits-rate-bad-window", _argv("claim"), b"*4",
                waiting("JOB:1") + conf("rate", "1", "window", "x 1"))
    yield _case("claim", "limits-both", _argv("claim"), NULL,
                waiting("JOB:1") + conf("rate", "5", "concurrency", "1") + leased("JOB:9"))
    yield _case("claim", "limits-conf-wrongtype", _argv("claim"), E_TYPE,
                [*waiting("JOB:1"), ["SET", key("queueconf"), "x"]])
    yield _case("claim", "limits-throttled-wrongtype", _argv("claim"), E_TYPE,
                [*waiting("JOB:1"), *conf("rate", "1"), ["SET", key("throttled"), "x"]])
    yield _case("claim", "limits-paused-first", _argv("claim"), NULL,
                [*waiting("JOB:1"), ["SET", key("queueconf"), "x"], ["SET", key("paused"), "1"]])


def settle_cases() -> Iterator[Case]:
    """settle's claim part leases what fits after its items."""
    three = waiting("JOB:3") + waiting("JOB:4") + waiting("JOB:5")
    yield _case("settle", "limits-concurrency-cut", settle(count=3),
                replied([], [job("JOB:3", 1, 1)]), three + conf("concurrency", "2")
                + leased("JOB:9"))
    yield _case("settle", "limits-concurrency-items-free", settle("ack", "JOB:1", 1, count=3),
                replied([b"ACKED"], [job("JOB:3", 1, 1)]),
                three + conf("concurrency", "1") + leased("JOB:1"))
    yield _case("settle", "limits-concurrency-held-ack-wakes", settle("ack", "JOB:1", 1, count=0),
                replied([b"ACKED"], []), three + held() + leased("JOB:1"))
    yield _case("settle", "limits-concurrency-full", settle(count=2), replied([], []),
                three + conf("concurrency", "1") + leased("JOB:9"))
    yield _case("settle", "limits-rate-cut", settle(count=3),
                replied([], [job("JOB:3", 1, 1), job("JOB:4", 1, 2)]),
                three + conf("rate", "2", "window_ms", "1000"))
    yield _case("settle", "limits-rate-exactly", settle(count=2),
                replied([], [job("JOB:3", 1, 1), job("JOB:4", 1, 2)]),
                waiting("JOB:3") + waiting("JOB:4") + conf("rate", "2"))
    yield _case("settle", "limits-count-zero-unread", settle("ack", "JOB:1", 1, count=0),
                replied([b"ACKED"], []), [*leased("JOB:1"), *conf("rate", "1"),
                 ["SET", key("throttled"), "x"]])
    yield _case("settle", "limits-conf-wrongtype", settle(count=1), E_TYPE,
                [*three, ["SET", key("queueconf"), "x"]])


def release_cases() -> Iterator[Case]:
    """A lease leaving active: a wake token while the queue is held, nothing else."""
    yield _case("ack", "limits-held-wakes", _argv("ack"), b"+ACKED", leased("JOB:1") + held())
    yield _case("ack", "limits-not-held", _argv("ack"), b"+ACKED",
                leased("JOB:1") + conf("concurrency", "1"))
    yield _case("ack", "limits-held-wake-full", _argv("ack"), b"+ACKED",
                [*leased("JOB:1"), *held(), ["RPUSH", key("wake"), *["1"] * 64]])
    yield _case("ack", "limits-conf-wrongtype", _argv("ack"), E_TYPE,
                [*leased("JOB:1"), ["SET", key("queueconf"), "x"]])
    yield _case("ack", "limits-held-wake-wrongtype", _argv("ack"), E_TYPE,
                [*leased("JOB:1"), *held(), ["SET", key("wake"), "x"]])
    yield _case("ack", "limits-stale-unchecked", _argv("ack", fence=2), b"+STALE",
                [*leased("JOB:1"), ["SET", key("queueconf"), "x"]])
    yield _case("ack_result", "limits-held-wakes", _argv("ack_result"), b"+ACKED",
                leased("JOB:1") + held())
    yield _case("retry", "limits-held-wakes", _argv("retry"), b"+RETRYING",
                leased("JOB:1") + held())
    yield _case("retry", "limits-held-dead-wakes", _argv("retry", max_attempts=1), b"+DEAD",
                leased("JOB:1") + held())
    yield _case("recover", "limits-held-wakes", _argv("recover"), b":1",
                leased("JOB:1", deadline=NOW - 1) + held())
    yield _case("recover", "limits-held-wakes-empty-wake", _argv("recover"), b":2",
                leased("JOB:1", deadline=NOW - 1) + leased("JOB:2", attempt=3, deadline=NOW - 2)
                + held())
    yield _case("recover", "limits-conf-wrongtype", _argv("recover"), E_TYPE,
                [*leased("JOB:1", deadline=NOW - 1), ["SET", key("queueconf"), "x"]])
    yield _case("settle", "limits-held-release-wakes", settle("release", "JOB:1", 1),
                replied([b"RELEASED"], []), leased("JOB:1") + held())
    yield _case("settle", "limits-held-retry-wakes", settle("retry", "JOB:1", 1, 0, 3, "x"),
                replied([b"RETRYING"], []), leased("JOB:1") + held())


def limit_cases() -> Iterator[Case]:
    yield from claim_cases()
    yield from settle_cases()
    yield from release_cases()
