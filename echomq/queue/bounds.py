"""The bounds of one call: how long a blocking call (a consumer's park, a slice of
``Queue.wait``) may last on a connection — short enough that the server answers before the
client's socket timeout trips — and how many jobs one housekeeping step moves. Pure: no I/O, no
clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

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


# A housekeeping round trims dead jobs (trim_dead, HOUSEKEEPING_STEP a call) for at most this
# many calls, so a queue that gained a million dead jobs is trimmed over several rounds.
TRIM_STEPS = 10
# A consumer's housekeeping trims at its first round, then every TRIM_EVERY-th round (the age
# bound, and jobs other consumers sent dead), and at every round after one that came back full.
TRIM_EVERY = 60


class Housekept(NamedTuple):
    """What one housekeeping round (``recover_due``) did: leases recovered (back to run or
    dead), delayed jobs promoted, dead jobs trimmed to the queue's bounds, held jobs of
    abandoned staging cancelled (``echomq.queue.staging``; the sealed jobs waiting on them,
    cancelled with them, not counted)."""

    recovered: int
    promoted: int
    trimmed: int
    abandoned: int = 0


@dataclass
class DeadTrims:
    """When a consumer's housekeeping round trims (and sweeps abandoned staging,
    ``echomq.queue.staging``): at its first, every TRIM_EVERY-th after the last trim, and while
    the last trim came back full (more may be over the bounds). Between, a round sends no
    trim_dead and no sweep, so a queue with nothing dead or held pays for neither."""

    rounds_since: int | None = None  # rounds since the last trim; None: never trimmed
    more: bool = False

    def wanted(self) -> bool:
        """Whether the next round trims."""
        return self.more or self.rounds_since is None or self.rounds_since + 1 >= TRIM_EVERY

    def done(self, trimmed: bool, housekept: Housekept) -> None:
        """A round did ``housekept`` (``trimmed``: it trimmed)."""
        if not trimmed:
            self.rounds_since = None if self.rounds_since is None else self.rounds_since + 1
            return
        self.rounds_since = 0
        self.more = housekept.trimmed >= TRIM_STEPS * HOUSEKEEPING_STEP
