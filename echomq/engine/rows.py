"""The job row's field names every job carries (docs/PROTOCOL.md, "The job row"), one letter
each, and the names the release before them wrote (what ``echomq migrate`` renames). Every other
field of the row keeps its full name."""

from __future__ import annotations

from dataclasses import dataclass

PAYLOAD = "p"
ATTEMPTS = "a"
ENQUEUED_AT = "t"
FENCE = "f"

# The earlier layout's names, each to its field now.
OLD_PAYLOAD = "payload"
OLD_ATTEMPTS = "attempts"
RENAMED = {OLD_PAYLOAD: PAYLOAD, OLD_ATTEMPTS: ATTEMPTS, "enqueued_at": ENQUEUED_AT, "fence": FENCE}

# Each field's full name, as the operator's views show a row (inspect, the dashboard's JSON).
FULL_NAMES = {short: full for full, short in RENAMED.items()}

# The row layout: 1 the earlier names, 2 the one-letter ones. ``echomq migrate`` records the
# layout it rewrote a queue to in ``<base>layout``; a worker reads it when it starts, and refuses
# a queue recorded in a layout above the one it writes (it cannot read those rows).
LAYOUT = 2
LAYOUT_KEY = "layout"
# Where a worker looks for rows of the earlier layout when it starts: the head of each set.
SAMPLED = ("pending", "delayed", "active", "dead")


@dataclass(frozen=True)
class Layout:
    """What a worker found of a queue's row layout: the version recorded (None: none), and the
    ids of the rows it sampled that hold the earlier layout's ``payload``."""

    recorded: int | None
    old_rows: tuple[str, ...] = ()

    @property
    def readable(self) -> bool:
        """Whether a worker of this release can read the queue's rows."""
        return self.recorded is None or self.recorded <= LAYOUT


def recorded_layout(value: bytes | str | None) -> int | None:
    """The version a ``<base>layout`` value records (None: absent or not a version; an
    unreadable value counts as a layout above this release's)."""
    if value is None:
        return None
    shown = value.decode(errors="replace") if isinstance(value, bytes) else value
    return int(shown) if shown.isdigit() and len(shown) < 10 else LAYOUT + 1
