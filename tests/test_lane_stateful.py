"""The lanes' bound and limits, against a model, under random sequences of lane enqueue (at
random priorities, mostly 0), lane claim, ack, retry, release, crash and recover, promote, knob
changes (concurrency, rate, window, weight; a group's and the queue's defaults) and pause/resume
of lanes and of the queue, on an explicit clock.

The model knows what each group may do, not how the ring does it: a group is **eligible** when
its lane holds jobs (of any priority), neither it nor the queue is paused, it holds fewer leases
than its concurrency limit and its current rate window counted fewer claims than its rate. After
every step the server must agree with the model on where every job is (each lane's order, its
prioritised jobs' scores, active, delayed, dead, done: no job lost, none served twice), and every
lane claim must:

- lease the next job of an eligible group in the group's priority order: its jobs of priority
  above 0 by pending score (priority, then time), then its priority-0 jobs in lane order, then
  those below 0 (limits, rate and pause hold; priority never crosses groups);
- return a job whenever a group is eligible (a parked group never holds the others up);
- serve every group that stays eligible within W lane claims, W the largest total weight of the
  eligible groups while it waits (k claims for k groups of weight 1): the stated bound.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from echomq import Job, Queue, Verdict
from echomq.embedded import EmbeddedValkey
from echomq.engine.calls import Ack, Release, Retry
from echomq.engine.priority import pending_score
from echomq.queue.lanes import ring_in_turn

START = 1_700_000_000_000
LEASE_MS = 1_000
GROUPS = ["a", "b", "c", "d"]
KNOB_VALUES = st.one_of(st.none(), st.integers(1, 4))
DEFAULT_WINDOW_MS = 1000
PRIORITIES = st.one_of(st.just(0), st.sampled_from([-100, -7, -1, 1, 7, 100]))


@dataclass
class LaneModel:
    """What the lanes promise, per group: jobs in order, leases, knobs, windows, pauses."""

    lanes: dict[str, deque[str]] = field(default_factory=dict)
    prio: dict[str, dict[str, int]] = field(default_factory=dict)  # id: pending score
    priority_of: dict[str, int] = field(default_factory=dict)
    enqueued_at: dict[str, int] = field(default_factory=dict)
    active: dict[str, Job] = field(default_factory=dict)
    deadlines: dict[str, int] = field(default_factory=dict)
    delayed: dict[str, int] = field(default_factory=dict)
    dead: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    group_of: dict[str, str] = field(default_factory=dict)
    attempts: Counter[str] = field(default_factory=Counter)
    defaults: dict[str, int] = field(default_factory=dict)
    overrides: dict[tuple[str, str], int] = field(default_factory=dict)
    windows: dict[str, tuple[int, int]] = field(default_factory=dict)
    paused_lanes: set[str] = field(default_factory=set)
    queue_paused: bool = False

    def knob(self, group: str, name: str) -> int | None:
        own = self.overrides.get((name, group))
        return own if own is not None else self.defaults.get(name)

    def weight(self, group: str) -> int:
        return self.knob(group, "weight") or 1

    def leased(self, group: str) -> int:
        return sum(1 for job in self.active.values() if job.lane == group)

    def window(self, group: str, now: int) -> tuple[int, int]:
        window_ms = self.knob(group, "window_ms") or DEFAULT_WINDOW_MS
        start, count = self.windows.get(group, (now, 0))
        return (start, count) if now < start + window_ms else (now, 0)

    def waiting(self, group: str) -> bool:
        return bool(self.lanes.get(group) or self.prio.get(group))

    def next_of(self, group: str) -> str:
        """The group's next job: above 0 by score, then the lane's head, then below 0."""
        ranked = sorted((score, job_id) for job_id, score in self.prio.get(group, {}).items())
        if ranked and ranked[0][0] < 0:
            return ranked[0][1]
        if self.lanes.get(group):
            return self.lanes[group][0]
        return ranked[0][1]

    def wait(self, job_id: str, at: int, head: bool) -> None:
        """A job into its group: priority 0 to the lane's head or tail, else scored at ``at``."""
        group, priority = self.group_of[job_id], self.priority_of[job_id]
        if priority:
            self.prio.setdefault(group, {})[job_id] = pending_score(priority, at)
        elif head:
            self.lanes.setdefault(group, deque()).appendleft(job_id)
        else:
            self.lanes.setdefault(group, deque()).append(job_id)

    def eligible(self, group: str, now: int) -> bool:
        if self.queue_paused or group in self.paused_lanes or not self.waiting(group):
            return False
        limit, rate = self.knob(group, "concurrency"), self.knob(group, "rate")
        if limit is not None and self.leased(group) >= limit:
            return False
        return rate is None or self.window(group, now)[1] < rate

    def eligible_groups(self, now: int) -> list[str]:
        return [group for group in GROUPS if self.eligible(group, now)]

    def claimed(self, job: Job, now: int) -> None:
        group = job.lane
        assert group is not None
        assert self.next_of(group) == job.id, f"{job.id} served before {self.next_of(group)}"
        if self.priority_of[job.id]:
            del self.prio[group][job.id]
        else:
            self.lanes[group].popleft()
        self.attempts[job.id] += 1
        assert job.attempt == self.attempts[job.id]
        self.active[job.id] = job
        self.deadlines[job.id] = now + LEASE_MS
        if self.knob(group, "rate") is not None:
            start, count = self.window(group, now)
            self.windows[group] = (start, count + 1)

    def back_to_head(self, ids: list[str]) -> None:
        """Jobs back to their lanes' heads, in the order given (the earliest first); a
        prioritised one back at its enqueue time's score."""
        for job_id in reversed(ids):
            self.wait(job_id, self.enqueued_at[job_id], head=True)

    def leave_active(self, job_id: str) -> Job:
        self.deadlines.pop(job_id)
        return self.active.pop(job_id)


