"""Time-sortable job ids that pass the kind gate: ``JOB:<ULID>``."""

from __future__ import annotations

from ulid import ULID


def new_job_id() -> str:
    """A fresh ``JOB:`` id; ids made later sort after earlier ones (to the millisecond)."""
    return f"JOB:{ULID()}"
