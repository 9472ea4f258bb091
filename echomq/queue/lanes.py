"""Lane controls: each group's knobs (concurrency, rate, window, weight), the queue's defaults, and
pausing a lane or the whole queue. An operator's tools: they run as scripts whatever the queue's
wire (a paused queue stops the native claims too).

A group's lane leaves the ring while it holds ``concurrency`` leases, or has had ``rate`` claims
in its current ``window_ms``, or is paused; it comes back when a lease of it leaves active (acked,
retried, dead, recovered, released), when its window opens (promote, or the next lane claim), or
on resume. A group of weight ``w`` is served ``w`` times in a row per turn of the ring, so a
group that may be served waits at most ``W`` lane claims, ``W`` the total weight of the groups
in the ring (``k`` claims for ``k`` groups of weight 1).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from echomq.engine import transitions as t
from echomq.engine.calls import Arg, Call, QueueCalls, text
from echomq.engine.clients import is_cluster
from echomq.engine.execution import ExecutorMethods, ScriptWire
from echomq.engine.native import checked_int, checked_lane, checked_now
from echomq.engine.program import Invoke, Program, Reads, Send, method, op

KNOBS = ("concurrency", "rate", "window_ms", "weight")
ALL = "*"
# A knob passed as ``...`` keeps its value; None clears it (a group then follows the default).
Knob = int | None | types.EllipsisType
PARKED_PAUSED = 4


def knob_arg(name: str, value: Knob) -> str:
    """A knob as lane_set takes it: ``=`` keep, ``-`` clear, or the integer (>= 1)."""
    if value is Ellipsis:
        return "="
    if value is None:
        return "-"
    return checked_int(name, value, 1)


def lane_set_call(base: str, group: str | None, knobs: dict[str, Knob],
                  now: int | None) -> Call:
    """The lane_set call for ``group`` (None: the queue's defaults)."""
    scope = ALL if group is None else checked_lane(group)
    args: list[Arg] = [scope, *(knob_arg(name, knobs[name]) for name in KNOBS), checked_now(now)]
    return t.LANE_SET, t.keys_for(base, t.LANE_SET), args


def lane_pause_call(base: str, group: str | None, paused: bool) -> Call:
    """The lane_pause call for ``group`` (None: the whole queue)."""
    scope = ALL if group is None else checked_lane(group)
    return t.LANE_PAUSE, t.keys_for(base, t.LANE_PAUSE), [scope, "1" if paused else "0"]


def settings_of(conf: dict[Any, Any], group: str | None) -> dict[str, int | None]:
    """A group's knobs as they apply (its override, else the default; None: no limit, weight 1
    and window 1000 ms when unset), from the laneconf hash."""
    fields = {text(k): int(v) for k, v in conf.items()}
    found: dict[str, int | None] = {}
    for name in KNOBS:
        own = fields.get(f"{name}:{group}") if group is not None else None
        found[name] = own if own is not None else fields.get(name)
    found["window_ms"] = found["window_ms"] or 1000
    found["weight"] = found["weight"] or 1
    return found


def paused_lanes(parked: dict[Any, Any]) -> list[str]:
    """The groups whose parked bits include paused, sorted."""
    return sorted(text(group) for group, bits in parked.items() if int(bits) & PARKED_PAUSED)


_SCRIPTS = ScriptWire()


def _scripted(conn: Any, call: Call) -> Program[Any]:
    """``call`` run as its script, whatever the queue's wire."""
    return ExecutorMethods.call.program(_SCRIPTS, conn, *call)


class LaneControls:
    """The lane controls of both Queues (mixed in): written once, as programs
    (``echomq.engine.program``), run by the blocking ``echomq.Queue`` and awaited on
    ``echomq.aio.Queue``."""

    conn: Any
    calls: QueueCalls

    @op
    def set_lane(self, group: str, *, concurrency: Knob = ..., rate: Knob = ...,
                 window_ms: Knob = ..., weight: Knob = ...,
                 now: int | None = None) -> Program[None]:
        """Set ``group``'s knobs (``...`` keeps one, None clears it so the queue's default
        applies); the group moves in or out of the ring at once as its new limits say."""
        knobs = {"concurrency": concurrency, "rate": rate, "window_ms": window_ms,
                 "weight": weight}
        yield from _scripted(self.conn, lane_set_call(self.calls.base, group, knobs, now))

    @op
    def set_lane_defaults(self, *, concurrency: Knob = ..., rate: Knob = ...,
                          window_ms: Knob = ..., weight: Knob = ...,
                          now: int | None = None) -> Program[None]:
        """Set the queue's default knobs (None: no limit). Parked groups whose limits were
        raised come back at once; a group in the ring over a lowered default is parked by the
        lane claim that reaches it."""
        knobs = {"concurrency": concurrency, "rate": rate, "window_ms": window_ms,
                 "weight": weight}
        yield from _scripted(self.conn, lane_set_call(self.calls.base, None, knobs, now))

    @op
    def lane_settings(self, group: str | None = None) -> Program[dict[str, int | None]]:
        """``group``'s knobs as they apply (None: the queue's defaults)."""
        conf = yield Invoke(self.conn, method("hgetall", self.calls.key("laneconf")))
        return settings_of(conf, group)

    @op
    def lane_depths(self, groups: Iterable[Any] | None = None,
                    parked: Iterable[Any] | None = None) -> Program[dict[str, int]]:
        """How many jobs wait in each non-empty lane: the ring's groups in serving order, then
        the parked ones (at a limit, over their rate, or paused)."""
        key = self.calls.key
        if groups is None or parked is None:
            groups = ring_in_turn(*(yield Reads(self.conn, ring_reads(key))))
            parked = yield Invoke(self.conn, method("hkeys", key("parked")))
        names = lane_groups(groups, parked)
        reads = [method(command, name) for group in names
                 for command, name in zip(("llen", "zcard"), waiting_keys(key, group),
                                          strict=True)]
        depths = yield Reads(self.conn, reads)
        return shown_depths(names, per_group(depths), groups)

    @op
    def pause(self, lane: str | None = None) -> Program[None]:
        """Pause ``lane`` (its jobs wait, out of the ring) or, with None, the whole queue (no
        job is leased, flat or lane). Leases in hand run on."""
        yield from _scripted(self.conn, lane_pause_call(self.calls.base, lane, True))

    @op
    def resume(self, lane: str | None = None) -> Program[None]:
        """Undo ``pause``; parked consumers are woken."""
        yield from _scripted(self.conn, lane_pause_call(self.calls.base, lane, False))

    @op
    def paused(self) -> Program[tuple[bool, list[str]]]:
        """Whether the whole queue is paused, and the paused lanes."""
        whole, parked = yield Reads(self.conn, [method("exists", self.calls.key("paused")),
                                                method("hgetall", self.calls.key("parked"))])
        return bool(whole), paused_lanes(parked)

    @op
    def is_paused(self) -> Program[bool]:
        """Whether the whole queue is paused (one ``EXISTS``: what a consumer asks before it
        starts a prefetched job it has had for a while)."""
        paused = self.calls.key("paused")
        if is_cluster(self.conn):  # its slot's node once: one that is down fails it at once
            return bool((yield Send(self.conn, ("EXISTS", paused))))
        return bool((yield Invoke(self.conn, method("exists", paused))))

    @op
    def leased_by_lane(self) -> Program[dict[str, int]]:
        """How many leases each group holds."""
        leased = yield Invoke(self.conn, method("hgetall", self.calls.key("leased")))
        return {text(g): int(n) for g, n in leased.items()}


PARKED_WHY = ((1, "limit"), (2, "rate"), (PARKED_PAUSED, "paused"))


def lane_report(queue: Any) -> list[dict[str, Any]]:
    """One row per known group (in the ring, parked, holding leases, or with knobs of its
    own): its knobs as they apply, jobs waiting, leases held and whether it is in the ring or
    why it is parked. Sorted by group."""
    conn = queue.conn
    with conn.pipeline(transaction=False) as pipe:
        for role in ("laneconf", "parked", "leased", "ringleft"):
            pipe.hgetall(queue.key(role))
        pipe.lrange(queue.key("ring"), 0, -1)
        conf, parked, leased, left, entries = pipe.execute()
    ring = ring_in_turn(entries, left)
    own = {text(f).split(":", 1)[1] for f in conf if ":" in text(f)}
    parked = {text(g): int(bits) for g, bits in parked.items()}
    held = {text(g): int(n) for g, n in leased.items()}
    groups = sorted(own | set(parked) | set(held) | {text(g) for g in ring})
    with conn.pipeline(transaction=False) as pipe:
        for group in groups:
            listed, prioritised = waiting_keys(queue.key, group)
            pipe.llen(listed)
            pipe.zcard(prioritised)
        depths = per_group(pipe.execute())
    return [{"group": group, **settings_of(conf, group), "waiting": int(depth),
             "leased": held.get(group, 0), "state": _state(parked.get(group, 0))}
            for group, depth in zip(groups, depths, strict=True)]


def _state(bits: int) -> str:
    why = [name for bit, name in PARKED_WHY if bits & bit]
    return "parked: " + ", ".join(why) if why else "ready"


def ring_reads(key: Callable[..., str]) -> list[Any]:
    """The reads of the ring as ``ring_in_turn`` takes it: its entries, and the entries its
    groups left behind (``ringleft``)."""
    return [method("lrange", key("ring"), 0, -1), method("hgetall", key("ringleft"))]


def ring_in_turn(entries: Iterable[Any], left: dict[Any, Any]) -> list[str]:
    """The groups in the ring, in serving order: its entries but those their groups left behind
    when they left it (``ringleft``: a group's first ``n`` entries from the head, which the lane
    claim that reaches them drops; a count that is not an integer counts 0)."""
    skip = {text(group): _count(n) for group, n in left.items()}
    groups = []
    for group in map(text, entries):
        if skip.get(group, 0) > 0:
            skip[group] -= 1
        else:
            groups.append(group)
    return groups


def _count(value: Any) -> int:
    digits = text(value)
    return int(digits) if digits.isdigit() and len(digits) <= 15 else 0


def lane_groups(ring: Iterable[Any], parked: Iterable[Any]) -> list[str]:
    """The groups whose lanes may hold jobs: the ring's, in serving order, then the parked ones
    (out of the ring at a limit, over their rate or paused), by name."""
    names = [text(group) for group in ring]
    seen = set(names)
    return names + sorted({text(group) for group in parked} - seen)


def waiting_keys(key: Callable[..., str], group: str) -> tuple[str, str]:
    """A group's two keys of waiting jobs: its lane, the list of its priority-0 jobs (read with
    LLEN), and its prio zset, of its other jobs (ZCARD)."""
    return key("lane", lane=group), key("prio", lane=group)


def per_group(counts: Sequence[Any]) -> list[int]:
    """Counts read for each group in turn, its LLEN then its ZCARD: each group's total."""
    return [int(a) + int(b) for a, b in zip(counts[0::2], counts[1::2], strict=True)]


def lane_waiting(conn: Any, queue: Any, group: str) -> int:
    """How many jobs wait in ``group``'s lane of ``queue`` (both its keys), in one round trip."""
    with conn.pipeline(transaction=False) as pipe:
        for command, name in zip(("llen", "zcard"), waiting_keys(queue.key, group), strict=True):
            getattr(pipe, command)(name)
        return sum(per_group(pipe.execute()))


def shown_depths(names: list[str], depths: Iterable[Any],
                 ring: Iterable[Any]) -> dict[str, int]:
    """Each group's depth; a parked group whose lane is empty is left out."""
    in_ring = {text(group) for group in ring}
    return {group: n for group, n in zip(names, map(int, depths), strict=True)
            if n or group in in_ring}
