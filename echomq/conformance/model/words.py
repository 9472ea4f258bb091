"""The arguments as the server reads them: the bounds of a number, a job id, an integer argument,
a row field read as a count, numkeys as EVALSHA reads it."""

from __future__ import annotations

import re

from echomq.conformance.resp import Arg

INT_MAX = 999_999_999_999_999
FENCE_MAX = INT_MAX - 1
LLONG_MAX = 2**63 - 1

# The minimum of every integer argument; "now" and free-form bytes are absent.
MINIMUM = {"fence": 1, "lease_ms": 1, "retention_ms": 0, "delay_ms": 0, "max_attempts": 1,
           "limit": 1, "count": 0, "at_ms": 0, "seal": 0, "period_ms": 0,
           "expires_at": 0}

_ID = re.compile(rb"JOB:[A-Za-z0-9._:-]{1,200}\Z")
_INT = re.compile(rb"[0-9]{1,15}\Z")
_LL = re.compile(rb"(-?[1-9][0-9]*|0)\Z")


def raw(arg: Arg) -> bytes:
    return arg if isinstance(arg, bytes) else str(arg).encode()


def id_ok(value: bytes) -> bool:
    return _ID.match(value) is not None


def lane_ok(value: bytes) -> bool:
    """A name of the lane gate: 1-200 bytes of A-Z a-z 0-9 . _ : -."""
    return re.match(rb"[A-Za-z0-9._:-]{1,200}\Z", value) is not None


def int_arg(value: bytes, minimum: int) -> int | None:
    """An integer argument (1-15 ASCII digits, at least ``minimum``), or None."""
    if _INT.match(value) is None:
        return None
    number = int(value)
    return number if number >= minimum else None


def int_field(value: bytes | None, fallback: int) -> int:
    """A row field read as a count: absent or not an integer gives ``fallback``."""
    if value is None:
        return fallback
    number = int_arg(value, 0)
    return fallback if number is None else number


def count_field(value: bytes | None) -> int | None:
    """A row field counted on with HINCRBY (a waiting job's ``waits``): absent is 0; None unless
    an integer from 0 in canonical decimal (no leading zero)."""
    if value is None:
        return 0
    number = int_arg(value, 0)
    return number if number is not None and dec(number) == value else None


def numkeys_of(value: bytes) -> int | None:
    """numkeys as the server's string2ll reads it (no sign but '-', no leading zero), or None."""
    if _LL.match(value) is None:
        return None
    number = int(value)
    return number if -LLONG_MAX - 1 <= number <= LLONG_MAX else None


def dec(value: int) -> bytes:
    return str(value).encode()


PRIORITY_MIN, PRIORITY_MAX = -100, 100
PRIORITY_BAND = 2**45
TIME_CAP = PRIORITY_BAND - 1
_PRIORITY = re.compile(rb"-?[0-9]{1,3}\Z")


def priority_arg(value: bytes) -> int | None:
    """A priority argument (an optional ``-``, 1-3 ASCII digits, -100 to 100), or None."""
    if _PRIORITY.match(value) is None:
        return None
    number = int(value)
    return number if PRIORITY_MIN <= number <= PRIORITY_MAX else None


def row_priority(value: bytes | None) -> int:
    """A row's priority field: absent or not a priority counts as 0."""
    if value is None:
        return 0
    number = priority_arg(value)
    return 0 if number is None else number


def pending_score(priority: int, t: int) -> int:
    """The pending score of a job of ``priority`` at time ``t``: higher priorities first."""
    return min(t, TIME_CAP) - priority * PRIORITY_BAND
