"""The unique enqueue's options — dedupe, debounce and throttle, at most one a call — and its call
(docs/PROTOCOL.md, "unique enqueue"): the mode, the dedupe key ``<base>dedupe:<key>`` and the
mode's window the protocol takes, each checked before anything is sent."""

from __future__ import annotations

from dataclasses import dataclass

from echomq.engine import transitions as t
from echomq.engine.calls import Call, Payload, QueueCalls, payload_bytes
from echomq.engine.deadlines import priority_args
from echomq.engine.errors import ArgumentError
from echomq.engine.native import checked_claim_id, checked_id, checked_int, checked_now

# The window of each mode when the call gives none: a dedupe key is released when its job ends;
# a debounce waits a second of quiet; a throttle admits one job a second.
DEFAULT_WINDOW_MS = {"dedupe": 0, "debounce": 1_000, "throttle": 1_000}
KEY_ERROR = "a dedupe, debounce or throttle key must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -"


@dataclass(frozen=True)
class Unique:
    """One mode of a unique enqueue: ``mode`` (dedupe, debounce or throttle), its ``key`` (the
    dedupe key's name after ``<base>dedupe:``) and its window, ``period_ms``."""

    mode: str
    key: str
    period_ms: int


def unique_options(dedupe: str | None = None, dedupe_ms: int | None = None,
                   debounce: str | None = None, debounce_ms: int | None = None,
                   throttle: str | None = None, throttle_ms: int | None = None) -> Unique | None:
    """The mode a call's options name, or None when they name none; ArgumentError for two modes,
    a window without its key, a key outside the lane gate or a window that is not an integer
    from 0."""
    given = {"dedupe": (dedupe, dedupe_ms), "debounce": (debounce, debounce_ms),
             "throttle": (throttle, throttle_ms)}
    for mode, (key, window) in given.items():
        if key is None and window is not None:
            raise ArgumentError(f"{mode}_ms is the window of {mode}=: give {mode}= too")
    named = [(mode, key, window) for mode, (key, window) in given.items() if key is not None]
    if len(named) > 1:
        raise ArgumentError("at most one of dedupe=, debounce= and throttle= a call")
    if not named:
        return None
    mode, key, window = named[0]
    try:
        checked_claim_id(key)  # the lane gate
    except ArgumentError:
        raise ArgumentError(KEY_ERROR) from None
    period = DEFAULT_WINDOW_MS[mode] if window is None else window
    checked_int(f"{mode}_ms", period, 0)
    return Unique(mode, key, period)


def unique_call(calls: QueueCalls, unique: Unique, job_id: str, payload: Payload,
                now: int | None, delay_ms: int = 0, priority: int = 0) -> Call:
    """The unique enqueue of a flat job on ``calls``' queue, in ``unique``'s mode."""
    checked_id(job_id)
    args: tuple[str | bytes, ...] = (
        job_id, payload_bytes(payload), checked_now(now), unique.mode, str(unique.period_ms),
        checked_int("delay_ms", delay_ms, 0), *priority_args(priority))
    keys = t.keys_for(calls.base, t.ENQUEUE_UNIQUE, job_id, unique.key, events=calls.events)
    return t.ENQUEUE_UNIQUE, keys, args


def admission_call(calls: QueueCalls, unique: Unique | None, job_id: str, payload: Payload,
                   lane: str | None, now: int | None, delay_ms: int, at_ms: int | None,
                   priority: int, deadline: int | None) -> Call:
    """What ``Queue.enqueue`` sends: the unique enqueue in ``unique``'s mode (a flat job, no
    ``at_ms``, no deadline: ArgumentError otherwise), else the plain admission."""
    if unique is None:
        return calls.enqueue(job_id, payload, lane, now, delay_ms, at_ms, priority, deadline)
    if lane is not None or at_ms is not None:
        raise ArgumentError(f"{unique.mode}= takes a flat job without at_ms")
    if deadline is not None:
        raise ArgumentError(f"{unique.mode}= takes no expires_in or expires_at")
    return unique_call(calls, unique, job_id, payload, now, delay_ms, priority)
