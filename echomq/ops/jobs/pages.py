"""Pages of a queue's keys read from a cursor, each read bounded by the page whatever the depth.

- A zset (pending, delayed, active, waiting, dead) pages by its own order, (score, id): the
  cursor is the last entry shown, and the next page starts at its rank (``ZRANK``, O(log N)),
  or, when that job has left the zset since, at the rank of the first entry after it (``ZCOUNT``
  of the lower scores, then a binary search by ``ZRANGE r r`` among the entries of its score,
  O(log² N)); then ``ZRANGE start stop`` by rank, O(log N + page). No offset is walked. The
  shards of a sharded queue are read from the same cursor and merged.
- A lane pages by its position in the order its group serves it (``PROTOCOL.md``, "Priority
  inside a lane"): its prio zset's jobs above priority 0, its list, then the zset's others. The
  zset parts are read by rank; the list by ``LRANGE``, which skips whole nodes of the list to
  the position (a node holds a few hundred ids).
- Completed jobs are in no key but their rows: they page by ``SCAN`` of the queue's rows, at most
  ``SCAN_COUNT`` keys a step, the cursor being the server's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.engine.calls import QueueCalls, text

SCAN_COUNT = 100
# A cursor's parts: the zsets' ``<score>,<id>`` (a job id holds no comma), a lane's position,
# the completed rows' ``<shard>,<scan cursor>``.
SEP = ","


class CursorError(ValueError):
    """A cursor that no page of this list gave."""


@dataclass(frozen=True)
class Entry:
    """A job met in a list: its id, its score in the zset that holds it (None in a lane's list
    or among completed rows), and the index of the part (shard) that holds it."""

    id: str
    score: int | None
    part: int = 0


@dataclass(frozen=True)
class ZPosition:
    score: int
    id: str

    def key(self) -> tuple[int, bytes]:
        return self.score, self.id.encode()


def zposition(cursor: str) -> ZPosition:
    score, sep, job_id = cursor.partition(SEP)
    if not sep or not job_id or not score.lstrip("-").isdigit():
        raise CursorError(f"not a cursor of this list: {cursor!r}")
    return ZPosition(int(score), job_id)


def rank_of(conn: Any, key: str, at: ZPosition) -> tuple[int, bool]:
    """The rank ``at`` has, or would have, in zset ``key`` (its order: score, then id bytes),
    and whether its job is there at that score."""
    rank = conn.zrank(key, at.id)
    if rank is not None:
        score = conn.zscore(key, at.id)
        if score is not None and int(score) == at.score:
            return int(rank), True
    low = int(conn.zcount(key, "-inf", f"({at.score}"))
    high = low + int(conn.zcount(key, at.score, at.score))
    wanted = at.id.encode()
    while low < high:  # the entries of at's score sort by id: find the first id above at's
        middle = (low + high) // 2
        [member] = conn.zrange(key, middle, middle) or [b""]
        if _raw(member) > wanted:
            high = middle
        else:
            low = middle + 1
    return low, False


@dataclass(frozen=True)
class Span:
    """Where a zset list starts and ends: its scores from ``low`` to ``high`` (None: no
    bound), in its order or ``newest`` first (the order reversed)."""

    low: int | None = None
    high: int | None = None
    newest: bool = False

    def holds(self, score: int) -> bool:
        return (self.low is None or score >= self.low) and (self.high is None
                                                             or score <= self.high)


def zpage(conn: Any, keys: Sequence[str], after: ZPosition | None, count: int,
          span: Span) -> list[Entry]:
    """Up to ``count`` entries after ``after`` (None: from the start of ``span``) of the zsets
    ``keys`` (the shards of one set), merged in the span's order; the entries past its scores
    left out."""
    found: list[Entry] = []
    for part, key in enumerate(keys):
        found += _read(conn, key, part, after, count, span)
    found.sort(key=lambda e: (e.score, e.id.encode()), reverse=span.newest)
    return [entry for entry in found[:count] if entry.score is not None
            and span.holds(entry.score)]


def _read(conn: Any, key: str, part: int, after: ZPosition | None, count: int,
          span: Span) -> list[Entry]:
    if span.newest:  # the entries before the cursor (or the span's end), nearest first
        if after is not None:
            stop = rank_of(conn, key, after)[0] - 1
        else:
            stop = int(conn.zcount(key, "-inf", "+inf" if span.high is None else span.high)) - 1
        if stop < 0:
            return []
        replies = conn.zrange(key, max(0, stop - count + 1), stop, withscores=True)[::-1]
    else:
        if after is not None:
            rank, there = rank_of(conn, key, after)
            start = rank + int(there)
        else:
            start = 0 if span.low is None else int(conn.zcount(key, "-inf", f"({span.low}"))
        replies = conn.zrange(key, start, start + count - 1, withscores=True)
    return [Entry(text(member), int(score), part) for member, score in replies]


@dataclass(frozen=True)
class LaneKeys:
    """A group's two keys of waiting jobs: its list (priority 0) and its prio zset."""

    listed: str
    prioritised: str


def lane_page(conn: Any, lane: LaneKeys, position: int, count: int) -> list[Entry]:
    """Up to ``count`` of the lane's jobs from ``position`` in its serving order."""
    with conn.pipeline(transaction=False) as pipe:
        pipe.zcount(lane.prioritised, "-inf", "(0")
        pipe.llen(lane.listed)
        above, listed = (int(n) for n in pipe.execute())
    found: list[Entry] = []
    if position < above:
        top = conn.zrange(lane.prioritised, position, min(above, position + count) - 1,
                          withscores=True)
        found += [Entry(text(m), int(s)) for m, s in top]
    if len(found) < count and position + len(found) < above + listed:
        start = max(0, position + len(found) - above)
        ids = conn.lrange(lane.listed, start, start + count - len(found) - 1)
        found += [Entry(text(m), None) for m in ids]
    if len(found) < count:
        start = max(0, position + len(found) - above - listed) + above
        rest = conn.zrange(lane.prioritised, start, start + count - len(found) - 1,
                           withscores=True)
        found += [Entry(text(m), int(s)) for m, s in rest]
    return found


def lane_position(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not cursor.isdigit():
        raise CursorError(f"not a cursor of this list: {cursor!r}")
    return int(cursor)


def scan_position(cursor: str | None) -> tuple[int, int]:
    """``(part, scan cursor)`` of a completed list's cursor."""
    if cursor is None:
        return 0, 0
    part, sep, scanned = cursor.partition(SEP)
    if not sep or not part.isdigit() or not scanned.isdigit():
        raise CursorError(f"not a cursor of this list: {cursor!r}")
    return int(part), int(scanned)


def row_pattern(calls: QueueCalls) -> str:
    """SCAN's pattern of the queue's rows, its glob characters escaped."""
    prefix = calls.key("job", "")
    return "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"


def scan_rows(conn: Any, calls: QueueCalls, scanned: int) -> tuple[int, list[str]]:
    """One SCAN step over the queue's rows: the next cursor (0: done) and the ids met."""
    prefix = calls.key("job", "")
    following, keys = conn.scan(scanned, match=row_pattern(calls), count=SCAN_COUNT)
    return int(following), [text(key)[len(prefix):] for key in keys]


def _raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
