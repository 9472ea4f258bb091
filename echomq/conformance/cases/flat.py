"""Cases of the single verbs, each on chosen states: enqueue and enqueue_delayed (duplicates,
wake tokens), ack_result (the result's cap), claim (ghosts, order, the fence counter in every
state), ack and retry (fences current and stale, tombstones, the ended key), extend, progress
(fenced as extend; its cap), recover (spent leases go dead) and promote."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    E_FENCE,
    E_NUM,
    E_PROGRESS_SIZE,
    E_SIZE,
    E_TYPE,
    FENCE_MAX,
    GOOD,
    MAXINT,
    NOW,
    NULL,
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
from echomq.conformance.resp import Arg


def enqueue_cases() -> Iterator[Case]:
    yield _case("enqueue", "binary-payload", _argv("enqueue", payload=b"\x00\xff\r\n$-1"),
                b"+ENQUEUED")
    yield _case("enqueue", "empty-payload", _argv("enqueue", payload=b""), b"+ENQUEUED")
    yield _case("enqueue", "duplicate-live", _argv("enqueue", payload=b"new"), b"+DUPLICATE",
                waiting("JOB:1", payload=b"old"))
    yield _case("enqueue", "duplicate-tombstone", _argv("enqueue"), b"+DUPLICATE",
                [row("JOB:1", "a", "1", "t", "5"),
                 ["PEXPIRE", key("job"), "100000"]])
    yield _case("enqueue", "duplicate-dead", _argv("enqueue"), b"+DUPLICATE",
                [row("JOB:1", "p", "p", "a", "5", "t", "5"),
                 ["ZADD", key("dead"), "9", "JOB:1"]])
    yield _case("enqueue", "wake-full", _argv("enqueue"), b"+ENQUEUED",
                [["RPUSH", key("wake"), *(["1"] * 64)]])
    yield _case("enqueue", "wake-almost-full", _argv("enqueue"), b"+ENQUEUED",
                [["RPUSH", key("wake"), *(["1"] * 63)]])
    yield _case("enqueue", "after-others", _argv("enqueue", now=NOW - 10), b"+ENQUEUED",
                waiting("JOB:0") + waiting("JOB:2", at=NOW - 10))


def enqueue_delayed_cases() -> Iterator[Case]:
    name = "enqueue_delayed"
    yield _case(name, "no-delay", _argv(name, delay_ms=0), b"+ENQUEUED")
    yield _case(name, "at-later-than-the-delay", _argv(name, at_ms=NOW + 9_000), b"+ENQUEUED")
    yield _case(name, "at-earlier-than-the-delay", _argv(name, at_ms=NOW + 1), b"+ENQUEUED")
    yield _case(name, "at-in-the-past", _argv(name, delay_ms=0, at_ms=5), b"+ENQUEUED")
    yield _case(name, "at-only", _argv(name, delay_ms=0, at_ms=NOW + 70_000), b"+ENQUEUED")
    yield _case(name, "binary-payload", _argv(name, payload=b"\x00\xff\r\n$-1"), b"+ENQUEUED")
    yield _case(name, "empty-payload", _argv(name, payload=b""), b"+ENQUEUED")
    yield _case(name, "duplicate-live", _argv(name), b"+DUPLICATE", waiting("JOB:1"))
    yield _case(name, "duplicate-delayed", _argv(name, delay_ms=1), b"+DUPLICATE",
                delayed("JOB:1", due=NOW + 5))
    yield _case(name, "duplicate-tombstone", _argv(name), b"+DUPLICATE",
                [row("JOB:1", "a", "1", "t", "5", "result", "r"),
                 ["PEXPIRE", key("job"), "100000"]])
    yield _case(name, "duplicate-dead", _argv(name), b"+DUPLICATE",
                [row("JOB:1", "p", "p", "a", "5", "t", "5"),
                 ["ZADD", key("dead"), "9", "JOB:1"]])
    yield _case(name, "after-others", _argv(name), b"+ENQUEUED",
                delayed("JOB:0", due=NOW + 5_000) + delayed("JOB:2", due=NOW + 1))
    yield _case(name, "wake-full", _argv(name), b"+ENQUEUED",
                [["RPUSH", key("wake"), *(["1"] * 64)]])
    yield _case(name, "largest-due", _argv(name, now=MAXINT, delay_ms=MAXINT), b"+ENQUEUED")


RESULT_AT_CAP = b"r" * 524_288
RESULT_OVER_CAP = b"r" * 524_289


def ack_result_cases() -> Iterator[Case]:
    name = "ack_result"
    yield from fenced_cases(name, b"+ACKED")
    yield _case(name, "no-retention", _argv(name, retention_ms=0), b"+ACKED", leased("JOB:1"))
    yield _case(name, "binary-result", _argv(name, result=b"\x00\xff\r\n$-1"), b"+ACKED",
                leased("JOB:1"))
    yield _case(name, "empty-result", _argv(name, result=b""), b"+ACKED", leased("JOB:1"))
    yield _case(name, "result-at-the-cap", _argv(name, result=RESULT_AT_CAP), b"+ACKED",
                leased("JOB:1"))
    yield _case(name, "result-over-the-cap", _argv(name, result=RESULT_OVER_CAP), E_SIZE,
                leased("JOB:1"))
    yield _case(name, "result-over-the-cap-when-stale",
                _argv(name, fence=9, result=RESULT_OVER_CAP), E_SIZE, leased("JOB:1"))
    yield _case(name, "bad-retention-before-the-size",
                _argv(name, retention_ms="x", result=RESULT_OVER_CAP), E_NUM, leased("JOB:1"))
    yield _case(name, "size-before-types", _argv(name, result=RESULT_OVER_CAP), E_SIZE,
                [["SET", key("active"), "x"]])
    yield from ended_cases(name, b"+ACKED")
    yield _case(name, "no-token-without-a-tombstone", _argv(name, retention_ms=0), b"+ACKED",
                leased("JOB:1"))
    yield _case(name, "result-replaced", _argv(name), b"+ACKED",
                [*leased("JOB:1"), ["HSET", key("job"), "result", "old"]])
    yield _case(name, "row-without-payload", _argv(name), b"+ACKED",
                [row("JOB:1", "a", "1", "f", "1"),
                 ["ZADD", key("active"), "1", "JOB:1"]])


ENDED = key("ended:JOB:1")


def ended_cases(name: str, ok: bytes) -> Iterator[Case]:
    """The job's ended key, derived from its id (step 6): absent or a list, checked whatever the
    lease; a token already there is not pushed twice."""
    ready = leased("JOB:1", attempt=3, fence=1)
    yield _case(name, "ended-token-already-there", _argv(name), ok,
                [*ready, ["RPUSH", ENDED, "1"]])
    yield _case(name, "ended-wrongtype", _argv(name), E_TYPE, [*ready, ["SET", ENDED, "x"]])
    yield _case(name, "ended-wrongtype-zset", _argv(name), E_TYPE,
                [*ready, ["ZADD", ENDED, "1", "x"]])
    yield _case(name, "ended-wrongtype-when-stale", _argv(name, fence=9), E_TYPE,
                [*ready, ["HSET", ENDED, "f", "v"]])
    yield _case(name, "ended-of-another-job-wrongtype", _argv(name), ok,
                [*ready, ["SET", key("ended:JOB:2"), "x"]])


def claim_cases() -> Iterator[Case]:
    yield _case("claim", "empty-queue", list(GOOD["claim"]), NULL)
    yield _case("claim", "fence-bad-with-ghosts", list(GOOD["claim"]), E_FENCE,
                [["ZADD", key("pending"), "1", "JOB:g1"], ["SET", key("fence"), "x"]])
    yield _case("claim", "oldest-first", list(GOOD["claim"]), b"*4",
                waiting("JOB:b", at=5) + waiting("JOB:a", at=7) + waiting("JOB:c", at=5))
    yield _case("claim", "ghost-then-live", list(GOOD["claim"]), b"*4",
                [["ZADD", key("pending"), "1", "JOB:ghost"], *waiting("JOB:2", at=9)])
    yield _case("claim", "only-ghosts", list(GOOD["claim"]), NULL,
                [["ZADD", key("pending"), "1", "JOB:g1", "2", "JOB:g2"]])
    yield _case("claim", "ghost-row-of-other-type", list(GOOD["claim"]), b"*4",
                [["ZADD", key("pending"), "1", "JOB:s"], ["SET", key("job", "JOB:s"), "x"],
                 *waiting("JOB:2")])
    yield _case("claim", "attempts-not-a-number", list(GOOD["claim"]), b"*4",
                [row("JOB:1", "p", "p", "a", "x1"), ["ZADD", key("pending"), "1",
                                                                   "JOB:1"]])
    yield _case("claim", "row-without-payload", list(GOOD["claim"]), b"*4",
                [row("JOB:1", "a", "4"), ["ZADD", key("pending"), "1", "JOB:1"]])
    yield _case("claim", "binary-payload", list(GOOD["claim"]), b"*4",
                waiting("JOB:1", payload=b"\x00\r\n*1\r\n"))
    yield _case("claim", "max-lease-and-now",
                [3, key("pending"), key("active"), key("fence"), MAXINT, MAXINT], b"*4",
                waiting("JOB:1"))
    yield _case("claim", "second-attempt", list(GOOD["claim"]), b"*4",
                [row("JOB:1", "p", "p", "a", "2"),
                 ["ZADD", key("pending"), "1", "JOB:1"]])
    yield from fence_counter_cases("claim", list(GOOD["claim"]), waiting("JOB:1"),
                                   b"*4\r\n$5\r\nJOB:1\r\n$1\r\np\r\n:1\r\n")
    yield from old_layout_claim_cases()


def old_layout_claim_cases() -> Iterator[Case]:
    """A row an earlier release wrote (``payload``, ``attempts``, ``enqueued_at``, ``fence``):
    the lease upgrades it and replies its payload and attempts (docs/PROTOCOL.md, "The job
    row")."""
    yield _case("claim", "old-layout-row", list(GOOD["claim"]),
                b"*4\r\n$5\r\nJOB:1\r\n$3\r\nold\r\n:3\r\n:1\r\n", OLD_LAYOUT)
    yield _case("claim", "old-layout-row-half-upgraded", list(GOOD["claim"]),
                b"*4\r\n$5\r\nJOB:1\r\n$3\r\nnew\r\n:5\r\n:1\r\n",
                [row("JOB:1", "payload", b"old", "p", b"new", "attempts", "2", "a", "4",
                     "enqueued_at", "7", "t", "9", "fence", "3"),
                 ["ZADD", key("pending"), "1", "JOB:1"]])
    yield _case("claim", "old-layout-attempts-zero", list(GOOD["claim"]),
                b"*4\r\n$5\r\nJOB:1\r\n$0\r\n\r\n:1\r\n:1\r\n",
                [row("JOB:1", "payload", b"", "attempts", "0"),
                 ["ZADD", key("pending"), "1", "JOB:1"]])


OLD_LAYOUT: list[Command] = [row("JOB:1", "payload", b"old", "attempts", "2", "enqueued_at", "7",
                                 "fence", "3", "error", b"boom"),
                             ["ZADD", key("pending"), "1", "JOB:1"]]


def claimed(fence: int) -> bytes:
    return b":" + str(fence).encode() + b"\r\n"


BAD_FENCE_COUNTERS: list[tuple[str, Arg]] = [
    ("past-its-end", MAXINT), ("word", "x"), ("empty", ""), ("negative", "-1"), ("float", "1.5"),
    ("sixteen-digits", "1" * 16), ("space", " 1"), ("nul", b"1\x00")]


def fence_counter_cases(name: str, argv: list[Arg], ready: list[Command],
                        reply: bytes) -> Iterator[Case]:
    """The queue's fence counter in every state: absent, counting, at its end, not a counter."""
    counter = key("fence")
    yield _case(name, "fence-first", argv, reply + claimed(1), ready)
    yield _case(name, "fence-counts-on", argv, reply + claimed(42),
                [*ready, ["SET", counter, "41"]])
    yield _case(name, "fence-from-zero", argv, reply + claimed(1), [*ready, ["SET", counter, "0"]])
    yield _case(name, "fence-leading-zeros", argv, reply + claimed(8),
                [*ready, ["SET", counter, "007"]])
    yield _case(name, "fence-at-its-end", argv, reply + claimed(int(MAXINT)),
                [*ready, ["SET", counter, FENCE_MAX]])
    yield _case(name, "fence-counter-with-ttl", argv, reply + claimed(6),
                [*ready, ["SET", counter, "5"], ["PEXPIRE", counter, "100000"]])
    yield _case(name, "fence-untouched-when-empty", argv, NULL, [["SET", counter, "5"]])
    for label, bad in BAD_FENCE_COUNTERS:
        yield _case(name, f"fence-{label}", argv, E_FENCE, [*ready, ["SET", counter, bad]])
    yield _case(name, "fence-bad-on-an-empty-queue", argv, E_FENCE, [["SET", counter, "x"]])


def fenced_cases(name: str, ok: bytes) -> Iterator[Case]:
    yield _case(name, "stale-fence", _argv(name, fence=2), b"+STALE", leased("JOB:1"))
    yield _case(name, "older-fence", _argv(name, fence=6), b"+STALE", leased("JOB:1", fence=7))
    yield _case(name, "attempt-is-not-the-fence", _argv(name, fence=1), b"+STALE",
                leased("JOB:1", attempt=1, fence=9))
    yield _case(name, "row-without-fence", _argv(name), b"+STALE",
                [row("JOB:1", "p", "p", "a", "1"),
                 ["ZADD", key("active"), "1", "JOB:1"]])
    yield _case(name, "fence-not-a-number", _argv(name), b"+STALE",
                [*leased("JOB:1"), ["HSET", key("job"), "f", "1x"]])
    yield _case(name, "not-in-active", _argv(name), b"+STALE",
                [row("JOB:1", "p", "p", "a", "1", "f", "1")])
    yield _case(name, "row-gone", _argv(name), b"+STALE",
                [["ZADD", key("active"), "1", "JOB:1"]])
    yield _case(name, "no-such-job", _argv(name), b"+STALE")
    yield _case(name, "later-fence", _argv(name, fence=7), ok, leased("JOB:1", fence=7))
    yield _case(name, "fence-arg-with-leading-zeros", _argv(name, fence="0007"), ok,
                leased("JOB:1", fence=7))
    yield _case(name, "largest-fence", _argv(name, fence=MAXINT), ok,
                leased("JOB:1", fence=int(MAXINT)))
    yield _case(name, "expired-but-current", _argv(name), ok, leased("JOB:1", deadline=1))


def ack_cases() -> Iterator[Case]:
    yield from fenced_cases("ack", b"+ACKED")
    yield _case("ack", "no-retention", _argv("ack", retention_ms=0), b"+ACKED", leased("JOB:1"))
    yield _case("ack", "tombstone", _argv("ack", retention_ms=5_000), b"+ACKED", leased("JOB:1"))
    yield _case("ack", "tombstone-without-payload", _argv("ack"), b"+ACKED",
                [row("JOB:1", "a", "1", "f", "1"),
                 ["ZADD", key("active"), "1", "JOB:1"]])


def retry_cases() -> Iterator[Case]:
    yield from fenced_cases("retry", b"+RETRYING")
    yield _case("retry", "dead-at-max", _argv("retry"), b"+DEAD",
                leased("JOB:1", attempt=3, fence=1))
    yield _case("retry", "dead-beyond-max", _argv("retry", fence=12), b"+DEAD",
                leased("JOB:1", attempt=4, fence=12))
    yield _case("retry", "below-max-whatever-the-fence", _argv("retry", fence=40), b"+RETRYING",
                leased("JOB:1", attempt=2, fence=40))
    yield _case("retry", "attempts-not-a-number", _argv("retry"), b"+RETRYING",
                [*leased("JOB:1"), ["HSET", key("job"), "a", "x"]])
    yield _case("retry", "max-one", _argv("retry", max_attempts=1), b"+DEAD", leased("JOB:1"))
    yield _case("retry", "no-delay", _argv("retry", delay_ms=0), b"+RETRYING", leased("JOB:1"))
    yield _case("retry", "binary-error", _argv("retry", error=b"\x00\xff\r\n"), b"+RETRYING",
                leased("JOB:1"))
    yield _case("retry", "empty-error", _argv("retry", error=b""), b"+RETRYING", leased("JOB:1"))
    yield _case("retry", "error-replaced", _argv("retry"), b"+RETRYING",
                [*leased("JOB:1"), ["HSET", key("job"), "error", "old"]])
    yield from ended_cases("retry", b"+DEAD")
    yield _case("retry", "ended-wrongtype-while-retrying", _argv("retry"), E_TYPE,
                [*leased("JOB:1"), ["SET", ENDED, "x"]])
    yield _case("retry", "ended-token-of-an-earlier-life-kept", _argv("retry"), b"+DEAD",
                [*leased("JOB:1", attempt=3, fence=1), ["RPUSH", ENDED, "1"],
                 ["PEXPIRE", ENDED, "100000"]])


def extend_cases() -> Iterator[Case]:
    yield from fenced_cases("extend", b"+EXTENDED")
    yield _case("extend", "shorter-lease", _argv("extend", lease_ms=1), b"+EXTENDED",
                leased("JOB:1"))


PROGRESS_AT_CAP = b"g" * 65_536
PROGRESS_OVER_CAP = b"g" * 65_537


def progress_cases() -> Iterator[Case]:
    name = "progress"
    yield from fenced_cases(name, b"+RECORDED")
    kinds = [("binary", b"\x00\xff\r\n$-1"), ("empty", b""), ("at-the-cap", PROGRESS_AT_CAP)]
    for label, data in kinds:
        yield _case(name, f"{label}-progress", _argv(name, progress=data), b"+RECORDED",
                    leased("JOB:1"))
    yield _case(name, "progress-replaced", _argv(name), b"+RECORDED",
                [*leased("JOB:1"), ["HSET", key("job"), "progress", "old"]])
    yield _case(name, "over-the-cap", _argv(name, progress=PROGRESS_OVER_CAP), E_PROGRESS_SIZE,
                leased("JOB:1"))
    yield _case(name, "over-the-cap-when-stale", _argv(name, fence=9, progress=PROGRESS_OVER_CAP),
                E_PROGRESS_SIZE, leased("JOB:1"))
    yield _case(name, "over-the-cap-with-no-job", _argv(name, progress=PROGRESS_OVER_CAP),
                E_PROGRESS_SIZE)
    yield _case(name, "bad-fence-before-the-size",
                _argv(name, fence="x", progress=PROGRESS_OVER_CAP), E_NUM, leased("JOB:1"))
    yield _case(name, "size-before-types", _argv(name, progress=PROGRESS_OVER_CAP),
                E_PROGRESS_SIZE, [["SET", key("active"), "x"]])
    yield _case(name, "tombstone-is-stale", _argv(name), b"+STALE",
                [row("JOB:1", "a", "1", "f", "1", "progress", "kept"),
                 ["PEXPIRE", key("job"), "100000"]])
    yield _case(name, "dead-is-stale", _argv(name), b"+STALE",
                [row("JOB:1", "p", "p", "a", "3", "f", "1"),
                 ["ZADD", key("dead"), "9", "JOB:1"]])


def mover_cases(name: str, zset: str) -> Iterator[Case]:
    def due(job_id: str, at: int, lane: str | None = None) -> list[Command]:
        return leased(job_id, deadline=at, lane=lane) if zset == "active" else delayed(
            job_id, due=at, lane=lane)

    yield _case(name, "nothing-due", _argv(name), b":0", due("JOB:1", NOW + 1))
    yield _case(name, "empty", _argv(name), b":0")
    yield _case(name, "flat-jobs", _argv(name), b":3",
                due("JOB:1", NOW - 3) + due("JOB:2", NOW) + due("JOB:3", 1) + due("JOB:4", NOW + 1))
    yield _case(name, "limit", _argv(name, limit=2), b":2",
                due("JOB:1", 1) + due("JOB:2", 2) + due("JOB:3", 3))
    yield _case(name, "ghosts", _argv(name), b":1",
                [["ZADD", key(zset), "1", "JOB:g1", "2", "JOB:g2"], *due("JOB:1", 3)])
    yield _case(name, "ghost-row-of-other-type", _argv(name), b":0",
                [["ZADD", key(zset), "1", "JOB:s"], ["SET", key("job", "JOB:s"), "x"]])
    yield _case(name, "lane-jobs", _argv(name), b":4",
                due("JOB:a1", 1, "a") + due("JOB:a2", 2, "a") + due("JOB:b1", 3, "b")
                + due("JOB:c1", 4, "c") + [["RPUSH", key("lane:c"), "JOB:c0"],
                                           ["RPUSH", key("ring"), "c"]])
    yield _case(name, "lane-key-wrongtype", _argv(name), E_TYPE,
                due("JOB:1", 1) + due("JOB:a1", 2, "a") + [["SET", key("lane:a"), "x"]])
    yield _case(name, "mixed", _argv(name), b":3",
                due("JOB:1", 1) + due("JOB:a1", 2, "a") + due("JOB:2", 3))
    yield _case(name, "wake-near-cap", _argv(name), b":3",
                due("JOB:1", 1) + due("JOB:2", 2) + due("JOB:3", 3)
                + [["RPUSH", key("wake"), *(["1"] * 62)]])
    yield _case(name, "empty-lane-name", _argv(name), b":1", due("JOB:1", 1, ""))


def recover_cases() -> Iterator[Case]:
    yield from mover_cases("recover", "active")
    yield from spent_cases()
    yield _case("recover", "no-enqueued-at", _argv("recover"), b":1",
                [row("JOB:1", "p", "p", "a", "1"),
                 ["ZADD", key("active"), "5", "JOB:1"]])
    yield _case("recover", "bad-enqueued-at", _argv("recover"), b":1",
                [row("JOB:1", "p", "p", "a", "1", "t", "-4"),
                 ["ZADD", key("active"), "5", "JOB:1"]])


def spent_cases() -> Iterator[Case]:
    """recover meets leases whose attempts are used up: their workers were lost for good."""
    yield _case("recover", "spent-at-max", _argv("recover"), b":1",
                leased("JOB:1", attempt=3, deadline=1))
    yield _case("recover", "spent-beyond-max", _argv("recover"), b":1",
                leased("JOB:1", attempt=20, deadline=1))
    yield _case("recover", "one-below-max", _argv("recover"), b":1",
                leased("JOB:1", attempt=2, deadline=1))
    yield _case("recover", "max-attempts-one", _argv("recover", max_attempts=1), b":1",
                leased("JOB:1", deadline=1))
    yield _case("recover", "spent-error-replaced", _argv("recover"), b":1",
                [*leased("JOB:1", attempt=3, deadline=1), ["HSET", key("job"), "error", "old"]])
    yield _case("recover", "spent-and-back", _argv("recover"), b":4",
                leased("JOB:1", attempt=3, deadline=1) + leased("JOB:2", deadline=2)
                + leased("JOB:a1", attempt=5, deadline=3, lane="a")
                + leased("JOB:a2", deadline=4, lane="a") + leased("JOB:9", deadline=NOW + 1))
    yield _case("recover", "spent-lane-job-leaves-its-lane-alone", _argv("recover"), b":1",
                [*leased("JOB:a1", attempt=3, deadline=1, lane="a"),
                 ["RPUSH", key("lane:a"), "JOB:a0"], ["RPUSH", key("ring"), "a"]])
    yield _case("recover", "spent-lane-of-other-type", _argv("recover"), b":1",
                [*leased("JOB:a1", attempt=3, deadline=1, lane="a"), ["SET", key("lane:a"), "x"]])
    yield _case("recover", "spent-wake-full", _argv("recover"), b":2",
                leased("JOB:1", attempt=3, deadline=1) + leased("JOB:2", deadline=2)
                + [["RPUSH", key("wake"), *(["1"] * 63)]])
    yield _case("recover", "spent-already-dead-elsewhere", _argv("recover"), b":1",
                [*leased("JOB:1", attempt=3, deadline=1), ["ZADD", key("dead"), "5", "JOB:0"]])
    yield _case("recover", "spent-limit", _argv("recover", limit=1), b":1",
                leased("JOB:1", attempt=3, deadline=1) + leased("JOB:2", attempt=3, deadline=2))
    yield _case("recover", "spent-ended-wrongtype", _argv("recover"), E_TYPE,
                [*leased("JOB:1", attempt=3, deadline=1), ["SET", ENDED, "x"]])
    yield _case("recover", "spent-ended-token-there", _argv("recover"), b":1",
                [*leased("JOB:1", attempt=3, deadline=1), ["RPUSH", ENDED, "1"]])
    yield _case("recover", "back-to-run-ended-not-looked-at", _argv("recover"), b":1",
                [*leased("JOB:1", attempt=1, deadline=1), ["SET", ENDED, "x"]])


def promote_cases() -> Iterator[Case]:
    yield from mover_cases("promote", "delayed")
    yield _case("promote", "odd-scores", _argv("promote"), b":2",
                [row("JOB:1", "a", "1"), row("JOB:2", "a", "1"),
                 ["ZADD", key("delayed"), "-inf", "JOB:1", "1.5", "JOB:2"]])
