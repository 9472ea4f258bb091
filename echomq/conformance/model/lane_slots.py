"""A lane group's slots and windows (include/lane_slots.lua, include/reopen.lua, the part of
include/lanes.lua they use): a lane job's lease leaving active gives its group's slot back, and
the group comes back to the ring from its concurrency limit when below it; promote reopens the
groups whose rate window has opened (the queue's own window, ``*``, among them)."""

from __future__ import annotations

from echomq.conformance.model.state import State
from echomq.conformance.model.words import dec, int_arg, int_field

PARKED_FULL, PARKED_RATE = 1, 2


def parked_mask(state: State, base: bytes, group: bytes) -> int:
    return int_field(state.hget(base + b"parked", group), 0)


def lane_concurrency(state: State, base: bytes, group: bytes) -> int | None:
    """The group's concurrency knob (its own, else the queue's default); None: no limit."""
    conf = base + b"laneconf"
    value = state.hget(conf, b"concurrency:" + group)
    if value is None:
        value = state.hget(conf, b"concurrency")
    return None if value is None else int_arg(value, 1)


def lane_nonempty(state: State, base: bytes, group: bytes) -> bool:
    """The group's lane holds jobs in either key (a key of another type holds none)."""
    lane, prio = base + b"lane:" + group, base + b"prio:" + group
    return (state.kind(lane) == b"list" and state.llen(lane) > 0) \
        or (state.kind(prio) == b"zset" and len(state.zitems(prio)) > 0)


def clear_parked(state: State, base: bytes, group: bytes, mask: int) -> None:
    """set_parked to a mask with fewer bits: the group's field kept or dropped, its window out
    of ``throttled`` when its rate bit goes, and back to the ring's tail when it is no longer
    parked and its lane holds jobs."""
    parked, was = base + b"parked", parked_mask(state, base, group)
    if mask == 0:
        state.hdel(parked, group)
    else:
        state.keys[parked].data[group] = dec(mask)
    if not mask & PARKED_RATE and was & PARKED_RATE:
        state.zrem(base + b"throttled", group)
    if was != 0 and mask == 0 and lane_nonempty(state, base, group):
        state.push(base + b"ring", group)


def release_lane_slot(state: State, base: bytes, row: bytes) -> None:
    """A lease leaves active: the queue's slot, then, for a lane job, its group's."""
    state.release_queue_slot(base)
    group = state.hget(row, b"lane") if state.kind(row) == b"hash" else None
    if group is None:
        return
    held = int_field(state.hget(base + b"leased", group), 0) - 1
    if held <= 0:
        state.hdel(base + b"leased", group)
    else:
        state.hset(base + b"leased", group, dec(held))
    mask = parked_mask(state, base, group)
    if not mask & PARKED_FULL:
        return
    limit = lane_concurrency(state, base, group)
    if limit is None or held < limit:
        clear_parked(state, base, group, mask - PARKED_FULL)


def due_windows(state: State, base: bytes, now: int, limit: int) -> list[bytes] | None:
    """The groups whose window opened by ``now`` (at most ``limit``), each one's lane keys of
    their types; None when one is not (WRONGTYPE)."""
    due = [member for member, score in state.zitems(base + b"throttled") if score <= now][:limit]
    return due if all(state.lane_keys_ok(base, group) for group in due) else None


def reopen_windows(state: State, base: bytes, due: list[bytes], wake_key: bytes) -> None:
    """Each due group leaves ``throttled`` and loses its rate bit; a wake token each."""
    for group in due:
        state.zrem(base + b"throttled", group)
        mask = parked_mask(state, base, group)
        if mask & PARKED_RATE:
            clear_parked(state, base, group, mask - PARKED_RATE)
    state.wake(wake_key, len(due))
