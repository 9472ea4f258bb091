"""A job's deadline (docs/PROTOCOL.md, "Expiry"): what ``expires_in`` and ``expires_at`` make of
it, checked before anything is sent, and the optional arguments of an admission that carry it
after its priority. A claim that meets the deadline ends the job dead with the error
``expired`` instead of leasing it.

The deadline is absolute, ms on the clock of the enqueue's ``now``: with an explicit ``now``,
``expires_in`` counts from it; with the server's clock (``now`` left off) it counts from the
client's own clock, which a server's clock should match within what NTP keeps them apart."""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable

from echomq.engine.errors import ArgumentError
from echomq.engine.native import checked_int, checked_priority


def deadline_ms(now: int | None, expires_in_ms: int | None, expires_at_ms: int | None,
                clock_ns: Callable[[], int]) -> int | None:
    """The job's deadline from ``expires_in_ms`` (from ``now``, else ``clock_ns``, the client's
    clock in epoch ns) or ``expires_at_ms`` (epoch ms); None for neither. ArgumentError for
    both, for a negative ``expires_in_ms`` or an ``expires_at_ms`` below 1 (0 is the protocol's
    "none"). A flat job's only: a claim at or after it ends the job dead, ``expired``."""
    if expires_in_ms is not None and expires_at_ms is not None:
        raise ArgumentError("give expires_in or expires_at, not both")
    if expires_in_ms is not None:
        checked_int("expires_in_ms", expires_in_ms, 0)
        start = now if now is not None else clock_ns() // 1_000_000
        return int(checked_int("expires_at", start + expires_in_ms, 1))
    if expires_at_ms is not None:
        return int(checked_int("expires_at_ms", expires_at_ms, 1))
    return None


def priority_args(priority: int) -> tuple[str, ...]:
    """The optional priority argument of an admission: none at 0 (the same bytes as a call from
    before priorities, which any server takes), else the checked decimal; ArgumentError when
    it is not an integer from -100 to 100."""
    if type(priority) is int and priority == 0:
        return ()
    return (checked_priority(priority),)


def optional_args(priority: int, deadline: int | None) -> tuple[str, ...]:
    """The optional arguments of enqueue and delayed enqueue: the priority (``priority_args``),
    then the deadline when there is one (the priority then given, ``0`` for none)."""
    if deadline is None:
        return priority_args(priority)
    return (*(priority_args(priority) or ("0",)), str(deadline))


def seconds_ms(name: str, seconds: float) -> int:
    """``expires_in=`` (seconds, a finite number from 0) in ms, rounded up so that a deadline is
    never earlier than asked; ArgumentError otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
            or not math.isfinite(seconds) or seconds < 0:
        raise ArgumentError(f"{name} must be a finite number of seconds from 0, not {seconds!r}")
    return math.ceil(seconds * 1000)


def epoch_ms(name: str, at: datetime.datetime | float) -> int:
    """``expires_at=`` (an aware datetime, or epoch seconds above 0) in epoch ms; ArgumentError
    otherwise."""
    if isinstance(at, datetime.datetime):
        if at.tzinfo is None:
            raise ArgumentError(f"{name} takes a timezone-aware datetime (a naive one has no "
                                "single time)")
        seconds: float = at.timestamp()
    elif isinstance(at, bool) or not isinstance(at, int | float):
        raise ArgumentError(f"{name} takes a datetime or epoch seconds, not {at!r}")
    else:
        seconds = at
    if not math.isfinite(seconds) or seconds <= 0:
        raise ArgumentError(f"{name} must be a time after the epoch, not {at!r}")
    return math.ceil(seconds * 1000)
