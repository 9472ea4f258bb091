"""The bounds of one call: how long a blocking call (a consumer's park, a slice of
``Queue.wait``) may last on a connection — short enough that the server answers before the
client's socket timeout trips — and how many jobs one housekeeping step moves. Pure: no I/O, no
clock."""

from __future__ import annotations

from echomq.engine import calls

# How far below a client's socket timeout a park stays, so BLPOP always answers before it trips.
PARK_TIMEOUT_MARGIN_S = 1.0


def park_cap_for(socket_timeout_s: float | None, cap_ms: int) -> int:
    """``cap_ms``, lowered so a BLPOP answers before a socket timeout of ``socket_timeout_s``
    trips (its timeout less a margin of up to 1 s, at least half of it)."""
    if socket_timeout_s is None or socket_timeout_s <= 0:
        return cap_ms
    margin = min(PARK_TIMEOUT_MARGIN_S, socket_timeout_s / 2)
    return max(1, min(cap_ms, int((socket_timeout_s - margin) * 1000)))

# Each recover or promote call takes at most this many jobs; a round calls again while a call
# came back full, so a backlog of expired leases comes back in short steps, all in one round.
HOUSEKEEPING_STEP = calls.DEFAULT_BATCH_LIMIT

def more_due(moved: int) -> bool:
    """Whether a recover or promote step that took ``moved`` jobs may have left more due: it
    came back full, so the round takes another step."""
    return moved >= HOUSEKEEPING_STEP
