"""Cases of the batched transitions, settle and extend_many: many items in one call, ghosts inside
a batch, current and stale fences mixed, an id twice, and every kind of malformed item."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    BASE,
    E_FENCE,
    E_ITEM,
    E_KIND,
    E_SIZE,
    E_TYPE,
    GOOD_IDS,
    NOW,
    Case,
    Command,
    _case,
    job,
    key,
    leased,
    replied,
    row,
    settle,
    waiting,
)
from echomq.conformance.resp import Arg

E_SETTLE_ITEM = (b" must be ack <id> <fence>, done <id> <fence> <result>, release <id> <fence> "
                 b"or retry <id> <fence> <delay_ms> <max_attempts> <error>\r\n")
NO_ITEMS_NO_JOBS = b"*2\r\n*0\r\n*0\r\n"


def extend_many(*pairs: Arg) -> list[Arg]:
    return [1, key("active"), 30_000, NOW, *pairs]


def lane_state() -> list[Command]:
    """Two lane jobs leased, one waiting in its lane with its group on the ring."""
    return [*leased("JOB:a1", lane="a"), *leased("JOB:b1", lane="b"),
            ["RPUSH", key("lane:a"), "JOB:a2"], ["RPUSH", key("ring"), "a"]]


def settle_cases() -> Iterator[Case]:
    yield from settle_claim_cases()
    yield from settle_item_cases()
    yield from settle_done_cases()
    yield from settle_release_cases()
    yield from settle_bad_item_cases()


def settle_claim_cases() -> Iterator[Case]:
    yield _case("settle", "empty-queue", settle(count=5), NO_ITEMS_NO_JOBS)
    yield _case("settle", "nothing-asked", settle(), NO_ITEMS_NO_JOBS, waiting("JOB:1"))
    yield _case("settle", "count-zero-leaves-ghosts", settle(), NO_ITEMS_NO_JOBS,
                [["ZADD", key("pending"), "1", "JOB:g"]])
    yield _case("settle", "claim-one", settle(count=1), replied([], [job("JOB:1", 1, 1)]),
                waiting("JOB:1"))
    yield _case("settle", "claim-oldest-first", settle(count=2),
                replied([], [job("JOB:b", 1, 1), job("JOB:c", 1, 2)]),
                waiting("JOB:b", at=5) + waiting("JOB:a", at=7) + waiting("JOB:c", at=5))
    yield _case("settle", "count-beyond-pending", settle(count=10),
                replied([], [job("JOB:1", 1, 1), job("JOB:2", 1, 2)]),
                waiting("JOB:1", at=1) + waiting("JOB:2", at=2))
    yield _case("settle", "ghosts-inside-a-batch", settle(count=2),
                replied([], [job("JOB:1", 1, 1), job("JOB:2", 1, 2)]),
                [["ZADD", key("pending"), "1", "JOB:g1", "3", "JOB:g2", "6", "JOB:g3"],
                 ["SET", key("job", "JOB:g2"), "x"],
                 *waiting("JOB:1", at=2), *waiting("JOB:2", at=4), *waiting("JOB:3", at=9)])
    yield _case("settle", "only-ghosts", settle(count=3), NO_ITEMS_NO_JOBS,
                [["ZADD", key("pending"), "1", "JOB:g1", "2", "JOB:g2"]])
    yield _case("settle", "fence-counts-on", settle(count=2),
                replied([], [job("JOB:1", 3, 42), job("JOB:2", 1, 43)]),
                [row("JOB:1", "p", "p", "a", "2"), ["ZADD", key("pending"), "1",
                                                                  "JOB:1"],
                 *waiting("JOB:2", at=2), ["SET", key("fence"), "41"]])
    yield _case("settle", "fence-bad-when-claiming", settle(count=1), E_FENCE,
                [*leased("JOB:1"), *waiting("JOB:2"), ["SET", key("fence"), "x"]])
    yield _case("settle", "fence-bad-not-claiming", settle("ack", "JOB:1", 1),
                replied([b"ACKED"], []), [*leased("JOB:1"), ["SET", key("fence"), "x"]])
    yield _case("settle", "fence-runs-out-inside-a-batch", settle(count=2), E_FENCE,
                [*waiting("JOB:1"), *waiting("JOB:2"), ["SET", key("fence"), "999999999999998"]])
    yield _case("settle", "fence-last-one-inside-a-batch", settle(count=2),
                replied([], [job("JOB:1", 1, 999_999_999_999_999)]),
                [*waiting("JOB:1"), ["SET", key("fence"), "999999999999998"]])
    yield _case("settle", "binary-payload", settle(count=1),
                replied([], [job("JOB:1", 1, 1, b"\x00\r\n*1\r\n")]),
                waiting("JOB:1", payload=b"\x00\r\n*1\r\n"))


def settle_item_cases() -> Iterator[Case]:
    yield _case("settle", "ack-one-claim-one", settle("ack", "JOB:1", 1, count=1),
                replied([b"ACKED"], [job("JOB:2", 1, 1)]), leased("JOB:1") + waiting("JOB:2"))
    yield _case("settle", "no-retention", settle("ack", "JOB:1", 1, retention=0),
                replied([b"ACKED"], []), leased("JOB:1"))
    yield _case("settle", "current-and-stale", settle(
        "ack", "JOB:1", 1, "ack", "JOB:2", 5, "retry", "JOB:3", 9, 0, 3, b"e",
        "retry", "JOB:4", 1, 0, 3, b"e", "ack", "JOB:9", 1, count=1),
        replied([b"ACKED", b"STALE", b"RETRYING", b"STALE", b"STALE"], [job("JOB:5", 1, 1)]),
        leased("JOB:1") + leased("JOB:2", fence=6) + leased("JOB:3", fence=9)
        + leased("JOB:4", fence=2) + waiting("JOB:5"))
    yield _case("settle", "same-id-twice", settle("ack", "JOB:1", 1, "ack", "JOB:1", 1),
                replied([b"ACKED", b"ACKED"], []), leased("JOB:1"))
    yield _case("settle", "retry-then-ack", settle("retry", "JOB:1", 1, 0, 3, b"e",
                                                   "ack", "JOB:1", 1),
                replied([b"RETRYING", b"STALE"], []), leased("JOB:1"))
    yield _case("settle", "ack-then-retry-no-retention",
                settle("ack", "JOB:1", 1, "retry", "JOB:1", 1, 0, 3, b"e", retention=0),
                replied([b"ACKED", b"STALE"], []), leased("JOB:1"))
    yield _case("settle", "retry-to-dead", settle(
        "retry", "JOB:1", 1, 500, 3, b"last", "retry", "JOB:2", 1, 500, 3, b"again"),
        replied([b"DEAD", b"RETRYING"], []),
        leased("JOB:1", attempt=3, fence=1) + leased("JOB:2"))
    yield _case("settle", "binary-error", settle("retry", "JOB:1", 1, 0, 1, b"\x00\xff\r\n"),
                replied([b"DEAD"], []), leased("JOB:1"))
    yield _case("settle", "lanes-untouched", settle(
        "ack", "JOB:a1", 1, "retry", "JOB:b1", 1, 100, 3, b"e", count=1),
        replied([b"ACKED", b"RETRYING"], [job("JOB:1", 1, 1)]),
        lane_state() + waiting("JOB:1"))
    yield _case("settle", "item-row-absent", settle("ack", "JOB:1", 1), replied([b"STALE"], []))
    yield _case("settle", "claims-what-it-settled-not", settle("retry", "JOB:1", 1, 0, 3, b"e",
                                                               count=1),
                replied([b"RETRYING"], []), leased("JOB:1"))
    for label, fine in GOOD_IDS:
        yield _case("settle", f"item-id-{label}", settle("ack", fine, 1), replied([b"STALE"], []))
    yield _case("settle", "item-row-wrongtype", settle("ack", "JOB:1", 1, "ack", "JOB:2", 1),
                E_TYPE, [*leased("JOB:1"), ["SET", key("job", "JOB:2"), "x"]])
    yield _case("settle", "claim-row-of-other-type-is-a-ghost", settle(count=1),
                replied([], [job("JOB:2", 1, 1)]),
                [["ZADD", key("pending"), "1", "JOB:s"], ["SET", key("job", "JOB:s"), "x"],
                 *waiting("JOB:2")])
    yield _case("settle", "item-rows-of-another-queue-untouched", settle("ack", "JOB:1", 1),
                replied([b"STALE"], []),
                [row("JOB:1", "p", "p", "a", "1", "f", "1",
                     base="emq:{other}:"), ["ZADD", key("active", base="emq:{other}:"), "1",
                                            "JOB:1"]])


def settle_release_cases() -> Iterator[Case]:
    """release hands a current lease back unrun: where recover would put it, its attempt
    uncounted, the fence counter left alone, a wake token."""
    yield _case("settle", "release-current", settle("release", "JOB:1", 1),
                replied([b"RELEASED"], []), [*leased("JOB:1"), ["SET", key("fence"), "1"]])
    yield _case("settle", "release-stale", settle("release", "JOB:1", 5),
                replied([b"STALE"], []), leased("JOB:1", fence=6))
    yield _case("settle", "release-absent-row", settle("release", "JOB:1", 1),
                replied([b"STALE"], []))
    yield _case("settle", "release-twice", settle("release", "JOB:1", 1, "release", "JOB:1", 1),
                replied([b"RELEASED", b"STALE"], []), leased("JOB:1"))
    yield _case("settle", "release-then-ack", settle("release", "JOB:1", 1, "ack", "JOB:1", 1),
                replied([b"RELEASED", b"STALE"], []), leased("JOB:1"))
    yield _case("settle", "release-attempts-never-below-zero", settle("release", "JOB:1", 3),
                replied([b"RELEASED"], []), leased("JOB:1", attempt=0, fence=3))
    yield _case("settle", "release-attempts-unreadable", settle("release", "JOB:1", 1),
                replied([b"RELEASED"], []),
                [row("JOB:1", "p", "p", "a", "x", "f", "1"),
                 ["ZADD", key("active"), "1", "JOB:1"]])
    yield _case("settle", "release-without-enqueued-at-goes-to-now",
                settle("release", "JOB:1", 1), replied([b"RELEASED"], []),
                [row("JOB:1", "p", "p", "a", "2", "f", "1"),
                 ["ZADD", key("active"), "1", "JOB:1"], *waiting("JOB:2", at=NOW + 1)])
    yield _case("settle", "release-lane-jobs", settle(
        "release", "JOB:a1", 1, "release", "JOB:b1", 1), replied([b"RELEASED", b"RELEASED"], []),
        lane_state())
    yield _case("settle", "release-wake-full", settle("release", "JOB:1", 1),
                replied([b"RELEASED"], []),
                [*leased("JOB:1"), ["RPUSH", key("wake"), *["1"] * 64]])
    yield _case("settle", "release-not-claimed-by-its-own-call",
                settle("release", "JOB:1", 1, count=5), replied([b"RELEASED"], []),
                leased("JOB:1"))
    yield _case("settle", "release-mixed", settle(
        "ack", "JOB:1", 1, "release", "JOB:2", 2, "retry", "JOB:3", 3, 0, 3, b"e",
        "release", "JOB:4", 9, count=2),
        replied([b"ACKED", b"RELEASED", b"RETRYING", b"STALE"],
                [job("JOB:5", 1, 8), job("JOB:6", 1, 9)]),
        [*leased("JOB:1"), *leased("JOB:2", fence=2), *leased("JOB:3", fence=3),
         *leased("JOB:4", fence=4), *waiting("JOB:5", at=NOW - 9),
         *waiting("JOB:6", at=NOW - 8), ["SET", key("fence"), "7"]])
    yield _case("settle", "release-lane-wrongtype", settle("release", "JOB:a1", 1), E_TYPE,
                [*leased("JOB:a1", lane="a"), ["SET", key("lane:a"), "x"]])
    yield _case("settle", "release-stale-lane-wrongtype", settle("release", "JOB:a1", 9), E_TYPE,
                [*leased("JOB:a1", lane="a"), ["SET", key("lane:a"), "x"]])
    yield _case("settle", "ack-lane-wrongtype-not-looked-at", settle("ack", "JOB:a1", 1),
                replied([b"ACKED"], []),
                [*leased("JOB:a1", lane="a"), ["SET", key("lane:a"), "x"]])
    yield _case("settle", "ring-wrongtype", settle("ack", "JOB:1", 1), E_TYPE,
                [*leased("JOB:1"), ["SET", key("ring"), "x"]])
    yield _case("settle", "wake-wrongtype", settle(count=1), E_TYPE,
                [*waiting("JOB:1"), ["SET", key("wake"), "x"]])


BAD_ITEMS: list[tuple[str, list[Arg], bytes]] = [
    ("op-upper-case", ["ACK", "JOB:1", 1], b"1"),
    ("op-unknown", ["nack", "JOB:1", 1], b"1"),
    ("op-empty", ["", "JOB:1", 1], b"1"),
    ("op-is-an-id", ["JOB:1", 1, "ack"], b"1"),
    ("ack-cut-short", ["ack", "JOB:1"], b"1"),
    ("ack-op-only", ["ack"], b"1"),
    ("retry-cut-short", ["retry", "JOB:1", 1, 0, 3], b"1"),
    ("second-item-unknown", ["ack", "JOB:1", 1, "ok", "JOB:1", 1], b"2"),
    ("third-item-cut-short", ["ack", "JOB:1", 1, "ack", "JOB:2", 1, "retry", "JOB:3"], b"3"),
    ("ack-with-retry-width", ["ack", "JOB:1", 1, 0, 3, b"e"], b"2"),
    ("release-upper-case", ["RELEASE", "JOB:1", 1], b"1"),
    ("release-cut-short", ["release", "JOB:1"], b"1"),
    ("release-op-only", ["ack", "JOB:1", 1, "release"], b"2"),
    ("release-with-retry-width", ["release", "JOB:1", 1, 0, 3, b"e"], b"2"),
]
BAD_FIELDS: list[tuple[str, list[Arg], bytes]] = [
    ("ack-bad-id", ["ack", "job:1", 1], E_KIND),
    ("ack-empty-id", ["ack", "", 1], E_KIND),
    ("retry-bad-id", ["retry", "JOB:a b", 1, 0, 3, b"e"], E_KIND),
    ("ack-fence-zero", ["ack", "JOB:1", 0], b"-EMQNUM fence must be an integer from 1 "),
    ("ack-fence-word", ["ack", "JOB:1", "one"], b"-EMQNUM fence "),
    ("retry-fence-negative", ["retry", "JOB:1", -1, 0, 3, b"e"], b"-EMQNUM fence "),
    ("retry-delay-bad", ["retry", "JOB:1", 1, "1.5", 3, b"e"], b"-EMQNUM delay_ms "),
    ("retry-max-zero", ["retry", "JOB:1", 1, 0, 0, b"e"],
     b"-EMQNUM max_attempts must be an integer from 1 "),
    ("retry-max-sixteen-digits", ["retry", "JOB:1", 1, 0, "1" * 16, b"e"], b"-EMQNUM max_"),
    ("bad-id-after-good-items", ["ack", "JOB:1", 1, "retry", "JOB:1", 1, 0, 3, b"e",
                                 "ack", "JOB:\xff", 1], E_KIND),
    ("bad-fence-before-cut-short", ["ack", "JOB:1", "x", "retry"], b"-EMQNUM fence "),
    ("release-bad-id", ["release", "JOB:", 1], E_KIND),
    ("release-fence-zero", ["release", "JOB:1", 0], b"-EMQNUM fence must be an integer from 1 "),
    ("release-fence-word", ["ack", "JOB:1", 1, "release", "JOB:1", "x"], b"-EMQNUM fence "),
]


def settle_done_cases() -> Iterator[Case]:
    """``done``: an ack whose tombstone keeps the handler's result."""
    yield _case("settle", "done-one-claim-one", settle("done", "JOB:1", 1, b"42", count=1),
                replied([b"ACKED"], [job("JOB:2", 1, 1)]), leased("JOB:1") + waiting("JOB:2"))
    yield _case("settle", "done-and-ack", settle("ack", "JOB:1", 1, "done", "JOB:2", 1,
                                                 b"\x00\r\n", "done", "JOB:3", 1, b""),
                replied([b"ACKED", b"ACKED", b"ACKED"], []),
                leased("JOB:1") + leased("JOB:2") + leased("JOB:3"))
    yield _case("settle", "done-no-retention", settle("done", "JOB:1", 1, b"r", retention=0),
                replied([b"ACKED"], []), leased("JOB:1"))
    yield _case("settle", "done-stale", settle("done", "JOB:1", 2, b"r"),
                replied([b"STALE"], []), leased("JOB:1"))
    yield _case("settle", "done-twice", settle("done", "JOB:1", 1, b"a", "done", "JOB:1", 1, b"b"),
                replied([b"ACKED", b"ACKED"], []), leased("JOB:1"))
    yield _case("settle", "done-result-at-the-cap", settle("done", "JOB:1", 1, b"r" * 524_288),
                replied([b"ACKED"], []), leased("JOB:1"))
    yield _case("settle", "done-result-over-the-cap",
                settle("ack", "JOB:1", 1, "done", "JOB:2", 1, b"r" * 524_289, count=1), E_SIZE,
                leased("JOB:1") + leased("JOB:2") + waiting("JOB:3"))
    yield _case("settle", "done-cut-short", settle("done", "JOB:1", 1, count=1),
                E_ITEM + b"1" + E_SETTLE_ITEM, leased("JOB:1") + waiting("JOB:2"))
    ended = key("ended:JOB:2")
    yield _case("settle", "done-ended-wrongtype",
                settle("ack", "JOB:1", 1, "done", "JOB:2", 1, b"r", count=1), E_TYPE,
                leased("JOB:1") + leased("JOB:2") + waiting("JOB:3") + [["SET", ended, "x"]])
    yield _case("settle", "retry-ended-wrongtype",
                settle("retry", "JOB:2", 1, 0, 3, b"e"), E_TYPE,
                [*leased("JOB:2"), ["HSET", ended, "f", "v"]])
    yield _case("settle", "ack-ended-not-looked-at", settle("ack", "JOB:2", 1),
                replied([b"ACKED"], []), [*leased("JOB:2"), ["SET", ended, "x"]])
    yield _case("settle", "done-and-dead-wake-waiters",
                settle("done", "JOB:1", 1, b"r", "retry", "JOB:2", 1, 0, 1, b"e"),
                replied([b"ACKED", b"DEAD"], []), leased("JOB:1") + leased("JOB:2"))
    yield _case("settle", "done-bad-fence-before-the-size",
                settle("done", "JOB:1", 0, b"r" * 524_289), b"-EMQNUM fence ", leased("JOB:1"))


