"""The loop's core (``echomq.consumer.loop``) with no server: its decisions over a set of leases in
hand.

The core is what both shells drive, so its rules are checked here directly: every lease in hand
is extended, each attempt has its own time limit, housekeeping is due once per interval and never
twice, the park stays within its bounds, and back-off grows and resets. A Hypothesis state
machine drives it through any order of claims, returns, extends and ticks.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from echomq.consumer.loop import (
    MAX_PREFETCH,
    Ack,
    LoopCore,
    Retry,
    Settings,
    park_socket_timeout,
)
from echomq.engine.calls import Job
from echomq.queue.bounds import HOUSEKEEPING_STEP, more_due, park_cap_for
from echomq.queue.parking import token_taken


def settings(**overrides: Any) -> Settings:
    options: dict[str, Any] = {
        "lease_ms": 300, "retry_delay_ms": 1_000, "max_attempts": None, "park_cap_ms": 5_000,
        "park_floor_ms": 10, "housekeeping_ms": 1_000, "time_limit_ms": None,
        "retention_ms": None, "heartbeat": True, "lanes": False, "capacity": 4}
    options.update(overrides)
    return Settings(**options)


def job(n: int) -> Job:
    return Job(f"JOB:{n}", b"", 1)


def test_every_lease_in_hand_is_extended_and_each_has_its_own_time_limit() -> None:
    core = LoopCore(settings(time_limit_ms=500))
    core.took(job(1), 0.0)
    core.took(job(2), 0.2)
    assert core.room() == 2
    assert core.extends_due(0.05) == []
    assert core.extends_due(0.1) == [job(1)]  # lease_ms / 3
    assert set(core.extends_due(0.31)) == {job(1), job(2)}
    core.extended(job(1), 0.31, ok=True)
    core.extended(job(2), 0.31, ok=False)  # a failed extend is tried again sooner
    assert core.extends_due(0.34) == [job(2)]
    assert core.take_overruns(0.6) == [job(1)]
    assert not core.holds(job(1)) and core.busy  # its handler still runs
    assert core.take_overruns(0.75) == [job(2)]
    assert core.finished(job(1)) is False  # settled by its time limit: not settled again
    assert core.finished(job(2)) is False
    assert not core.busy


def test_housekeeping_is_due_once_per_interval() -> None:
    core = LoopCore(settings(housekeeping_ms=1_000))
    assert core.take_housekeeping(10.0)
    assert not core.take_housekeeping(10.5)
    assert core.take_housekeeping(10.5, force=True)
    assert not core.take_housekeeping(11.4)
    assert core.take_housekeeping(11.5)


def test_the_next_tick_is_the_earliest_of_heartbeat_housekeeping_and_time_limit() -> None:
    core = LoopCore(settings(time_limit_ms=50))
    core.take_housekeeping(0.0)
    core.took(job(1), 0.0)
    assert core.next_tick(0.0) == pytest.approx(0.05)
    core.take_overruns(0.05)
    assert core.next_tick(0.05) == pytest.approx(0.95)  # only housekeeping is left


def test_park_bounds() -> None:
    core = LoopCore(settings(park_cap_ms=5_000, housekeeping_ms=1_000))
    assert core.park_ms(None, None, None) == 5_000  # nothing due: the cap, past housekeeping
    assert core.park_ms(1_500, 1_000, None) == 501
    assert core.park_ms(900, 1_000, None) == 10  # overdue: the floor
    assert core.park_ms(None, None, 1.0) == 500  # below a 1 s socket timeout
    assert park_cap_for(5.0, 60_000) == 4_000
    assert park_cap_for(None, 60_000) == 60_000
    assert park_cap_for(0.1, 60_000) == 50
    assert park_socket_timeout(10.0, 60_000) == 65.0  # a parking connection outlasts the park
    assert park_socket_timeout(None, 60_000) is None


def test_a_park_for_something_due_waits_for_this_consumers_turn_to_housekeep() -> None:
    core = LoopCore(settings(park_cap_ms=60_000, housekeeping_ms=1_000, park_floor_ms=10))
    assert core.take_housekeeping(100.0)
    core.token_answered(100.0)  # lost (or won): the next turn is at 101.0
    assert core.park_ms(900, 1_000, None, 100.2) == 801  # overdue, yet not its turn: 100.2→101
    assert core.park_ms(5_000, 1_000, None, 100.2) == 4_001  # due later than its turn
    core.learned_due(1_500, 1_000, 100.2)
    assert not core.due_passed(100.6) and core.due_passed(100.7)
    core.woke(100.7)  # what was due has fallen due: housekeeping at its turn
    assert core.housekeeping_at == 101.0
    core.learned_due(None, None, 101.0)
    assert not core.due_passed(1e9)  # nothing can fall due
    core.woke(130.0)  # a wake token after a long park: housekeeping one interval on
    assert not core.take_housekeeping(130.5) and core.take_housekeeping(131.0)


def test_the_housekeeping_token_is_taken_when_free_or_already_ones_own() -> None:
    assert token_taken(None, "a")
    assert token_taken(b"a", "a")
    assert not token_taken(b"b", "a")


def test_housekeeping_steps_go_on_while_a_step_comes_back_full() -> None:
    assert more_due(HOUSEKEEPING_STEP) and not more_due(HOUSEKEEPING_STEP - 1)


def test_backoff_grows_to_its_cap_and_resets() -> None:
    core = LoopCore(settings(park_cap_ms=500, lease_ms=30_000))
    assert [core.backoff.failed() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    core.backoff.succeeded()
    assert core.backoff.failed() == 0.1


@given(lease_ms=st.integers(1, 120_000), park_cap_ms=st.integers(1, 120_000),
       failures=st.integers(1, 40))
def test_every_pause_after_an_error_stays_below_the_lease(lease_ms: int, park_cap_ms: int,
                                                           failures: int) -> None:
    """The loop's back-off and its pause before sending outcomes again are capped below the
    lease, so a consumer whose reply was lost sends again while its leases are its own."""
    core = LoopCore(settings(lease_ms=lease_ms, park_cap_ms=park_cap_ms))
    pauses = [core.backoff.failed() for _ in range(failures)]
    pauses += [core.settle_pause(n, 0.0) or 0.0 for n in range(1, failures + 1)]
    assert max(pauses) < lease_ms / 1000


def test_settlements() -> None:
    core = LoopCore(settings(retention_ms=7, max_attempts=3, time_limit_ms=100))
    assert core.settlement(None) == Ack(7)
    retry = core.settlement(ValueError("x"))
    assert isinstance(retry, Retry) and retry.error == "ValueError: x" and retry.max_attempts == 3
    assert core.overrun_settlement().error.endswith("time limit of 100 ms exceeded")
    assert core.settle_pause(1, 0.0) == 0.1
    assert core.settle_pause(9, 0.0) == 0.15  # half the lease of 300 ms
    assert LoopCore(settings(lease_ms=30_000)).settle_pause(9, 0.0) == 1.0
    assert core.settle_pause(1, 0.3) is None  # a lease's length has passed
    assert core.stops_loop(SystemExit()) and core.stops_loop(KeyboardInterrupt())
    assert not core.stops_loop(ValueError())


@pytest.mark.parametrize("bad", [{"lease_ms": 0}, {"housekeeping_ms": 0}, {"max_attempts": 0},
                                 {"time_limit_ms": 0}, {"retry_delay_ms": -1},
                                 {"capacity": MAX_PREFETCH + 1}, {"pause_check_ms": -1}])
def test_bad_settings_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        settings(**bad)


class CoreMachine(RuleBasedStateMachine):
    """Any order of claims, returns, ticks and extends keeps the core's books straight: a lease
    is settled by exactly one of its handler's return or its time limit."""

    def __init__(self) -> None:
        super().__init__()
        self.core = LoopCore(settings(time_limit_ms=400))
        self.now = 0.0
        self.next_id = 0
        self.running: set[Job] = set()
        self.settled: dict[Job, str] = {}

    @precondition(lambda self: self.core.room() > 0)
    @rule()
    def claim(self) -> None:
        self.next_id += 1
        taken = job(self.next_id)
        self.core.took(taken, self.now)
        self.running.add(taken)

    @rule(step=st.floats(min_value=0, max_value=0.3))
    def tick(self, step: float) -> None:
        self.now += step
        for overrun in self.core.take_overruns(self.now):
            assert overrun not in self.settled
            self.settled[overrun] = "time limit"
        for due in self.core.extends_due(self.now):
            self.core.extended(due, self.now, ok=True)
            assert due not in self.core.extends_due(self.now)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def handler_returns(self, data: st.DataObject) -> None:
        returned = data.draw(st.sampled_from(sorted(self.running, key=lambda j: j.id)))
        self.running.discard(returned)
        if self.core.finished(returned):
            assert returned not in self.settled
            self.settled[returned] = "handler"
        else:
            assert self.settled[returned] == "time limit"

    @invariant()
    def books(self) -> None:
        assert set(self.core.leases) <= self.running
        assert self.core.running == self.running
        assert self.core.busy == bool(self.running)
        assert self.core.next_tick(self.now) >= 0
        for lease in self.core.leases.values():
            assert self.now - lease.started < 0.4 or lease.job in self.core.overruns(self.now)


TestCoreMachine = CoreMachine.TestCase
