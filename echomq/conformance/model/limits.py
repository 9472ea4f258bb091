"""The queue-wide limits of a flat queue (``<base>queueconf``), the model's rule: claim and
settle's claim part lease what fits under ``concurrency`` (leases in active) and ``rate``
(claims a window of ``window_ms``); the queue is held (field ``held``) while active holds
``concurrency`` leases and jobs wait; over its rate with jobs waiting, its window's opening waits
in ``throttled`` under ``*``; a lease leaving active while the queue is held leaves a wake token.
A knob absent or not an integer from 1 is no limit (a window of 1000 ms)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from echomq.conformance.model.state import State, Value
from echomq.conformance.model.words import dec, int_arg

QUEUE_WINDOW = b"*"
QUEUE_WINDOW_MS = 1000
WINDOW = re.compile(rb"(\d{1,15}) (\d{1,15})")


@dataclass
class Limits:
    concurrency: int | None
    rate: int | None
    window_ms: int
    start: int
    count: int


def _hset(state: State, key: bytes, name: bytes, value: bytes) -> None:
    state.keys.setdefault(key, Value(b"hash", {})).data[name] = value


def _knob(state: State, conf: bytes, name: bytes) -> int | None:
    value = state.hget(conf, name)
    return None if value is None else int_arg(value, 1)


def queue_limits(state: State, base: bytes, now: int) -> Limits | None:
    """The limits as a claim at ``now`` sees them; None when ``queueconf`` (or, with a rate,
    ``throttled``) is of another type (WRONGTYPE)."""
    conf = base + b"queueconf"
    if state.kind(conf) not in (b"none", b"hash"):
        return None
    limits = Limits(_knob(state, conf, b"concurrency"), _knob(state, conf, b"rate"),
                    _knob(state, conf, b"window_ms") or QUEUE_WINDOW_MS, now, 0)
    if limits.rate is not None:
        if state.kind(base + b"throttled") not in (b"none", b"zset"):
            return None
        match = WINDOW.fullmatch(state.hget(conf, b"window") or b"")
        if match and now < int(match[1]) + limits.window_ms:
            limits.start, limits.count = int(match[1]), int(match[2])
    return limits


def limited_take(state: State, limits: Limits, active: bytes, planned: int) -> int:
    """How many of ``planned`` jobs the limits let a claim lease now."""
    take = planned
    if limits.concurrency is not None:
        take = min(take, max(0, limits.concurrency - len(state.zitems(active))))
    if limits.rate is not None:
        take = min(take, max(0, limits.rate - limits.count))
    return take


def note_queue_limits(state: State, base: bytes, limits: Limits, active: bytes, pending: bytes,
                      taken: int) -> None:
    """After a claim leased ``taken`` jobs: ``held`` set or cleared, the window counted, the
    window's opening in ``throttled`` while the queue is over its rate and jobs wait."""
    conf = base + b"queueconf"
    waiting = len(state.zitems(pending)) > 0
    held = (limits.concurrency is not None and waiting
            and len(state.zitems(active)) >= limits.concurrency)
    was_held = state.hget(conf, b"held") is not None
    if held and not was_held:
        _hset(state, conf, b"held", b"1")
    if was_held and not held:
        state.keys[conf].data.pop(b"held")
        if not state.keys[conf].data:
            del state.keys[conf]
    if limits.rate is None:
        return
    count = limits.count + taken
    if taken > 0:
        _hset(state, conf, b"window", dec(limits.start) + b" " + dec(count))
    throttled = base + b"throttled"
    opens = dict(state.zitems(throttled)).get(QUEUE_WINDOW)
    if waiting and count >= limits.rate:
        state.zadd(throttled, limits.start + limits.window_ms, QUEUE_WINDOW)
    elif opens is not None:
        state.zrem(throttled, QUEUE_WINDOW)
