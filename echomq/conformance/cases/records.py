"""Cases of claim records (docs/PROTOCOL.md, "Claim records"): a claim or a settle's claim part
declaring ``<base>claim:<claim_id>`` after its keys records the leases it makes, expiring a
lease later; sent again with the record there, it answers the leases recorded still held and
leases nothing more; a malformed record holds no lease; a bad record name, a wrong-typed record
and a wrong-typed row of a recorded lease are refused before anything is written."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    BASE,
    E_ARITY,
    E_KEYS,
    E_TYPE,
    NOW,
    NULL,
    OTHER,
    SETTLE_KEYS,
    Case,
    Command,
    _case,
    job,
    key,
    leased,
    replied,
    row,
    waiting,
)
from echomq.conformance.resp import Arg

RECORD = key("claim:c-1")
CLAIM_KEYS: list[Arg] = [key("pending"), key("active"), key("fence")]


def claim(record: Arg = RECORD, lease_ms: Arg = 30_000) -> list[Arg]:
    return [4, *CLAIM_KEYS, record, lease_ms, NOW]


def settle(*items: Arg, count: Arg = 2, record: Arg = RECORD) -> list[Arg]:
    return [8, *SETTLE_KEYS[1:], record, NOW, 60_000, 30_000, count, *items]


def recorded(value: Arg) -> Command:
    return ["SET", RECORD, value, "PX", "30000"]


def claim_record_cases() -> Iterator[Case]:
    yield _case("claim", "record-absent-leases-and-records", claim(), job("JOB:1", 1, 1),
                waiting("JOB:1"))
    yield _case("claim", "record-absent-nothing-to-lease", claim(), NULL)
    yield _case("claim", "record-absent-only-ghosts", claim(), NULL,
                [["ZADD", key("pending"), str(NOW), "JOB:9"]])
    yield _case("claim", "record-absent-paused", claim(), NULL,
                [*waiting("JOB:1"), ["SET", key("paused"), "1"]])
    held = [*leased("JOB:1"), ["SET", key("fence"), "1"], *waiting("JOB:2")]
    yield _case("claim", "record-answers-its-lease", claim(), job("JOB:1", 1, 1),
                [*held, recorded("JOB:1 1")])
    yield _case("claim", "record-answers-while-paused", claim(), job("JOB:1", 1, 1),
                [*held, recorded("JOB:1 1"), ["SET", key("paused"), "1"]])
    yield _case("claim", "record-answers-the-first-held", claim(), job("JOB:1", 1, 1),
                [*held, recorded("JOB:7 3 JOB:1 1")])
    yield _case("claim", "record-lease-gone", claim(), NULL,
                [*waiting("JOB:2"), recorded("JOB:1 1")])
    yield _case("claim", "record-lease-of-another-fence", claim(), NULL,
                [*leased("JOB:1", fence=2), *waiting("JOB:2"), recorded("JOB:1 1")])
    yield _case("claim", "record-fence-counter-not-read", claim(), job("JOB:1", 1, 1),
                [*leased("JOB:1"), ["SET", key("fence"), "x"], recorded("JOB:1 1")])
    for label, value in MALFORMED:
        yield _case("claim", f"record-malformed-{label}", claim(), NULL,
                    [*held, recorded(value)])
    yield from record_refusals()


MALFORMED: list[tuple[str, Arg]] = [
    ("empty", ""), ("id-only", "JOB:1"), ("fence-word", "JOB:1 x"), ("fence-zero", "JOB:1 0"),
    ("trailing-space", "JOB:1 1 "), ("two-spaces", "JOB:1  1"), ("bad-id", "job:1 1"),
    ("odd-tail", "JOB:1 1 JOB:2"), ("leading-space", " JOB:1 1"),
    ("sixteen-digits", "JOB:1 " + "1" * 16),
]


def record_refusals() -> Iterator[Case]:
    """Refused before anything is written: the record's name, its type, a recorded row's type."""
    for label, name in [("empty-id", BASE + "claim:"), ("bad-id", BASE + "claim:a b"),
                        ("other-queue", OTHER + "claim:c-1"), ("no-colon", BASE + "claimc-1"),
                        ("too-long", BASE + "claim:" + "c" * 201), ("pending", key("pending"))]:
        yield _case("claim", f"record-name-{label}", claim(record=name), E_KEYS,
                    waiting("JOB:1"))
        yield _case("settle", f"record-name-{label}", settle(record=name), E_KEYS,
                    waiting("JOB:1"))
    for label, value in [("hash", ["HSET", RECORD, "f", "v"]), ("list", ["RPUSH", RECORD, "x"]),
                         ("zset", ["ZADD", RECORD, "1", "m"])]:
        yield _case("claim", f"record-wrong-type-{label}", claim(), E_TYPE,
                    [*waiting("JOB:1"), value])
        yield _case("settle", f"record-wrong-type-{label}", settle(count=0), E_TYPE,
                    [*waiting("JOB:1"), value])
    wrong_row: list[Command] = [["SET", key("job", "JOB:1"), "x"], *waiting("JOB:2"),
                                recorded("JOB:1 1")]
    yield _case("claim", "record-row-wrong-type", claim(), E_TYPE, wrong_row)
    yield _case("settle", "record-row-wrong-type", settle(), E_TYPE, wrong_row)
    # the key after a record may only be the events key
    yield _case("claim", "record-and-one-more-key", [5, *CLAIM_KEYS, RECORD, RECORD, 30_000, NOW],
                E_KEYS)
    yield _case("claim", "record-and-two-more-keys",
                [6, *CLAIM_KEYS, RECORD, RECORD, RECORD, 30_000, NOW], E_ARITY)


def settle_record_cases() -> Iterator[Case]:
    two = [*waiting("JOB:1"), *waiting("JOB:2", at=NOW + 1)]
    yield _case("settle", "record-absent-leases-and-records", settle(),
                replied([], [job("JOB:1", 1, 1), job("JOB:2", 1, 2)]), two)
    yield _case("settle", "record-absent-nothing-to-lease", settle(), replied([], []))
    yield _case("settle", "record-count-0-not-read", settle(count=0), replied([], []),
                [*two, recorded("JOB:1 1"), ["SET", key("job", "JOB:1"), "x"]])
    held: list[Command] = [*leased("JOB:1", fence=5), *leased("JOB:2", fence=6),
                           ["SET", key("fence"), "6"], *waiting("JOB:3"),
                           *leased("JOB:8", fence=4)]
    yield _case("settle", "record-answers-its-leases", settle(),
                replied([], [job("JOB:1", 1, 5), job("JOB:2", 1, 6)]),
                [*held, recorded("JOB:1 5 JOB:2 6")])
    yield _case("settle", "record-answers-those-held", settle(),
                replied([], [job("JOB:2", 1, 6)]), [*held, recorded("JOB:1 4 JOB:2 6")])
    yield _case("settle", "record-items-still-apply", settle("ack", "JOB:8", 4),
                replied([b"ACKED"], [job("JOB:1", 1, 5), job("JOB:2", 1, 6)]),
                [*held, recorded("JOB:1 5 JOB:2 6")])
    yield _case("settle", "record-lease-released-by-its-items", settle("release", "JOB:1", 5),
                replied([b"RELEASED"], [job("JOB:2", 1, 6)]),
                [*held, recorded("JOB:1 5 JOB:2 6")])
    yield _case("settle", "record-answers-while-paused", settle(),
                replied([], [job("JOB:1", 1, 5), job("JOB:2", 1, 6)]),
                [*held, recorded("JOB:1 5 JOB:2 6"), ["SET", key("paused"), "1"]])
    yield _case("settle", "record-malformed-holds-nothing", settle(), replied([], []),
                [*held, recorded("JOB:1 5 JOB:2")])
    yield _case("settle", "record-attempt-is-the-rows", settle(),
                replied([], [job("JOB:1", 3, 5)]),
                [row("JOB:1", "p", b"p", "a", "3", "f", "5"),
                 ["ZADD", key("active"), str(NOW + 30_000), "JOB:1"], recorded("JOB:1 5")])


def record_cases() -> list[Case]:
    return [*claim_record_cases(), *settle_record_cases()]
