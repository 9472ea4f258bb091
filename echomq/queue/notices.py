"""The cancel notices a consumer reads while it holds jobs — no I/O.

A cancel that flags a leased job appends ``job <id> fence <fence>`` to the queue's
``<base>cancels``, a stream that keeps its last 1000 entries (docs/PROTOCOL.md, cancel). A
consumer with jobs in hand keeps one ``XREAD BLOCK`` on the streams of the queues it serves, from
the last entry it saw, so a cancel wakes the holder of the lease at once: one read a cancel (or a
park cap), however many jobs run, and none while nothing is in hand. The first read starts at the
stream's beginning: an entry names a lease by its fence, which never repeats for an id, so an
entry older than the leases in hand matches none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq.engine.events import decode_streams

NOTICES_ROLE = "cancels"
FIRST_ID = "0-0"

# A lease a notice names: its job's id and its fence.
Notice = tuple[str, int]


class NoticeReads:
    """Where a consumer's reading of the notices of ``keys`` (one a queue, in its order) stands:
    the last entry read of each."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = list(keys)
        self.after = [FIRST_ID] * len(self.keys)

    def command(self, block_ms: int) -> tuple[Any, ...]:
        """The read: every stream's entries after the last one read, waiting ``block_ms`` at most
        for one when there are none."""
        return ("XREAD", "BLOCK", block_ms, "STREAMS", *self.keys, *self.after)

    def took(self, reply: Any) -> list[list[Notice]]:
        """The leases ``reply`` (the read's; None: its timeout) names, a list a queue; the next
        read goes on after its entries."""
        found = decode_streams(reply)
        notices: list[list[Notice]] = []
        for n, key in enumerate(self.keys):
            entries = found.get(key, [])
            if entries:
                self.after[n] = entries[-1].id
            notices.append([(entry.job_id, entry.fence) for entry in entries
                            if entry.fence is not None])
        return notices
