"""Reading a queue's events, for both Queues (mixed in): ``events`` is one program, run by the
blocking Queue and awaited by the asyncio one.

The stream, ``<base>events``, holds the last ``EVENTS_MAXLEN`` (about) changes made by Queues
made with ``events=True``; any Queue reads it. A read without a block is one ``XRANGE``; a
blocking read is ``XREAD BLOCK`` in slices that each end before the connection's socket timeout
(``echomq.queue.waiting``), so a block of any length works on any client.
"""

from __future__ import annotations

import time
from typing import Any

from echomq.engine.calls import QueueCalls
from echomq.engine.errors import ArgumentError
from echomq.engine.events import STREAM_ID, Event, decode_entries
from echomq.engine.native import checked_int
from echomq.engine.program import Invoke, Program, method, op
from echomq.engine.transitions import EVENTS_ROLE
from echomq.queue.waiting import next_block_s, wait_slice_s

# ``since`` for only what comes after the call.
AFTER_NOW = "$"
# The id before every entry, for XREAD.
FIRST_ID = "0-0"
SINCE_ERROR = "since must be a stream id ('<ms>-<seq>' or '<ms>'), '$' or None"


def checked_since(since: str | None) -> str | None:
    """``since`` as the reads take it: None (from the oldest kept), ``$`` or a stream id;
    ArgumentError otherwise, before anything is sent."""
    if since is None or since == AFTER_NOW:
        return since
    if not isinstance(since, str) or STREAM_ID.fullmatch(since) is None:
        raise ArgumentError(SINCE_ERROR)
    return since


def range_start(since: str | None) -> str:
    """XRANGE's start for the entries after ``since`` (exclusive), or from the first."""
    return "-" if since is None else "(" + since


def resumed(since: str | None, newest: list[Event]) -> str | None:
    """Where a follower resumes for ``since``: ``$`` read as the newest event's id then (or the
    first id: the stream is empty), so no later read misses what came between two."""
    if since != AFTER_NOW:
        return since
    return newest[0].id if newest else FIRST_ID


def block_ms_of(block_s: float) -> int:
    """A slice (s) as XREAD's BLOCK takes it: whole ms, at least 1 (0 would block for ever)."""
    return max(1, int(block_s * 1000))


class EventReads:
    """``events`` for both Queues: written once, as a program."""

    conn: Any
    calls: QueueCalls

    @op
    def events(self, since: str | None = None, count: int = 100,
               block_ms: int = 0) -> Program[list[Event]]:
        """Up to ``count`` events after ``since``, oldest first: ``since`` an event's id (resume
        after it), None (from the oldest the stream keeps) or ``"$"`` (only what comes after
        this call). With ``block_ms`` > 0, waits up to that long for one when there is none yet;
        0 returns at once (with ``"$"``, nothing). The stream is written by Queues made with
        ``events=True``; any Queue reads it. ArgumentError for a bad ``since``, ``count`` (>= 1)
        or ``block_ms`` (>= 0), before anything is sent."""
        after = checked_since(since)
        checked_int("count", count, 1)
        checked_int("block_ms", block_ms, 0)
        key = self.calls.key(EVENTS_ROLE)
        if block_ms == 0:
            if after == AFTER_NOW:
                return []
            reply = yield Invoke(self.conn, method("xrange", key, range_start(after), "+",
                                                   count=count))
            return decode_entries(reply)
        return (yield from self._blocking_read(key, after, count, block_ms))

    @op
    def latest_events(self, count: int = 100) -> Program[list[Event]]:
        """The newest ``count`` events, oldest first: where a reader starts that wants what
        happened last, then follows on from the last one's id with ``events``."""
        checked_int("count", count, 1)
        reply = yield Invoke(self.conn, method("xrevrange", self.calls.key(EVENTS_ROLE), "+",
                                               "-", count=count))
        return decode_entries(reply)[::-1]

    def _blocking_read(self, key: str, after: str | None, count: int,
                       block_ms: int) -> Program[list[Event]]:
        deadline = time.monotonic() + block_ms / 1000
        slice_s = wait_slice_s(self.conn)
        if after == AFTER_NOW:  # the stream's last id now, so no slice misses what came between
            newest = yield from EventReads.latest_events.program(self, 1)
            after = newest[0].id if newest else FIRST_ID
        start = FIRST_ID if after is None else after
        block_s: float | None = min(block_ms / 1000, slice_s)
        while block_s is not None:
            reply = yield Invoke(self.conn, method("xread", {key: start}, count=count,
                                                   block=block_ms_of(block_s)))
            found = decode_entries(reply)
            if found:
                return found
            block_s = next_block_s(deadline, slice_s)
        return []
