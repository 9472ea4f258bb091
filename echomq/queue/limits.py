"""A flat queue's queue-wide limits, kept on the server so every worker of the queue shares
them (``<base>queueconf``, a hash): at most ``concurrency`` jobs leased at once, at most
``rate`` claims a window of ``window_ms`` (a field absent: no limit; the window 1000 ms). Claim
and settle's claim part read them on both executors (docs/PROTOCOL.md "Queue-wide limits"); an
operator sets them here with a plain ``HSET`` / ``HDEL``, each value checked before anything is
sent."""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.engine.calls import QueueCalls, text
from echomq.engine.native import checked_int
from echomq.engine.program import Program, Reads, method, op

QUEUECONF_ROLE = "queueconf"
KNOBS = ("concurrency", "rate", "window_ms")
DEFAULT_WINDOW_MS = 1000
WAKE_CAP = 64  # the wake list's cap, as the transitions keep it
# A knob passed as ``...`` keeps its value; None clears it (no limit; the window: 1000 ms).
Limit = int | None | types.EllipsisType


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits as they apply: ``concurrency`` leases at once and ``rate`` claims a
    window of ``window_ms`` at most (None: no limit of that kind)."""

    concurrency: int | None = None
    rate: int | None = None
    window_ms: int = DEFAULT_WINDOW_MS


def limits_of(values: Sequence[Any]) -> QueueLimits:
    """The limits from ``HMGET queueconf concurrency rate window_ms``, read as the server reads
    them: a field absent, or not an integer from 1 (1 to 15 digits), is no limit (the window:
    its default)."""
    found: list[int | None] = []
    for value in values:
        raw = None if value is None else text(value)
        ok = raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 15
        found.append(int(raw) if ok and raw is not None and int(raw) >= 1 else None)
    concurrency, rate, window_ms = found
    return QueueLimits(concurrency, rate, window_ms or DEFAULT_WINDOW_MS)


def limit_writes(key: str, limits: dict[str, Limit]) -> list[Any]:
    """The writes that set ``limits`` on ``key`` (an int: HSET, None: HDEL, ``...``: nothing),
    each value checked first, an integer from 1 (ArgumentError, nothing sent)."""
    given = {name: checked_int(name, value, 1) for name, value in limits.items()
             if value is not None and value is not Ellipsis}
    cleared = [name for name, value in limits.items() if value is None]
    writes = [method("hset", key, mapping=given)] if given else []
    return writes + ([method("hdel", key, *cleared)] if cleared else [])


def wake_held(conn: Any, calls: QueueCalls, applied: QueueLimits) -> Program[None]:
    """Consumers parked while the queue was held at its concurrency limit wake to claim under
    the limits as they now apply: when the queue is held, a wake token for each lease the new
    limit allows (64 without one: the wake list's cap, kept with ``LTRIM``)."""
    held = yield Reads(conn, [method("hexists", calls.key(QUEUECONF_ROLE), "held")])
    if held[0]:
        tokens = min(WAKE_CAP, applied.concurrency or WAKE_CAP)
        wake = calls.key("wake")
        yield Reads(conn, [method("rpush", wake, *[1] * tokens),
                           method("ltrim", wake, 0, WAKE_CAP - 1)])


class LimitControls:
    """The queue-wide limits, for both Queues (mixed in): written once, as programs."""

    conn: Any
    calls: QueueCalls

    @op
    def limits(self) -> Program[QueueLimits]:
        """This queue's limits as they apply."""
        values = yield Reads(self.conn, [method("hmget", self.calls.key(QUEUECONF_ROLE),
                                                list(KNOBS))])
        return limits_of(values[0])

    @op
    def set_limits(self, *, concurrency: Limit = ..., rate: Limit = ...,
                   window_ms: Limit = ...) -> Program[QueueLimits]:
        """Lease at most ``concurrency`` of this queue's jobs at once, and claim at most
        ``rate`` a window of ``window_ms`` (None: no limit, the window back to 1000 ms; ``...``:
        unchanged), across every worker of the queue; the limits as they now apply."""
        writes = limit_writes(self.calls.key(QUEUECONF_ROLE),
                              {"concurrency": concurrency, "rate": rate, "window_ms": window_ms})
        if writes:
            yield Reads(self.conn, writes)
        applied = yield from LimitControls.limits.program(self)
        if writes:
            yield from wake_held(self.conn, self.calls, applied)
        return applied
