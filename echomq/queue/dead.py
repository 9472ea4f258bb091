"""The bounds of a queue's dead jobs, kept on the server so every client agrees: at most
``max_count`` of them, none dead for ``max_age_ms`` or longer (``<base>deadconf``, a hash; a
field absent: its default, 10,000 jobs and 180 days; 0: no bound of that kind). Housekeeping
trims what is over them (``trim_dead``, in ``recover_due``); an operator sets them here, with a
plain ``HSET`` / ``HDEL``, each value checked before anything is sent. And how many jobs claims
ended dead as expired (``<base>counts``, docs/PROTOCOL.md "Expiry")."""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.engine.calls import DEFAULT_BATCH_LIMIT, QueueCalls, text
from echomq.engine.execution import ExecutorMethods
from echomq.engine.native import checked_int
from echomq.engine.program import Program, Reads, method, op
from echomq.engine.transitions import DEAD_BOUNDS, ERRORS

DEADCONF_ROLE = "deadconf"
# What the transitions count for the operator (docs/PROTOCOL.md, "Expiry"): a hash.
COUNTS_ROLE = "counts"
# A bound passed as ``...`` keeps its value; None clears it (its default applies again).
Bound = int | None | types.EllipsisType


@dataclass(frozen=True)
class DeadBounds:
    """A queue's bounds as they apply: ``max_count`` jobs at most, none dead for
    ``max_age_ms`` or longer (0: no bound of that kind)."""

    max_count: int
    max_age_ms: int


def bounds_of(values: Sequence[Any]) -> DeadBounds:
    """The bounds from ``HMGET deadconf max_count max_age_ms``: an absent field its default; a
    field that is not an integer from 0 raises ValueError, with the server's own words."""
    found: dict[str, int] = {}
    for (name, default), value in zip(DEAD_BOUNDS.items(), values, strict=True):
        if value is None:
            found[name] = default
            continue
        raw = text(value)
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 15):
            raise ValueError(ERRORS["NUMBER"].format(name=f"deadconf {name}", min=0))
        found[name] = int(raw)
    return DeadBounds(**found)


def bound_writes(key: str, bounds: dict[str, Bound]) -> list[Any]:
    """The writes that set ``bounds`` on ``key`` (an int: HSET, None: HDEL, ``...``: nothing),
    each value checked first (ArgumentError, nothing sent)."""
    given = {name: checked_int(name, value, 0) for name, value in bounds.items()
             if value is not None and value is not Ellipsis}
    cleared = [name for name, value in bounds.items() if value is None]
    writes = [method("hset", key, mapping=given)] if given else []
    return writes + ([method("hdel", key, *cleared)] if cleared else [])


class DeadControls:
    """The bounds of dead jobs, for both Queues (mixed in): written once, as programs."""

    conn: Any
    calls: QueueCalls
    executor: ExecutorMethods

    @op
    def trim_dead(self, *, now: int | None = None,
                  limit: int = DEFAULT_BATCH_LIMIT) -> Program[int]:
        """Forget the oldest dead jobs beyond the queue's bounds (``set_dead_bounds``), at most
        ``limit``, deleting their rows as purge does; how many went."""
        call = self.calls.trim_dead(now, limit)
        return int((yield from ExecutorMethods.call.program(self.executor, self.conn, *call)))

    @op
    def dead_bounds(self) -> Program[DeadBounds]:
        """The bounds of this queue's dead jobs as they apply."""
        values = yield Reads(self.conn, [method("hmget", self.calls.key(DEADCONF_ROLE),
                                                list(DEAD_BOUNDS))])
        return bounds_of(values[0])

    @op
    def expired_count(self) -> Program[int]:
        """How many jobs claims ended dead as expired on this queue, all time (``<base>counts``
        ``expired``; absent or not an integer: 0)."""
        values = yield Reads(self.conn, [method("hget", self.calls.key(COUNTS_ROLE), "expired")])
        raw = "" if values[0] is None else text(values[0])
        return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 15 else 0

    @op
    def set_dead_bounds(self, *, max_count: Bound = ...,
                        max_age_ms: Bound = ...) -> Program[DeadBounds]:
        """Keep at most ``max_count`` dead jobs, none dead for ``max_age_ms`` or longer (0: no
        bound of that kind; None: back to the default; ``...``: unchanged); the bounds as they
        now apply. Housekeeping trims what is over them, oldest first."""
        writes = bound_writes(self.calls.key(DEADCONF_ROLE),
                              {"max_count": max_count, "max_age_ms": max_age_ms})
        if writes:
            yield Reads(self.conn, writes)
        return (yield from DeadControls.dead_bounds.program(self))
