"""What a consumer reads and writes around its park, for both shells — no I/O.

A parked consumer costs the wire one re-read and one ``BLPOP`` per park (``echomq.loop``
decides how long). Before it parks it reads the heads of ``active``, ``delayed`` and
``throttled`` (``queue_reads``): the earliest of them is when the next thing can fall due — a
lease runs out, a retry is due, a lane's rate window opens — and the park ends then. A lease
taken while the others park cannot be in what they read, so a consumer that takes leases with
nothing in hand leaves one token on the queue's watch key (``watch_key``, at most one token): a
parked consumer pops it, reads the heads again and parks until the new earliest. It claims
nothing for it, so an enqueue to a parked crowd still costs one claim. When a park ends by its
cap, the re-read also counts the jobs ready, and a claim follows only when there are some.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.calls import earliest, text

WATCH_ROLE = "watch"
TOKEN_ROLE = "housekeeping"
# The zsets whose head is when the next thing can fall due.
HEADS = ("delayed", "active", "throttled")


@dataclass(frozen=True)
class Sighting:
    """What a read before a park saw: when the next thing falls due (ms; None: nothing can),
    and whether jobs wait to be claimed (only when asked)."""

    due: int | None
    ready: bool


def queue_reads(pipe: Any, key: Any, *, ready: bool, lanes: bool) -> None:
    """Queue on ``pipe`` the reads of one queue (``key(role)`` names its keys): the three heads,
    and with ``ready`` the count of jobs waiting (``pending``; a lane consumer's ``ring`` too)."""
    for role in HEADS:
        pipe.zrange(key(role), 0, 0, withscores=True)
    if ready:
        pipe.zcard(key("pending"))
        if lanes:
            pipe.llen(key("ring"))


def sighting_of(replies: Sequence[Any]) -> Sighting:
    """The Sighting of the replies to ``queue_reads``."""
    heads, counts = replies[:len(HEADS)], replies[len(HEADS):]
    return Sighting(earliest(heads), any(int(count) > 0 for count in counts))


def queue_watch(pipe: Any, key: str) -> None:
    """Queue on ``pipe`` one token on the watch key ``key``, which keeps at most one."""
    pipe.rpush(key, 1)
    pipe.ltrim(key, 0, 0)


def take_token(conn: Any, key: str, holder: str, interval_ms: int) -> Any:
    """Ask for the queue's housekeeping token ``key`` for ``holder``, held ``interval_ms``
    (``SET NX PX GET``): the reply is what ``token_taken`` reads (awaitable on an asyncio
    client). One consumer a housekeeping interval runs recover + promote; the others skip."""
    return conn.set(key, holder, nx=True, px=interval_ms, get=True)


def token_taken(reply: Any, holder: str) -> bool:
    """Whether ``holder`` has the token: it was free (no old value), or is ``holder``'s own
    still (its next round came a moment before the server expired it)."""
    return reply is None or text(reply) == holder


def is_watch(popped_key: Any) -> bool:
    """Whether a ``BLPOP`` popped its token from a watch key (not a wake key)."""
    return text(popped_key).endswith(":" + WATCH_ROLE)