class LaneMachine(RuleBasedStateMachine):
    """One lane queue on the scripts, driven at random, checked against ``LaneModel``."""

    def __init__(self, conn: redis.Redis) -> None:
        super().__init__()
        conn.flushall()
        self.conn = conn
        self.queue = Queue(conn, "lanes", wire=5, check_policy=False)
        self.model = LaneModel()
        self.now = START
        self.serial = 0
        # Per group waiting to be served: lane claims since it became eligible, and the largest
        # total weight of the eligible groups since then.
        self.waited: dict[str, int] = {}
        self.most_weight: dict[str, int] = {}

    # the bound ------------------------------------------------------------------------------

    def total_weight(self) -> int:
        return sum(self.model.weight(g) for g in self.model.eligible_groups(self.now))

    def track_waits(self) -> None:
        """Start or stop each group's wait as it becomes eligible or not; record the weight."""
        eligible = set(self.model.eligible_groups(self.now))
        for group in GROUPS:
            if group not in eligible:
                self.waited.pop(group, None)
                self.most_weight.pop(group, None)
                continue
            self.waited.setdefault(group, 0)
            self.most_weight[group] = max(self.most_weight.get(group, 0), self.total_weight())

    def served(self, group: str) -> None:
        for other in list(self.waited):
            if other == group:
                self.waited[other] = 0
                self.most_weight[other] = 0
                continue
            self.waited[other] += 1
            assert self.waited[other] < self.most_weight[other], (
                f"{other} waited {self.waited[other]} lane claims, bound "
                f"{self.most_weight[other]}")

    # rules ----------------------------------------------------------------------------------

    @rule(group=st.sampled_from(GROUPS), priorities=st.lists(PRIORITIES, min_size=1,
                                                             max_size=3))
    def enqueue(self, group: str, priorities: list[int]) -> None:
        for priority in priorities:
            self.serial += 1
            job_id = f"JOB:{group}{self.serial:03d}"
            assert self.queue.enqueue(job_id, b"", lane=group, now=self.now,
                                      priority=priority) is Verdict.ENQUEUED
            self.model.group_of[job_id] = group
            self.model.priority_of[job_id] = priority
            self.model.enqueued_at[job_id] = self.now
            self.model.wait(job_id, self.now, head=False)

    @rule()
    def claim(self) -> None:
        eligible = self.model.eligible_groups(self.now)
        job = self.queue.claim_lane(LEASE_MS, now=self.now)
        if job is None:
            assert not eligible, f"no job while {eligible} may be served"
            return
        assert job.lane in eligible, f"{job.lane} served, eligible: {eligible}"
        self.model.claimed(job, self.now)
        self.served(job.lane)

    @precondition(lambda self: self.model.active)
    @rule(data=st.data(), how=st.sampled_from(["ack", "settle-ack", "release"]))
    def finish(self, data: st.DataObject, how: str) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.model.active)))
        job = self.model.leave_active(job_id)
        if how == "ack":
            assert self.queue.ack(job) is Verdict.ACKED
        elif how == "settle-ack":
            assert self.queue.settle([Ack(job)], now=self.now)[0] == [Verdict.ACKED]
        else:
            assert self.queue.settle([Release(job)], now=self.now)[0] == [Verdict.RELEASED]
            self.model.attempts[job_id] -= 1
            self.model.back_to_head([job_id])
            return
        self.model.done.add(job_id)

    @precondition(lambda self: self.model.active)
    @rule(data=st.data(), delay_ms=st.integers(0, 1500), max_attempts=st.integers(1, 3),
          batched=st.booleans())
    def retry(self, data: st.DataObject, delay_ms: int, max_attempts: int, batched: bool) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.model.active)))
        job = self.model.leave_active(job_id)
        if batched:
            verdict = self.queue.settle([Retry(job, delay_ms, "x", max_attempts)],
                                        now=self.now)[0][0]
        else:
            verdict = self.queue.retry(job, delay_ms=delay_ms, error="x",
                                       max_attempts=max_attempts, now=self.now)
        if self.model.attempts[job_id] >= max_attempts:
            assert verdict is Verdict.DEAD
            self.model.dead.add(job_id)
        else:
            assert verdict is Verdict.RETRYING
            self.model.delayed[job_id] = self.now + delay_ms

    @rule(ms=st.integers(1, 1200))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(max_attempts=st.integers(1, 4))
    def crash_and_recover(self, max_attempts: int) -> None:
        """Every worker dies: the clock passes every lease, and recover takes them all."""
        self.now += LEASE_MS + 1
        expired = sorted(self.model.deadlines, key=lambda i: (self.model.deadlines[i], i))
        assert self.queue.recover(now=self.now, max_attempts=max_attempts) == len(expired)
        back = []
        for job_id in expired:
            self.model.leave_active(job_id)
            if self.model.attempts[job_id] >= max_attempts:
                self.model.dead.add(job_id)
            else:
                back.append(job_id)
        self.model.back_to_head(back)

    @rule()
    def promote(self) -> None:
        due = sorted((at, i) for i, at in self.model.delayed.items() if at <= self.now)
        assert self.queue.promote(now=self.now) == len(due)
        for at, job_id in due:
            del self.model.delayed[job_id]
            self.model.wait(job_id, at, head=False)

    @rule(group=st.sampled_from([*GROUPS, None]), knob=st.sampled_from(
        ["concurrency", "rate", "window_ms", "weight"]), value=KNOB_VALUES)
    def set_knob(self, group: str | None, knob: str, value: int | None) -> None:
        if knob == "window_ms" and value is not None:
            value *= 400
        if group is None:
            self.queue.set_lane_defaults(**{knob: value}, now=self.now)
            table: dict[Any, int] = self.model.defaults
            where: Any = knob
        else:
            self.queue.set_lane(group, **{knob: value}, now=self.now)
            table, where = self.model.overrides, (knob, group)
        if value is None:
            table.pop(where, None)
        else:
            table[where] = value

    @rule(group=st.sampled_from([*GROUPS, None]), pause=st.booleans())
    def pause_or_resume(self, group: str | None, pause: bool) -> None:
        if pause:
            self.queue.pause(group)
        else:
            self.queue.resume(group)
        if group is None:
            self.model.queue_paused = pause
        elif pause:
            self.model.paused_lanes.add(group)
        else:
            self.model.paused_lanes.discard(group)

    # after every step -----------------------------------------------------------------------

    @invariant()
    def waits_follow_eligibility(self) -> None:
        self.track_waits()

    @invariant()
    def every_job_is_where_the_model_says(self) -> None:
        conn, queue = self.conn, self.queue
        for group in GROUPS:
            lane = [i.decode() for i in conn.lrange(queue.key("lane", lane=group), 0, -1)]
            assert lane == list(self.model.lanes.get(group, ())), group
            prio = {i.decode(): int(score) for i, score in
                    conn.zrange(queue.key("prio", lane=group), 0, -1, withscores=True)}
            assert prio == self.model.prio.get(group, {}), group
        active = {i.decode() for i in conn.zrange(queue.key("active"), 0, -1)}
        assert active == set(self.model.active)
        delayed = {i.decode() for i in conn.zrange(queue.key("delayed"), 0, -1)}
        assert delayed == set(self.model.delayed)
        assert {i.decode() for i in conn.zrange(queue.key("dead"), 0, -1)} == self.model.dead
        assert queue.leased_by_lane() == {g: n for g in GROUPS if (n := self.model.leased(g))}

    @invariant()
    def the_ring_holds_each_group_once(self) -> None:
        """Each group in the ring once, waiting and not paused; every other entry of the ring
        one its group left behind (counted in ringleft, which a lane claim drops)."""
        entries = self.conn.lrange(self.queue.key("ring"), 0, -1)
        left = self.conn.hgetall(self.queue.key("ringleft"))
        ring = ring_in_turn(entries, left)
        assert len(ring) == len(set(ring))
        assert all(self.model.waiting(g) for g in ring)
        assert not set(ring) & self.model.paused_lanes
        counted = {g.decode(): int(n) for g, n in left.items()}
        assert sorted(g.decode() for g in entries) == sorted(
            ring + [g for g, n in counted.items() for _ in range(n)])


STATEFUL = settings(max_examples=150, stateful_step_count=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.mark.slow
def test_the_bound_and_the_limits_hold_against_the_model(valkey: EmbeddedValkey) -> None:
    conn = valkey.client()
    run_state_machine_as_test(lambda: LaneMachine(conn), settings=STATEFUL)
