"""The job row's field names every job carries (docs/PROTOCOL.md, "The job row"), one letter
each, and the names the release before them wrote (what ``echomq migrate`` renames). Every other
field of the row keeps its full name."""

from __future__ import annotations

PAYLOAD = "p"
ATTEMPTS = "a"
ENQUEUED_AT = "t"
FENCE = "f"

# The earlier layout's names, each to its field now.
RENAMED = {"payload": PAYLOAD, "attempts": ATTEMPTS, "enqueued_at": ENQUEUED_AT, "fence": FENCE}
# Each field's full name, as the operator's views show a row (inspect, the dashboard's JSON).
FULL_NAMES = {short: full for full, short in RENAMED.items()}
