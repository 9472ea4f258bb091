"""Cases of the producer's batch (``EMQ.ENQUEUE_MANY``): an empty list, one job and many, a delay
and a priority each, an id twice in one call, an id whose row exists (live, a tombstone, dead),
a full wake list, every kind of malformed job (the list ending inside one, a bad id, delay or
priority in the middle: nothing written), the bound on the jobs of one call, and a job's row of
the wrong type (step 6, in list order, before anything is written)."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    BAD_IDS,
    E_ARITY,
    E_KIND,
    E_NUM,
    E_TYPE,
    NOW,
    Case,
    Command,
    _case,
    key,
    leased,
    row,
    waiting,
)
from echomq.conformance.resp import Arg

NAME = "enqueue_many"
E_JOB = b"-EMQITEM item 2 must be <id> <payload> <delay_ms> <priority>\r\n"
E_MANY = b"-EMQARITY EMQ.ENQUEUE_MANY takes at most 10000 items\r\n"
E_PRIORITY = b"-EMQNUM priority must be an integer from -100 to 100\r\n"
MAX_JOBS = 10_000


def many(*jobs: Arg, now: Arg = NOW) -> list[Arg]:
    """An enqueue_many of ``jobs`` (``<id> <payload> <delay_ms> <priority>`` each)."""
    return [3, key("pending"), key("delayed"), key("wake"), now, *jobs]


def verdicts(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"+%s\r\n" % word for word in words)


ENQ, DUP = b"ENQUEUED", b"DUPLICATE"


def admission_cases() -> Iterator[Case]:
    yield _case(NAME, "empty-list", many(), b"*0\r\n")
    yield _case(NAME, "empty-list-wrongtype", many(), E_TYPE, [["SET", key("wake"), "x"]])
    yield _case(NAME, "one-job", many("JOB:1", b"p", 0, 0), verdicts(ENQ))
    yield _case(NAME, "empty-payload", many("JOB:1", b"", 0, 0), verdicts(ENQ))
    yield _case(NAME, "binary-payload", many("JOB:1", b"\x00\xff\r\n$-1\r\n", 0, 0),
                verdicts(ENQ))
    yield _case(NAME, "three-in-order", many("JOB:3", b"c", 0, 0, "JOB:1", b"a", 0, 0,
                                             "JOB:2", b"b", 0, 0), verdicts(ENQ, ENQ, ENQ))
    yield _case(NAME, "delays", many("JOB:1", b"a", 1, 0, "JOB:2", b"b", 0, 0,
                                     "JOB:3", b"c", 999_999_999_999_999, 0),
                verdicts(ENQ, ENQ, ENQ))
    yield _case(NAME, "priorities", many("JOB:1", b"a", 0, 100, "JOB:2", b"b", 0, -100,
                                         "JOB:3", b"c", 0, "-0", "JOB:4", b"d", 0, "007",
                                         "JOB:5", b"e", 60_000, 5),
                verdicts(ENQ, ENQ, ENQ, ENQ, ENQ))
    yield _case(NAME, "leading-zeros", many("JOB:1", b"a", "0042", 0), verdicts(ENQ))
    yield _case(NAME, "now-zero-delayed-too",
                many("JOB:1", b"a", 0, 0, "JOB:2", b"b", 10, 0, now=0), verdicts(ENQ, ENQ))
    yield _case(NAME, "now-past-the-time-cap", many("JOB:1", b"a", 0, 3,
                                                    now="999999999999999"), verdicts(ENQ))


def duplicate_cases() -> Iterator[Case]:
    yield _case(NAME, "same-id-twice", many("JOB:1", b"a", 0, 0, "JOB:1", b"b", 0, 5),
                verdicts(ENQ, DUP))
    yield _case(NAME, "same-id-delayed-then-now", many("JOB:1", b"a", 500, 0, "JOB:2", b"b", 0, 0,
                                                       "JOB:1", b"c", 0, 0),
                verdicts(ENQ, ENQ, DUP))
    yield _case(NAME, "existing-row", many("JOB:1", b"a", 0, 0, "JOB:2", b"b", 0, 0),
                verdicts(DUP, ENQ), waiting("JOB:1"))
    yield _case(NAME, "existing-lease", many("JOB:2", b"b", 0, 0, "JOB:1", b"a", 0, 0),
                verdicts(ENQ, DUP), leased("JOB:1"))
    yield _case(NAME, "existing-tombstone", many("JOB:1", b"a", 0, 0),
                verdicts(DUP), [row("JOB:1", "a", "1", "t", str(NOW - 9))])
    yield _case(NAME, "all-duplicates", many("JOB:1", b"a", 0, 0, "JOB:1", b"a", 0, 0),
                verdicts(DUP, DUP), waiting("JOB:1"))


def wake_cases() -> Iterator[Case]:
    """One token per job admitted, bounded at 64 as enqueue's: none for duplicates."""
    full = [["RPUSH", key("wake"), *["1"] * 63]]
    yield _case(NAME, "wake-one-room-left", many("JOB:1", b"a", 0, 0, "JOB:2", b"b", 0, 0),
                verdicts(ENQ, ENQ), full)
    yield _case(NAME, "wake-over-full", many("JOB:1", b"a", 0, 0),
                verdicts(ENQ), [["RPUSH", key("wake"), *["1"] * 70]])
    yield _case(NAME, "wake-none-for-duplicates", many("JOB:1", b"a", 0, 0), verdicts(DUP),
                waiting("JOB:1"))
    jobs: list[Arg] = []
    for n in range(70):
        jobs += [f"JOB:{n}", b"p", n % 3, n % 5]
    yield _case(NAME, "seventy-jobs", many(*jobs), b"*70\r\n+ENQUEUED\r\n")


