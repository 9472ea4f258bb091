"""trim_dead's cases: the count bound and the age bound (each alone, both, neither), the defaults,
the limit, ties, ghosts and rows of any type, the ended keys, and every bad bound in
``<base>deadconf`` — refused with nothing written, the same on both executors."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    BASE,
    E_TYPE,
    NOW,
    Case,
    Command,
    _argv,
    _case,
    dead,
    key,
)
from echomq.conformance.resp import Arg
from echomq.engine.transitions import DEAD_BOUNDS

DAY_MS = 24 * 3600 * 1000
DEFAULT_AGE = DEAD_BOUNDS["max_age_ms"]
BAD_BOUNDS: list[tuple[str, Arg]] = [
    ("empty", ""), ("negative", "-1"), ("plus", "+1"), ("space", " 1"), ("float", "1.5"),
    ("exponent", "1e3"), ("sixteen-digits", "1" * 16), ("word", "ten"), ("nul", b"1\x00"),
]


def bounds(max_count: Arg | None = None, max_age_ms: Arg | None = None) -> list[Command]:
    fields: list[Arg] = []
    if max_count is not None:
        fields += ["max_count", max_count]
    if max_age_ms is not None:
        fields += ["max_age_ms", max_age_ms]
    return [["HSET", key("deadconf"), *fields]] if fields else []


def died(*ages_ms: int) -> list[Command]:
    """Jobs JOB:1, JOB:2, ... dead for each of ``ages_ms`` at NOW."""
    return [command for n, age in enumerate(ages_ms, start=1)
            for command in dead(f"JOB:{n}", NOW - age)]


def trim_dead_cases() -> Iterator[Case]:
    yield from count_cases()
    yield from age_cases()
    yield from keyspace_cases()
    yield from bad_bound_cases()


def count_cases() -> Iterator[Case]:
    five = died(50, 40, 30, 20, 10)
    yield _case("trim_dead", "count-over", _argv("trim_dead"), b":3\r\n", bounds(2, 0) + five)
    yield _case("trim_dead", "count-at", _argv("trim_dead"), b":0\r\n", bounds(5, 0) + five)
    yield _case("trim_dead", "count-limit", _argv("trim_dead", limit=2), b":2\r\n",
                bounds(1, 0) + five)
    yield _case("trim_dead", "count-zero-keeps-all", _argv("trim_dead"), b":0\r\n",
                bounds(0, 0) + five)
    yield _case("trim_dead", "count-leading-zeros", _argv("trim_dead"), b":1\r\n",
                bounds("0004", 0) + five)
    yield _case("trim_dead", "count-ties-by-id", _argv("trim_dead"), b":2\r\n",
                bounds(1, 0) + dead("JOB:c", NOW) + dead("JOB:a", NOW) + dead("JOB:b", NOW))
    yield _case("trim_dead", "default-count", _argv("trim_dead"), b":0\r\n", five)
    yield _case("trim_dead", "empty-dead", _argv("trim_dead"), b":0\r\n", bounds(1, 1))
    yield _case("trim_dead", "other-fields-ignored", _argv("trim_dead"), b":4\r\n",
                [["HSET", key("deadconf"), "max_count", "1", "note", "x"], *five])


def age_cases() -> Iterator[Case]:
    ages = died(2_000, 1_000, 999, 10)
    yield _case("trim_dead", "age-at-and-over", _argv("trim_dead"), b":2\r\n",
                bounds(0, 1_000) + ages)
    yield _case("trim_dead", "age-limit", _argv("trim_dead", limit=1), b":1\r\n",
                bounds(0, 1_000) + ages)
    yield _case("trim_dead", "age-zero-keeps-all", _argv("trim_dead"), b":0\r\n",
                bounds(0, 0) + ages)
    yield _case("trim_dead", "age-default", _argv("trim_dead"), b":1\r\n",
                bounds(0) + died(DEFAULT_AGE, DEFAULT_AGE - 1, DAY_MS))
    yield _case("trim_dead", "age-before-the-clock", _argv("trim_dead", now=500), b":0\r\n",
                bounds(0, 1_000) + dead("JOB:1", 0))
    # the age takes jobs the count keeps, and the count jobs the age keeps, in one walk
    yield _case("trim_dead", "both-bounds-age-beyond-count", _argv("trim_dead"), b":3\r\n",
                bounds(3, 999) + ages)
    yield _case("trim_dead", "both-bounds-count-beyond-age", _argv("trim_dead"), b":3\r\n",
                bounds(1, 1_500) + ages)
    # On the server's clock, which the model cannot read: the keyspace is stated (the job, dead
    # since 1970, is past its age on any clock; only the bounds are left).
    yield _case("trim_dead", "now-star", _argv("trim_dead", now="*"), b":1\r\n",
                bounds(0, 1_000) + dead("JOB:1", 5),
                keyspace={b"deadconf": (
                    b"hash", [(b"max_age_ms", b"1000"), (b"max_count", b"0")], False)})


def keyspace_cases() -> Iterator[Case]:
    one = bounds(0, 1_000) + dead("JOB:1", 5)
    yield _case("trim_dead", "ghost", _argv("trim_dead"), b":1\r\n",
                [*bounds(0, 1_000), ["ZADD", key("dead"), "5", "JOB:1"]])
    yield _case("trim_dead", "row-not-a-hash", _argv("trim_dead"), b":1\r\n",
                [*bounds(0, 1_000), ["ZADD", key("dead"), "5", "JOB:1"],
                 ["SET", key("job"), "x"]])
    yield _case("trim_dead", "no-ended-key", _argv("trim_dead"), b":1\r\n",
                [*one, ["DEL", f"{BASE}ended:JOB:1"]])
    yield _case("trim_dead", "ended-wrongtype", _argv("trim_dead"), E_TYPE,
                [*one, *dead("JOB:0", 1), ["DEL", f"{BASE}ended:JOB:1"],
                 ["SET", f"{BASE}ended:JOB:1", "x"]])
    yield _case("trim_dead", "kept-jobs-untouched", _argv("trim_dead"), b":1\r\n",
                [*one, *dead("JOB:2", NOW), ["ZADD", key("pending"), "1", "JOB:3"]])


def bad_bound_cases() -> Iterator[Case]:
    def refusal(field: str) -> bytes:
        return (b"-EMQNUM deadconf %s must be an integer from 0 to 999999999999999\r\n"
                % field.encode())
    five = died(50, 40, 30, 20, 10)
    for label, bad in BAD_BOUNDS:
        yield _case("trim_dead", f"max-count-{label}", _argv("trim_dead"), refusal("max_count"),
                    bounds(bad, 0) + five)
        yield _case("trim_dead", f"max-age-{label}", _argv("trim_dead"), refusal("max_age_ms"),
                    bounds(1, bad) + five)
    yield _case("trim_dead", "both-bounds-bad", _argv("trim_dead"), refusal("max_count"),
                bounds("x", "y") + five)
    yield _case("trim_dead", "bad-bound-nothing-dead", _argv("trim_dead"), refusal("max_age_ms"),
                bounds(None, "-5"))
