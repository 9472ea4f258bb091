"""A job's priority in the pending score: ``score = min(t, TIME_CAP) - p * PRIORITY_BAND``.

Each priority owns a band of ``PRIORITY_BAND`` scores, so a higher priority is always claimed
first and jobs of one priority go in the order of their times. ``split_score`` reads a pending
score back into its priority and time, for the tools that show pending jobs."""

from __future__ import annotations

from echomq.engine.transitions import PRIORITY_BAND, TIME_CAP


def pending_score(priority: int, t: int) -> int:
    """The pending score of a job of ``priority`` admitted (or due) at ``t`` milliseconds; a time
    past TIME_CAP (the year 3084) is clamped inside the band."""
    return min(t, TIME_CAP) - priority * PRIORITY_BAND


def split_score(score: float) -> tuple[int, int]:
    """``(priority, time)`` of a pending score, exact for every time below TIME_CAP."""
    whole = int(score)
    priority = -(whole // PRIORITY_BAND)
    return priority, whole + priority * PRIORITY_BAND


def band(priority: int) -> tuple[int, int]:
    """The lowest and highest pending score of ``priority``'s jobs."""
    low = -priority * PRIORITY_BAND
    return low, low + TIME_CAP
