"""Short, time-sortable job ids made by the client: ``JOB:`` + 18 characters (22 bytes).

The 18 characters spell one 108-bit number in base 64, most significant digit first, over an
alphabet in ASCII order (``-0-9A-Z_a-z``, all inside the kind gate), so comparing two ids as
strings compares the numbers. The number is the creation time in ms since the Unix epoch in its
top 45 bits (good until the year 3084) and 63 bits below it: a fresh random draw
(``secrets.randbits``) in each new millisecond, plus one for each further id in that millisecond.
So ids sort by creation time to the millisecond, and within one process every id is greater than
the one before, even when the clock steps back (the id then keeps counting from the last one).

Across processes nothing is coordinated. Two processes that make n1 and n2 ids in the same
millisecond collide only if their runs of numbers overlap, with probability about
(n1 + n2 - 1) / 2**63 — about 1e-19 for one id each. A million ids a second made by a thousand
producers at once (one id each per ms) gives about one colliding pair in 600 years; a colliding
enqueue is not lost silently, it returns ``Verdict.DUPLICATE``. A forked child starts a fresh run
(it never continues its parent's). The 26-character ULID this replaces held 80 random bits per ms
but cost 8 more bytes in both places a pending job keeps its id (row key and zset member).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["ALPHABET", "JobIds", "created_ms", "new_job_id"]

ALPHABET = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
TIME_BITS = 45
RANDOM_BITS = 63
DIGITS = (TIME_BITS + RANDOM_BITS) // 6  # 18
PREFIX = "JOB:"

# 12 bits at a time: 4096 two-character strings, so an id is 9 lookups and one join.
_PAIRS = [high + low for high in ALPHABET for low in ALPHABET]
_VALUE = {char: index for index, char in enumerate(ALPHABET)}


def _spell(n: int) -> str:
    if not 0 <= n < 1 << (TIME_BITS + RANDOM_BITS):
        raise OverflowError("the clock is past what a job id can hold (the year 3084)")
    p = _PAIRS  # written out, not looped: this runs once per job on the producer's hot path
    return (f"JOB:{p[n >> 96]}{p[n >> 84 & 0xFFF]}{p[n >> 72 & 0xFFF]}{p[n >> 60 & 0xFFF]}"
            f"{p[n >> 48 & 0xFFF]}{p[n >> 36 & 0xFFF]}{p[n >> 24 & 0xFFF]}{p[n >> 12 & 0xFFF]}"
            f"{p[n & 0xFFF]}")


def created_ms(job_id: str) -> int:
    """When a default id was made, in ms since the Unix epoch (ValueError for other ids)."""
    digits = job_id.removeprefix(PREFIX)
    if len(digits) != DIGITS or not job_id.startswith(PREFIX) or not _VALUE.keys() >= set(digits):
        raise ValueError(f"not a default job id: {job_id!r}")
    number = 0
    for char in digits:
        number = number * 64 + _VALUE[char]
    return number >> RANDOM_BITS


class JobIds:
    """A source of ids (call it); ``clock`` reads ns since the epoch, ``randbits(k)`` draws k
    random bits. Thread-safe; the module's ``new_job_id`` is the default instance."""

    def __init__(self, clock: Callable[[], int] = time.time_ns,
                 randbits: Callable[[int], int] = secrets.randbits) -> None:
        self.clock = clock
        self.randbits = randbits
        self._last = -1
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=_forgetter(weakref.ref(self)))

    def __call__(self) -> str:
        with self._lock:
            ms = self.clock() // 1_000_000
            if ms > self._last >> RANDOM_BITS:
                self._last = (ms << RANDOM_BITS) | self.randbits(RANDOM_BITS)
            else:  # the same millisecond, or the clock stepped back: keep counting
                self._last += 1
            return _spell(self._last)

    def forget(self) -> None:
        """Start afresh (a forked child must not continue its parent's run of numbers)."""
        self._last = -1
        self._lock = threading.Lock()


def _forgetter(ref: weakref.ref[JobIds]) -> Callable[[], None]:
    def forget() -> None:
        source = ref()
        if source is not None:
            source.forget()
    return forget


DEFAULT = JobIds()


def new_job_id() -> str:
    """A fresh ``JOB:`` id of 22 bytes: sorts after every id this process made before, and
    after every id made in an earlier millisecond anywhere; 63 random bits per millisecond keep
    processes apart (see the module's docstring for the odds)."""
    return DEFAULT()
