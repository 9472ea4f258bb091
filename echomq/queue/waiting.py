"""How ``Queue.wait`` (sync and asyncio) blocks: in slices that each end before the
connection's socket timeout would trip, so a wait of any length works on any client."""

from __future__ import annotations

import time
from typing import Any

from echomq.queue.bounds import park_cap_for
from echomq.queue.connection import socket_timeout_of

# One blocking wait on the server lasts at most this long, whatever the socket allows.
WAIT_SLICE_MS = 60_000
# Less than this left ends the wait: a blocking call that short is a round trip for nothing
# (and a timeout of 0 would block for ever).
SHORTEST_BLOCK_S = 0.001


def wait_slice_s(conn: Any) -> float:
    """The longest single blocking wait on ``conn``: under its socket timeout, at most 60 s."""
    return park_cap_for(socket_timeout_of(conn), WAIT_SLICE_MS) / 1000


def next_block_s(deadline: float, slice_s: float) -> float | None:
    """Seconds the next blocking wait may last until ``deadline`` (``time.monotonic()``; inf
    for none), at most ``slice_s``; None when the wait is over."""
    left = deadline - time.monotonic()
    if left < SHORTEST_BLOCK_S:
        return None
    return min(left, slice_s)