def bad_job_cases() -> Iterator[Case]:
    """A malformed job anywhere refuses the whole call, nothing written (a job before it
    included)."""
    first: list[Arg] = ["JOB:1", b"a", 0, 0]
    yield _case(NAME, "list-ends-inside-a-job", many(*first, "JOB:2", b"b", 0), E_JOB)
    yield _case(NAME, "list-ends-after-an-id", many(*first, "JOB:2"), E_JOB)
    for label, bad in BAD_IDS:
        yield _case(NAME, f"middle-id-{label}", many(*first, bad, b"b", 0, 0, "JOB:3", b"c", 0, 0),
                    E_KIND)
    for label, bad in (("negative", "-1"), ("word", "x"), ("sixteen-digits", "1" * 16),
                       ("empty", ""), ("star", "*")):
        yield _case(NAME, f"middle-delay-{label}", many(*first, "JOB:2", b"b", bad, 0), E_NUM
                    + b"delay_ms must be an integer from 0 to 999999999999999")
    for label, bad in (("above", "101"), ("plus", "+5"), ("word", "ten"), ("empty", ""),
                       ("below", "-101"), ("four-digits", "0100")):
        yield _case(NAME, f"middle-priority-{label}", many(*first, "JOB:2", b"b", 0, bad),
                    E_PRIORITY)
    yield _case(NAME, "bad-id-before-bad-delay", many(*first, "job:2", b"b", "x", 0), E_KIND)
    yield _case(NAME, "bad-delay-before-bad-priority", many(*first, "JOB:2", b"b", "x", "x"),
                E_NUM + b"delay_ms")
    yield _case(NAME, "short-job-after-a-bad-one", many("JOB:1", b"a", "x", 0, "JOB:2"),
                E_NUM + b"delay_ms")
    yield _case(NAME, "bad-now-before-jobs", many("job:1", b"a", 0, 0, now="x"), E_NUM + b"now")
    yield _case(NAME, "bad-job-before-types", many(*first, "job:2", b"b", 0, 0), E_KIND,
                [["SET", key("pending"), "x"]])


def bound_cases() -> Iterator[Case]:
    """At most 10,000 jobs a call: one more is refused at the shape, before any job is read."""
    jobs: list[Arg] = []
    for n in range(MAX_JOBS):
        jobs += [f"JOB:{n}", b"", 0, 0]
    yield _case(NAME, "ten-thousand-jobs", many(*jobs), b"*10000\r\n+ENQUEUED\r\n")
    yield _case(NAME, "one-job-too-many", many(*jobs, "bad", b"", 0, 0), E_MANY)
    yield _case(NAME, "one-word-too-many", many(*jobs, "JOB:x"), E_MANY)
    yield _case(NAME, "too-many-before-keys", [3, key("pending"), key("wake"), key("delayed"),
                                               NOW, *jobs, "JOB:x"], E_MANY)
    yield _case(NAME, "no-now", [3, key("pending"), key("delayed"), key("wake")], E_ARITY)


def row_type_cases() -> Iterator[Case]:
    """Each job's row, derived from its id: absent or a hash (WRONGTYPE otherwise), checked in
    list order before anything is written."""
    jobs = many("JOB:1", b"a", 0, 0, "JOB:2", b"b", 0, 0, "JOB:3", b"c", 0, 0)
    wrong: list[tuple[str, Command]] = [
        ("string", ["SET", key("job", "JOB:2"), "x"]),
        ("list", ["RPUSH", key("job", "JOB:2"), "x"]),
        ("zset", ["ZADD", key("job", "JOB:2"), "1", "m"])]
    for label, command in wrong:
        yield _case(NAME, f"middle-row-{label}", jobs, E_TYPE, [command])
    yield _case(NAME, "last-row-wrongtype", jobs, E_TYPE, [["SET", key("job", "JOB:3"), "x"]])
    yield _case(NAME, "row-wrongtype-twice-in-a-call",
                many("JOB:1", b"a", 0, 0, "JOB:2", b"b", 0, 0, "JOB:2", b"b", 0, 0),
                E_TYPE, [["SET", key("job", "JOB:2"), "x"]])


def many_cases() -> Iterator[Case]:
    yield from admission_cases()
    yield from duplicate_cases()
    yield from wake_cases()
    yield from bad_job_cases()
    yield from bound_cases()
    yield from row_type_cases()
