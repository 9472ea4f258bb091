"""What a consumer reads and writes around its park, for both shells — no I/O.

A parked consumer costs the wire one re-read and one ``BLPOP`` per park (``echomq.consumer.loop``
decides how long). Before it parks it reads the heads of ``active``, ``delayed`` and
``throttled`` (``queue_reads``): the earliest of them is when the next thing can fall due — a
lease runs out, a retry is due, a lane's rate window opens — and the park ends then. A lease
taken while the others park cannot be in what they read, so a consumer that claims with nothing
in hand sends WATCH_TOKENS tokens on the queue's watch key (which keeps no more) in the claim's
own flush, after the claim (``watch_commands``): the server has applied the claim before any
parked consumer pops a token, and a holder killed as the reply comes back has left its tokens all
the same. Each of up to two parked consumers pops one, reads the heads again and parks until the
new earliest, so the lease is watched even if one of them dies too. A watcher pushes nothing
back (no token goes round the crowd), and claims nothing for it, so an enqueue to a parked crowd
still costs one claim. When a park ends by its cap, the re-read also counts the jobs ready, and
a claim follows only when there are some. An announced consumer's record in the registry of live
workers rides in the same flush as the re-read, written again every other park or so
(``echomq.consumer.presence.Announcer.queue_parked``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.engine.calls import earliest, text

WATCH_ROLE = "watch"
TOKEN_ROLE = "housekeeping"
# How many consumers learn of a lease taken with nothing in hand: one of them may die as well.
WATCH_TOKENS = 2
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
        pipe.execute_command(*head_read(key(role)))
    if ready:
        pipe.execute_command("ZCARD", key("pending"))
        if lanes:
            pipe.execute_command("LLEN", key("ring"))


def head_read(key: Any) -> tuple[Any, ...]:
    """The read of a sorted set's head and its score (``ZRANGE key 0 0 WITHSCORES``), as a bare
    command: with ``zrange(..., withscores=True)``, redis-py 5.0's cluster pipeline passes the
    option on to the ``ASKING`` it sends for a slot on the move, and fails with TypeError. Its
    reply is the server's own (``echomq.engine.calls.earliest`` reads both protocols')."""
    return ("ZRANGE", key, 0, 0, "WITHSCORES")


def sighting_of(replies: Sequence[Any]) -> Sighting:
    """The Sighting of the replies to ``queue_reads``."""
    heads, counts = replies[:len(HEADS)], replies[len(HEADS):]
    return Sighting(earliest(heads), any(int(count) > 0 for count in counts))


def split_beat(replies: Sequence[Any], beat: int) -> tuple[list[Any], list[Any]]:
    """The replies of a flush read with errors as values, its last ``beat`` the record's rewrite:
    the reads' replies (an error among them raised) and the rewrite's."""
    reads, written = list(replies[:len(replies) - beat]), list(replies[len(replies) - beat:])
    failed = next((reply for reply in reads if isinstance(reply, Exception)), None)
    if failed is not None:
        raise failed
    return reads, written


def watch_commands(key: str, tokens: int = WATCH_TOKENS) -> list[tuple[Any, ...]]:
    """The commands that leave ``tokens`` tokens on the watch key ``key``, which keeps at most
    WATCH_TOKENS (one ``RPUSH``: the consumers blocked on it are served one token each)."""
    return [("RPUSH", key, *[1] * tokens), ("LTRIM", key, 0, WATCH_TOKENS - 1)]


def queue_watch(pipe: Any, key: str, tokens: int = WATCH_TOKENS) -> None:
    """Queue ``watch_commands`` on ``pipe``."""
    for command in watch_commands(key, tokens):
        pipe.execute_command(*command)


def token_taken(reply: Any, holder: str) -> bool:
    """Whether ``holder`` has the token: it was free (no old value), or is ``holder``'s own
    still (its next round came a moment before the server expired it)."""
    return reply is None or text(reply) == holder


def is_watch(popped_key: Any) -> bool:
    """Whether a ``BLPOP`` popped its token from a watch key (not a wake key)."""
    return text(popped_key).endswith(":" + WATCH_ROLE)
