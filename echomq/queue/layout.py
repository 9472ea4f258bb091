"""What a worker reads of a queue's row layout as it starts (docs/PROTOCOL.md, "The job row"):
the version ``echomq migrate`` recorded, and whether the head of each of the queue's sets holds a
row of the earlier layout."""

from __future__ import annotations

from typing import Any

from redis.exceptions import NoPermissionError

from echomq.engine.calls import text
from echomq.engine.clients import twins
from echomq.engine.program import Program, Reads, method
from echomq.engine.rows import LAYOUT_KEY, OLD_PAYLOAD, SAMPLED, Layout, recorded_layout


def read_layout(conn: Any, base: str) -> Program[Layout]:
    """Two round trips: the recorded version with the head id of each of ``SAMPLED``, then
    whether each of those rows holds ``payload``. A client the server lets read none of it (an
    ACL) learns nothing: no version, no old rows."""
    try:
        found = yield Reads(conn, [method("get", base + LAYOUT_KEY),
                                   *(method("zrange", base + name, 0, 0) for name in SAMPLED)])
        ids = list(dict.fromkeys(text(job_id) for head in found[1:] for job_id in head))
        held = (yield Reads(conn, [method("hexists", base + "job:" + job_id, OLD_PAYLOAD)
                                   for job_id in ids])) if ids else []
    except twins(NoPermissionError):
        return Layout(None)
    return Layout(recorded_layout(found[0]),
                  tuple(job_id for job_id, old in zip(ids, held, strict=True) if old))
