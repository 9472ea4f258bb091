"""The operator's side of a sharded queue (mixed into ``echomq.queue.sharded.ShardedMethods``):
pause and resume, lane knobs, limits and dead bounds over its shards, written once as programs,
and the methods that have no meaning over shards, refused by name with the reason.

A queue-wide setting (pause of the whole queue, lane defaults, dead bounds) is written to every
shard; a group's (its knobs, its pause) to the group's shard alone. Queue-wide concurrency and
rate limits cannot be kept exact over shards that are claimed apart, so they are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from echomq.engine.program import Op, Program, op
from echomq.queue.dead import Bound, DeadBounds, DeadControls
from echomq.queue.lanes import Knob, LaneControls
from echomq.queue.limits import Limit, LimitControls, QueueLimits
from echomq.queue.shard_layout import ShardError

# Program of a shard's: ``Class.method.program``.
_set_lane = LaneControls.set_lane.program
_set_defaults = LaneControls.set_lane_defaults.program


def refused(name: str, why: str) -> Op[Any, Any, Any]:
    """An op that refuses, on a sharded queue, with ShardError naming it and saying why."""

    def program(self: Any, *args: Any, **kwargs: Any) -> Program[Any]:
        raise ShardError(f"{name} is not available on sharded queue {self.name!r}: {why}")

    program.__name__ = program.__qualname__ = name
    return op(program)


class ShardedControls:
    """Pausing, lane knobs, limits and dead bounds of a sharded queue."""

    name: str
    _shards: list[Any]
    _lane_shard: Callable[[str], Any]

    @op
    def pause(self, lane: str | None = None) -> Program[None]:
        """Pause ``lane`` (on its group's shard) or, with None, the whole queue (every shard)."""
        for shard in self._scope(lane):
            yield from LaneControls.pause.program(shard, lane)

    @op
    def resume(self, lane: str | None = None) -> Program[None]:
        """Undo ``pause``: ``lane`` on its group's shard, or every shard."""
        for shard in self._scope(lane):
            yield from LaneControls.resume.program(shard, lane)

    @op
    def paused(self) -> Program[tuple[bool, list[str]]]:
        """Whether any shard is paused whole, and the paused lanes of every shard."""
        whole, lanes = False, list[str]()
        for shard in self._shards:
            own, own_lanes = yield from LaneControls.paused.program(shard)
            whole, lanes = whole or own, lanes + own_lanes
        return whole, sorted(lanes)

    @op
    def is_paused(self) -> Program[bool]:
        """Whether any shard is paused whole (``pause()`` pauses them all)."""
        for shard in self._shards:
            if (yield from LaneControls.is_paused.program(shard)):
                return True
        return False

    @op
    def leased_by_lane(self) -> Program[dict[str, int]]:
        """How many leases each group holds (each group on its own shard)."""
        held: dict[str, int] = {}
        for shard in self._shards:
            held.update((yield from LaneControls.leased_by_lane.program(shard)))
        return held

    @op
    def set_lane(self, group: str, *, concurrency: Knob = ..., rate: Knob = ...,
                 window_ms: Knob = ..., weight: Knob = ...,
                 now: int | None = None) -> Program[None]:
        """Set ``group``'s knobs, on the group's shard (its lane and all its jobs are there, so
        its limits stay exact)."""
        yield from _set_lane(self._lane_shard(group), group, concurrency=concurrency, rate=rate,
                             window_ms=window_ms, weight=weight, now=now)

    @op
    def set_lane_defaults(self, *, concurrency: Knob = ..., rate: Knob = ...,
                          window_ms: Knob = ..., weight: Knob = ...,
                          now: int | None = None) -> Program[None]:
        """Set the default knobs on every shard (each group's limits stay exact: a group lives on
        one shard)."""
        for shard in self._shards:
            yield from _set_defaults(shard, concurrency=concurrency, rate=rate,
                                     window_ms=window_ms, weight=weight, now=now)

    @op
    def lane_settings(self, group: str | None = None) -> Program[dict[str, int | None]]:
        """``group``'s knobs as they apply, from its shard (None: the defaults, from shard 0)."""
        shard = self._shards[0] if group is None else self._lane_shard(group)
        return (yield from LaneControls.lane_settings.program(shard, group))

    @op
    def limits(self) -> Program[QueueLimits]:
        """The queue-wide limits: none can be set on a sharded queue (``set_limits``); read from
        shard 0."""
        return (yield from LimitControls.limits.program(self._shards[0]))

    @op
    def set_limits(self, *, concurrency: Limit = ..., rate: Limit = ...,
                   window_ms: Limit = ...) -> Program[QueueLimits]:
        """Refused with a number (ShardError): shards claimed apart cannot keep one queue-wide
        count exact; use a lane's limits (exact: a group lives on one shard). None clears a
        limit on every shard."""
        given = {"concurrency": concurrency, "rate": rate, "window_ms": window_ms}
        if any(value is not None and value is not Ellipsis for value in given.values()):
            raise ShardError(f"set_limits is not available on sharded queue {self.name!r}: a "
                             "queue-wide concurrency or rate cannot be exact over shards "
                             "claimed apart; set a lane's limits instead")
        for shard in self._shards:
            yield from LimitControls.set_limits.program(shard, concurrency=concurrency,
                                                        rate=rate, window_ms=window_ms)
        return (yield from LimitControls.limits.program(self._shards[0]))

    @op
    def dead_bounds(self) -> Program[DeadBounds]:
        """The bounds of dead jobs, which apply to each shard (read from shard 0)."""
        return (yield from DeadControls.dead_bounds.program(self._shards[0]))

    @op
    def expired_count(self) -> Program[int]:
        """The jobs claims ended expired, summed over the shards."""
        total = 0
        for shard in self._shards:
            total += yield from DeadControls.expired_count.program(shard)
        return total

    @op
    def set_dead_bounds(self, *, max_count: Bound = ...,
                        max_age_ms: Bound = ...) -> Program[DeadBounds]:
        """Set the bounds of dead jobs on every shard: each shard keeps up to ``max_count``."""
        for shard in self._shards:
            yield from DeadControls.set_dead_bounds.program(shard, max_count=max_count,
                                                            max_age_ms=max_age_ms)
        return (yield from DeadControls.dead_bounds.program(self._shards[0]))

    def _scope(self, lane: str | None) -> list[Any]:
        """The shards a setting of ``lane`` (None: the whole queue) goes to."""
        return list(self._shards) if lane is None else [self._lane_shard(lane)]

    events = refused("events", "each shard has its own events stream: read shard_queues[k]")
    latest_events = refused("latest_events",
                            "each shard has its own events stream: read shard_queues[k]")
    enqueue_after = refused("enqueue_after", "a job's parents may live on other shards")
    enqueue_graph = refused("enqueue_graph", "a graph's jobs may live on other shards")
    sweep_staging = refused("sweep_staging", "it admits no graph, so holds no staged job")
    park = refused("park", "each shard has its own wake key: park on shard_queues[k]")
