"""The case table: for every transition, good calls on chosen states and every kind of bad input.

A case is a state (raw data commands applied to both executors' dbs), an argument list from
numkeys onwards, and the reply it must start with — so the table itself is checked, not only
the parity of the two executors. ``all_cases()`` lists every case; ``case_differences`` runs
one on both executors and holds them to its oracle (echomq/conformance/oracle.py): the model's
exact reply and keyspace for every case but those on the server's clock, which state the
keyspace they must leave — so a bug made the same way in both executors fails the table.

By family: ``common`` (what every case is built of), ``generic`` (the cases every transition
has), ``flat`` (the single verbs), ``batch`` (settle, extend_many), ``lanes`` (the lane
bookkeeping), ``replay`` (settlements sent again), ``records`` (claim records), gathered by
``catalog``.
"""

from __future__ import annotations

from echomq.conformance.cases.catalog import all_cases
from echomq.conformance.cases.common import (
    BASE,
    GOOD,
    NOW,
    NULL,
    NULLS,
    READY,
    Case,
    Command,
    case_differences,
    delayed,
    key,
    leased,
    row,
    waiting,
)

__all__ = ["BASE", "GOOD", "NOW", "NULL", "NULLS", "READY", "Case", "Command", "all_cases",
           "case_differences", "delayed", "key", "leased", "row", "waiting"]