def settle_bad_item_cases() -> Iterator[Case]:
    """A malformed list is refused whole: nothing settled, nothing claimed."""
    ready = leased("JOB:1") + waiting("JOB:2")
    for label, items, n in BAD_ITEMS:
        yield _case("settle", f"item-{label}", settle(*items, count=1),
                    E_ITEM + n + E_SETTLE_ITEM, ready)
    for label, items, expect in BAD_FIELDS:
        yield _case("settle", f"item-{label}", settle(*items, count=1), expect, ready)


BAD_PAIRS: list[tuple[str, list[Arg], bytes]] = [
    ("pair-cut-short", ["JOB:1", 1, "JOB:2"], E_ITEM + b"2 must be <id> <fence>\r\n"),
    ("id-only", ["JOB:1"], E_ITEM + b"1 must be <id> <fence>\r\n"),
    ("bad-id", ["JOB:1", 1, "RUN:2", 1], E_KIND),
    ("bad-id-before-cut-short", ["job:1", 1, "JOB:2"], E_KIND),
    ("fence-zero", ["JOB:1", 0], b"-EMQNUM fence must be an integer from 1 "),
    ("fence-word", ["JOB:1", "x"], b"-EMQNUM fence "),
]


def extend_many_cases() -> Iterator[Case]:
    yield _case("extend_many", "no-pairs", extend_many(), b"*0\r\n", leased("JOB:1"))
    yield _case("extend_many", "one", extend_many("JOB:1", 1), b"*1\r\n+EXTENDED\r\n",
                leased("JOB:1"))
    yield _case("extend_many", "current-and-stale",
                extend_many("JOB:1", 1, "JOB:2", 1, "JOB:3", 4, "JOB:9", 1),
                b"*4\r\n+EXTENDED\r\n+STALE\r\n+EXTENDED\r\n+STALE\r\n",
                leased("JOB:1") + leased("JOB:2", fence=2) + leased("JOB:3", fence=4))
    yield _case("extend_many", "same-id-twice", extend_many("JOB:1", 1, "JOB:1", 1),
                b"*2\r\n+EXTENDED\r\n+EXTENDED\r\n", leased("JOB:1"))
    yield _case("extend_many", "lane-job", extend_many("JOB:a1", 1),
                b"*1\r\n+EXTENDED\r\n", lane_state())
    yield _case("extend_many", "expired-but-current", extend_many("JOB:1", 1),
                b"*1\r\n+EXTENDED\r\n", leased("JOB:1", deadline=1))
    yield _case("extend_many", "row-wrongtype", extend_many("JOB:1", 1, "JOB:2", 1), E_TYPE,
                [*leased("JOB:1"), ["SET", key("job", "JOB:2"), "x"]])
    for label, pairs, expect in BAD_PAIRS:
        yield _case("extend_many", label, extend_many(*pairs), expect, leased("JOB:1"))


def batch_cases() -> Iterator[Case]:
    assert BASE == "emq:{q}:"
    yield from settle_cases()
    yield from extend_many_cases()
