"""Cases of the unique enqueue (``EMQ.ENQUEUE_UNIQUE``): its mode word (EMQMODE, in its place
among the numbers), and each mode's verdicts — dedupe (a live holder, a gone one, the window
after its job ended, a value that is no id), debounce (a holder still delayed pushed back, one
that left delayed, a ghost), throttle (the window taken, a window of 0) — with a delay, a
priority, a full wake list, and the holder's row of the wrong type (step 6, dedupe and debounce
only)."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    E_NUM,
    E_TYPE,
    NOW,
    Case,
    Command,
    _argv,
    _case,
    delayed,
    key,
    row,
    waiting,
)
from echomq.conformance.resp import Arg

E_MODE = b"-EMQMODE mode must be dedupe, debounce or throttle\r\n"
NAME = "enqueue_unique"
BAD_MODES: list[tuple[str, Arg]] = [
    ("upper", "DEDUPE"), ("prefix", "dedup"), ("longer", "dedupes"), ("empty", ""),
    ("space", "dedupe "), ("nul", b"dedupe\x00"), ("other", "unique"), ("number", "0"),
]


def call(mode: str, period: Arg = 60_000, delay: Arg = 0, *priority: Arg,
         job_id: str = "JOB:1") -> list[Arg]:
    argv = _argv(NAME, mode=mode, period_ms=period, delay_ms=delay, id=job_id)
    argv[3] = key("job", job_id)
    return [*argv, *priority]


def held(holder: str, *options: Arg) -> list[Command]:
    """The dedupe key naming ``holder`` (SET options after it: PX 5000)."""
    return [["SET", key("dedupe"), holder, *options]]


def mode_cases() -> Iterator[Case]:
    for label, word in BAD_MODES:
        yield _case(NAME, f"mode-{label}", _argv(NAME, mode=word), E_MODE)
    yield _case(NAME, "mode-after-now", _argv(NAME, now="x", mode="x"), E_NUM + b"now")
    yield _case(NAME, "mode-before-period", _argv(NAME, mode="x", period_ms="x"), E_MODE)
    yield _case(NAME, "mode-before-priority", [*_argv(NAME, mode="x"), "x"], E_MODE)
    yield _case(NAME, "mode-before-types", _argv(NAME, mode="x"), E_MODE,
                [["SET", key("pending"), "x"]])
    for mode in ("dedupe", "debounce", "throttle"):
        yield _case(NAME, f"mode-{mode}", call(mode), b"+ENQUEUED")


def dedupe_cases() -> Iterator[Case]:
    yield _case(NAME, "dedupe-admits", call("dedupe"), b"+ENQUEUED")
    yield _case(NAME, "dedupe-window-zero", call("dedupe", 0), b"+ENQUEUED")
    yield _case(NAME, "dedupe-delayed", call("dedupe", 60_000, 5_000), b"+ENQUEUED")
    yield _case(NAME, "dedupe-priority", call("dedupe", 60_000, 0, "7"), b"+ENQUEUED")
    yield _case(NAME, "dedupe-delayed-priority", call("dedupe", 0, 9, "-3"), b"+ENQUEUED")
    yield _case(NAME, "dedupe-own-row", call("dedupe"), b"+DUPLICATE", waiting("JOB:1"))
    yield _case(NAME, "dedupe-own-row-other-holder", call("dedupe"), b"+DUPLICATE",
                [*waiting("JOB:1"), *held("JOB:2")])
    yield _case(NAME, "dedupe-held-by-waiting", call("dedupe"), b"+DUPLICATE",
                [*waiting("JOB:2"), *held("JOB:2")])
    yield _case(NAME, "dedupe-held-by-delayed", call("dedupe"), b"+DUPLICATE",
                [*delayed("JOB:2", NOW + 10), *held("JOB:2")])
    yield _case(NAME, "dedupe-held-by-tombstone", call("dedupe"), b"+DUPLICATE",
                [row("JOB:2", "a", "1", "f", "1"), *held("JOB:2")])
    yield _case(NAME, "dedupe-holder-gone", call("dedupe"), b"+ENQUEUED", held("JOB:2"))
    yield _case(NAME, "dedupe-holder-itself-gone", call("dedupe"), b"+ENQUEUED", held("JOB:1"))
    yield _case(NAME, "dedupe-window-after-end", call("dedupe"), b"+DUPLICATE",
                held("JOB:2", "PX", "5000"))
    yield _case(NAME, "dedupe-not-an-id", call("dedupe"), b"+ENQUEUED", held("junk"))
    yield _case(NAME, "dedupe-not-an-id-ttl", call("dedupe"), b"+DUPLICATE",
                held("junk", "PX", "5000"))
    yield _case(NAME, "dedupe-empty-value", call("dedupe"), b"+ENQUEUED", held(""))
    yield _case(NAME, "dedupe-holder-wrongtype", call("dedupe"), E_TYPE,
                [*held("JOB:2"), ["SET", key("job", "JOB:2"), "x"]])
    yield _case(NAME, "dedupe-holder-wrongtype-own-row", call("dedupe"), E_TYPE,
                [*waiting("JOB:1"), *held("JOB:2"), ["SET", key("job", "JOB:2"), "x"]])
    yield _case(NAME, "dedupe-wake-full", call("dedupe"), b"+ENQUEUED",
                [["RPUSH", key("wake"), *["1"] * 64]])


def debounce_cases() -> Iterator[Case]:
    yield _case(NAME, "debounce-admits", call("debounce"), b"+ENQUEUED")
    yield _case(NAME, "debounce-window-zero", call("debounce", 0), b"+ENQUEUED")
    yield _case(NAME, "debounce-delay-adds", call("debounce", 1_000, 500, "4"), b"+ENQUEUED")
    yield _case(NAME, "debounce-pushes-back", call("debounce"), b"+DEBOUNCED",
                [*delayed("JOB:2", NOW + 100), *held("JOB:2")])
    yield _case(NAME, "debounce-pulls-in", call("debounce", 10), b"+DEBOUNCED",
                [*delayed("JOB:2", NOW + 100_000), *held("JOB:2")])
    yield _case(NAME, "debounce-same-due", call("debounce", 100), b"+DEBOUNCED",
                [*delayed("JOB:2", NOW + 100), *held("JOB:2")])
    yield _case(NAME, "debounce-keeps-priority", call("debounce", 100, 0, "9"), b"+DEBOUNCED",
                [*delayed("JOB:2", NOW + 100), ["HSET", key("job", "JOB:2"), "priority", "3"],
                 *held("JOB:2")])
    yield _case(NAME, "debounce-holder-pending", call("debounce"), b"+ENQUEUED",
                [*waiting("JOB:2"), *held("JOB:2")])
    yield _case(NAME, "debounce-holder-gone", call("debounce"), b"+ENQUEUED", held("JOB:2"))
    yield _case(NAME, "debounce-holder-ghost", call("debounce"), b"+ENQUEUED",
                [["ZADD", key("delayed"), str(NOW + 5), "JOB:2"], *held("JOB:2")])
    yield _case(NAME, "debounce-holder-ttl", call("debounce"), b"+DEBOUNCED",
                [*delayed("JOB:2", NOW + 100), *held("JOB:2", "PX", "5000")])
    yield _case(NAME, "debounce-not-an-id", call("debounce"), b"+ENQUEUED", held("junk"))
    yield _case(NAME, "debounce-own-row", call("debounce"), b"+DUPLICATE",
                [*delayed("JOB:1", NOW + 100), *held("JOB:1")])
    yield _case(NAME, "debounce-holder-wrongtype", call("debounce"), E_TYPE,
                [*held("JOB:2"), ["RPUSH", key("job", "JOB:2"), "x"]])
    yield _case(NAME, "debounce-wake-full", call("debounce"), b"+ENQUEUED",
                [["RPUSH", key("wake"), *["1"] * 64]])


def throttle_cases() -> Iterator[Case]:
    yield _case(NAME, "throttle-admits", call("throttle"), b"+ENQUEUED")
    yield _case(NAME, "throttle-delayed", call("throttle", 1_000, 2_000, "-5"), b"+ENQUEUED")
    yield _case(NAME, "throttle-window-zero", call("throttle", 0), b"+ENQUEUED")
    yield _case(NAME, "throttle-window-zero-taken", call("throttle", 0), b"+THROTTLED",
                held("JOB:2"))
    yield _case(NAME, "throttle-taken", call("throttle"), b"+THROTTLED",
                held("JOB:2", "PX", "5000"))
    yield _case(NAME, "throttle-taken-by-anything", call("throttle"), b"+THROTTLED",
                held("junk"))
    yield _case(NAME, "throttle-reads-no-holder", call("throttle"), b"+THROTTLED",
                [*held("JOB:2"), ["SET", key("job", "JOB:2"), "x"]])
    yield _case(NAME, "throttle-own-row", call("throttle"), b"+DUPLICATE", waiting("JOB:1"))
    yield _case(NAME, "throttle-largest-window", call("throttle", "999999999999999"),
                b"+ENQUEUED")


def unique_cases() -> Iterator[Case]:
    yield from mode_cases()
    yield from dedupe_cases()
    yield from debounce_cases()
    yield from throttle_cases()
