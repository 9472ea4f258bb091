"""The consumer core's batches (a round's claims and settles, isolating a suspect job) and its
lapsed leases and pauses, decided with no I/O."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from echomq.consumer.loop import (
    Lineup,
    LoopCore,
)
from echomq.engine.calls import Job, Release, Verdict
from tests.test_loop import job, settings

# batches ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("queues", "cap"), [(2, 8), (1, 4)], ids=["two-queues", "reads-ahead"])
def test_claims_ramp_from_one_to_the_prefetch_and_start_over_after_a_rest(queues: int,
                                                                           cap: int) -> None:
    """Up to the prefetch; a consumer of one queue, which reads ahead, up to half of it (the
    batch running and the batch sent ahead both in hand)."""
    lineup = Lineup.of(settings(capacity=8), queues)
    core = lineup.cores[0]
    asked = []
    for _ in range(5):
        count = lineup.round_size()
        asked.append(count)
        core.claimed([job(100 * len(asked) + n) for n in range(count)], 0.0)
        lineup.round_claimed(count, count)
        while (started := core.next_job(0.0)) is not None:
            assert core.finished(started)
    assert asked == [1, 2, 4, cap, cap]
    lineup.round_claimed(cap, 1)  # a short batch: the queue ran dry, the ramp stays
    assert lineup.ramp == cap
    lineup.rested()
    assert lineup.round_size() == 1


def test_a_lane_consumer_claims_one_job_at_a_time() -> None:
    lineup = Lineup.of(settings(lanes=True, capacity=8), 2)
    assert lineup.round_size() == 1
    lineup.cores[1].claimed([job(1)], 0.0)
    assert lineup.round_size() == 0


def test_a_round_sends_every_outcome_waiting_and_a_stop_hands_back_the_rest() -> None:
    core = LoopCore(settings(capacity=4, settle_delay_ms=5))
    core.take_housekeeping(1.0)
    core.claimed([job(1), job(2), job(3)], 1.0)
    first = core.next_job(1.0)
    assert first == job(1) and core.finished(first)
    assert core.record(first, core.settlement(None), 1.0) is True  # the first waiting
    assert core.record(job(9), core.settlement(None), 1.001) is False
    core.outbox.pop()
    assert not core.outbox_due(1.004) and core.outbox_due(1.006)
    assert core.next_tick(1.0) == pytest.approx(0.005)  # before the heartbeat (1.1)
    assert core.heartbeat(1.0) == []
    assert set(core.heartbeat(1.1)) == {job(1), job(2), job(3)}  # in hand and waiting: all
    round_ = core.take_round(hand_back=True)
    assert round_.claim == 0
    assert [type(o).__name__ for o in round_.outcomes] == ["Ack", "Release", "Release"]
    assert [o.job for o in round_.outcomes] == [job(1), job(2), job(3)]
    assert not core.in_hand and core.next_job(2.0) is None


def test_an_unsent_round_waits_again_ahead_of_newer_outcomes_after_a_pause() -> None:
    core = LoopCore(settings(capacity=4, settle_delay_ms=5))
    core.claimed([job(1), job(2), job(3)], 0.0)
    for _ in (1, 2):
        started = core.next_job(0.0)
        assert started is not None and core.finished(started)
        core.record(started, core.settlement(None), 0.0)
    round_ = core.take_round(hand_back=True)
    core.unsent(round_, 10.0)
    assert [o.job for o in core.outbox] == [job(1), job(2)]  # the releases are dropped
    assert not core.outbox_due(10.05) and core.outbox_due(10.1)  # a pause, not at once
    core.sent()
    assert core.unsent_rounds == 0


def test_a_lease_lost_at_the_heartbeat_is_skipped_not_run() -> None:
    from echomq.engine.calls import Verdict

    core = LoopCore(settings(capacity=4))
    core.claimed([job(1), job(2)], 0.0)
    beat = core.heartbeat(0.1)
    assert core.heartbeat_done(beat, [Verdict.STALE, Verdict.EXTENDED], 0.1) == [job(1)]
    assert core.next_job(0.2) == job(2)
    assert core.next_job(0.2) is None
    assert core.extends_due(0.15) == []  # extended: due again a third of a lease later


def suspect(n: int) -> Job:
    """A job claimed before: a retry, or one whose lease ran out (its worker may have died)."""
    return Job(f"JOB:{n}", b"", 2)


def kinds(round_: Any) -> list[tuple[str, Job]]:
    return [(type(outcome).__name__, outcome.job) for outcome in round_.outcomes]


def test_a_suspect_first_in_its_batch_runs_alone_and_its_neighbours_go_back() -> None:
    lineup = Lineup.of(settings(capacity=8), 1)
    core = lineup.cores[0]
    lineup.ramp = 4
    core.claimed([suspect(1), job(2), job(3), job(4)], 0.0)
    assert lineup.next_job(0.0) == (0, suspect(1))
    round_ = core.take_isolation()
    assert round_ is not None and round_.claim == 0
    assert kinds(round_) == [("Release", job(2)), ("Release", job(3)), ("Release", job(4))]
    assert set(core.leases) == {suspect(1)} and not core.outbox and not core.prefetched
    assert core.take_isolation() is None
    assert core.finished(suspect(1))
    assert lineup.round_size() == 1  # the ramp starts over


def test_a_suspect_inside_a_batch_runs_after_those_before_it_with_their_outcomes_sent() -> None:
    core = LoopCore(settings(capacity=8))
    core.claimed([job(1), suspect(2), job(3)], 0.0)
    first = core.next_job(0.0)
    assert first == job(1) and core.take_isolation() is None
    assert core.finished(job(1))
    core.record(job(1), core.settlement(None), 0.0)
    assert core.next_job(0.0) == suspect(2)
    round_ = core.take_isolation()
    assert round_ is not None
    assert kinds(round_) == [("Ack", job(1)), ("Release", job(3))]
    assert set(core.leases) == {suspect(2)} and not core.outbox


def test_a_suspect_alone_in_hand_costs_no_round_and_first_attempts_never_do() -> None:
    lineup = Lineup.of(settings(capacity=8), 1)
    core = lineup.cores[0]
    lineup.ramp = 2
    core.claimed([job(1), job(2)], 0.0)
    for n in (1, 2):
        assert lineup.next_job(0.0) == (0, job(n)) and core.take_isolation() is None
        assert core.finished(job(n))
    assert lineup.ramp == 2
    core.claimed([suspect(3)], 0.0)
    assert lineup.next_job(0.0) == (0, suspect(3))
    assert core.take_isolation() is None and lineup.ramp == 1


def test_a_consumer_with_a_single_attempt_per_job_claims_one_at_a_time() -> None:
    lineup = Lineup.of(settings(capacity=8, max_attempts=1), 1)
    core = lineup.cores[0]
    for n in range(4):
        assert lineup.round_size() == 1
        core.claimed([job(n)], 0.0)
        lineup.round_claimed(1, 1)
        started = core.next_job(0.0)
        assert started is not None and core.finished(started)
    assert LoopCore(settings(capacity=8, max_attempts=2)).settings.batch_cap == 8


class BatchMachine(RuleBasedStateMachine):
    """Two queues in priority order, and any order of claims, handler returns, keeper flushes,
    heartbeats (some leases lost), failed rounds and stops: every job claimed ends exactly once
    — sent as one outcome, handed back, or lost —, each queue's jobs run in claim order, no
    later queue's job starts while an earlier queue's is prefetched, a round asks a later queue
    only for what the earlier ones left unfilled, and the hand never holds more than the
    prefetch over both queues. As the clock moves, no job starts once its lease has lapsed (by
    a model of the leases: a claim or an extend that got through grants ``lease_ms`` from its
    sending), nor within a third of a lease of that, and none after a pause check found the
    queue paused: those go back."""

    def __init__(self) -> None:
        super().__init__()
        self.lineup = Lineup.of(settings(capacity=5, settle_delay_ms=5, pause_check_ms=100), 2)
        self.now = 0.0
        self.expiry: dict[Job, float] = {}
        self.next_id = 0
        self.claimed: list[tuple[int, Job]] = []
        self.ran: list[tuple[int, Job]] = []
        self.ended: dict[Job, str] = {}
        self.current: tuple[int, Job] | None = None

    @precondition(lambda self: self.current is None)
    @rule(ready=st.tuples(st.integers(0, 8), st.integers(0, 8)), data=st.data())
    def claim_round(self, ready: tuple[int, int], data: st.DataObject) -> None:
        wanted = self.lineup.round_size()
        taken = 0
        for index, core in enumerate(self.lineup.cores):
            asked = self.lineup.ask(wanted, taken)
            if index and asked:  # only what the earlier queue could not fill
                assert ready[0] < wanted
            round_ = core.take_round(asked)
            self.sent(round_.outcomes)
            jobs = []
            for _ in range(min(round_.claim, ready[index])):
                self.next_id += 1
                attempt = data.draw(st.sampled_from([1, 1, 1, 2, 5]))
                jobs.append(Job(f"JOB:{self.next_id}", b"", attempt))
            self.claimed += [(index, claimed) for claimed in jobs]
            core.claimed(jobs, self.now + 0.01, sent_at=self.now)
            self.expiry.update(dict.fromkeys(jobs, self.now + 0.3))
            taken += len(jobs)
        self.lineup.round_claimed(wanted, taken)

    @precondition(lambda self: self.current is None)
    @rule()
    def start(self) -> None:
        self.current = self.lineup.next_job(self.now)
        for _, isolation in self.lineup.take_isolations():
            self.sent(isolation.outcomes)
        if self.current is not None:
            index, started = self.current
            assert self.now < self.expiry[started] - 0.1  # in time, with its margin
            self.ran.append(self.current)
            if index:  # nothing of the earlier queue was waiting to start
                assert not self.lineup.cores[0].prefetched
            if started.attempt > 1:  # a suspect starts with nothing else in hand
                leases = [set(core.leases) for core in self.lineup.cores]
                assert set().union(*leases) == {started}
                assert not any(core.outbox for core in self.lineup.cores)
                assert self.lineup.ramp == 1

    @precondition(lambda self: self.current is not None)
    @rule(fails=st.booleans())
    def handler_returns(self, fails: bool) -> None:
        assert self.current is not None
        index, returned = self.current
        core = self.lineup.cores[index]
        if core.finished(returned):
            failure = ValueError("x") if fails else None
            core.record(returned, core.settlement(failure), 0.0)
        else:
            assert self.ended[returned] == "lost"
        self.current = None

    @rule(index=st.integers(0, 1))
    def keeper_flush(self, index: int) -> None:
        self.sent(self.lineup.cores[index].take_round().outcomes)

    @rule(step=st.floats(min_value=0, max_value=0.15))
    def tick(self, step: float) -> None:
        self.now += step

    @rule(index=st.integers(0, 1), through=st.booleans(), data=st.data())
    def heartbeat(self, index: int, through: bool, data: st.DataObject) -> None:
        core = self.lineup.cores[index]
        beat = core.heartbeat(self.now + 1_000.0)  # every lease in hand, due or not
        verdicts = [data.draw(st.sampled_from([Verdict.EXTENDED, Verdict.STALE]))
                    for _ in beat] if through else None
        for n, extended in enumerate(beat):
            if verdicts is not None and verdicts[n] is Verdict.EXTENDED:
                self.expiry[extended] = self.now + 0.3
        for lost in core.heartbeat_done(beat, verdicts, self.now + 0.01, sent_at=self.now):
            assert lost not in self.ended
            self.ended[lost] = "lost"

    @precondition(lambda self: self.current is None)
    @rule(paused=st.booleans())
    def pause_check(self, paused: bool) -> None:
        for index in self.lineup.pause_checks_due(self.now):
            self.lineup.cores[index].pause_checked(paused, self.now)
            assert not paused or not self.lineup.cores[index].prefetched

    @rule(index=st.integers(0, 1))
    def round_fails(self, index: int) -> None:
        core = self.lineup.cores[index]
        round_ = core.take_round()
        for outcome in round_.outcomes:  # a release not sent: the lease runs out, recovered
            if type(outcome).__name__ == "Release":
                self.ended[outcome.job] = "left to recovery"
        core.unsent(round_, 0.0)

    @precondition(lambda self: self.current is None)
    @rule()
    def stop(self) -> None:
        for core in self.lineup.cores:
            self.sent(core.take_round(hand_back=True).outcomes)

    def sent(self, outcomes: list[Any]) -> None:
        for outcome in outcomes:
            kind = type(outcome).__name__
            if outcome.job in self.ended:  # a lost lease's outcome goes out STALE, no more
                assert self.ended[outcome.job] == "lost" and kind != "Release"
                continue
            self.ended[outcome.job] = kind

    @invariant()
    def books(self) -> None:
        assert self.lineup.held() <= 5
        for index, core in enumerate(self.lineup.cores):
            mine = [j for i, j in self.claimed if i == index]
            ran = [j for i, j in self.ran if i == index]
            assert ran == [j for j in mine if j in ran]  # claim order
            waiting = {outcome.job for outcome in core.outbox}
            current = self.current[1] if self.current and self.current[0] == index else None
            for claimed in mine:
                places = [claimed in core.prefetched and claimed in core.leases,
                          claimed == current and claimed in core.leases,
                          claimed in waiting, claimed in self.ended and claimed not in waiting]
                assert sum(places) >= 1, claimed
            assert set(core.leases) <= set(core.prefetched) | {current}


TestBatchMachine = BatchMachine.TestCase


def test_a_job_held_back_for_the_others_to_finish_starts_its_time_limit_when_it_runs() -> None:
    core = LoopCore(settings(time_limit_ms=400))
    core.claimed([suspect(1)], 0.0)
    assert core.next_job(0.0) == suspect(1)
    core.held_back(suspect(1))
    assert core.overruns(10.0) == [] and core.heartbeat(10.0) == [suspect(1)]
    core.restarted(suspect(1), 10.0)
    assert core.overruns(10.3) == [] and core.overruns(10.4) == [suspect(1)]


# lapsed leases and pauses --------------------------------------------------------------------


def released(core: LoopCore) -> list[Job]:
    return [outcome.job for outcome in core.outbox if isinstance(outcome, Release)]


def test_a_prefetched_job_whose_lease_lapsed_by_the_consumers_clock_is_released_not_run() -> None:
    """lease 300 ms from the claim's sending (10.0): a job starts until 10.2 (a third of the
    lease before its end), not after; those left go back with the next round."""
    core = LoopCore(settings(lease_ms=300))
    core.claimed([job(1), job(2), job(3)], 10.05, sent_at=10.0)
    assert core.next_job(10.19) == job(1)
    assert core.finished(job(1))
    assert core.next_job(10.21) is None
    assert released(core) == [job(2), job(3)] and not core.leases
    assert core.outbox_due(10.21 + core.settings.settle_delay_ms / 1000)
    assert [type(o) for o in core.take_round(claim=4).outcomes] == [Release, Release]


def test_a_heartbeat_that_got_through_keeps_the_prefetched_jobs_startable() -> None:
    core = LoopCore(settings(lease_ms=300))
    core.claimed([job(1), job(2), job(3)], 0.01, sent_at=0.0)
    beat = core.heartbeat(0.11)
    assert beat == [job(1), job(2), job(3)]
    core.heartbeat_done(beat, [Verdict.EXTENDED] * len(beat), 0.12, sent_at=0.1)
    assert core.next_job(0.29) == job(1)  # 0.1 + 0.3 - 0.1: still in time
    core.finished(job(1))
    beat = core.heartbeat(0.22)
    assert beat
    core.heartbeat_done(beat, None, 0.23, sent_at=0.22)  # failed: no time gained
    assert core.next_job(0.31) is None
    assert released(core) == [job(2), job(3)]


def test_a_consumer_without_heartbeat_starts_no_job_late_in_its_batchs_lease() -> None:
    core = LoopCore(settings(lease_ms=300, heartbeat=False))
    core.claimed([job(1), job(2)], 0.0)
    assert core.next_job(0.15) == job(1)
    core.finished(job(1))
    assert core.next_job(0.25) is None and released(core) == [job(2)]


def test_a_pause_check_is_due_once_the_last_word_is_older_than_the_interval() -> None:
    core = LoopCore(settings(pause_check_ms=100))
    assert not core.pause_check_due(50.0)  # nothing prefetched: nothing to ask about
    core.claimed([job(1), job(2), job(3)], 0.01, sent_at=0.0)  # jobs came: not paused then
    assert not core.pause_check_due(0.09)
    assert core.pause_check_due(0.1)
    core.pause_checked(False, 0.1)
    assert not core.pause_check_due(0.15)
    assert core.next_job(0.15) == job(1)
    core.finished(job(1))
    core.pause_checked(True, 0.3)
    assert not core.prefetched and released(core) == [job(2), job(3)]
    assert core.next_job(0.3) is None and not core.pause_check_due(0.5)


def test_with_no_interval_every_prefetched_start_asks_first() -> None:
    lineup = Lineup.of(settings(pause_check_ms=0), 2)
    lineup.cores[1].claimed([job(1)], 0.0)
    assert lineup.pause_checks_due(0.0) == [1]
    lineup.cores[1].pause_checked(False, 0.0)
    assert lineup.next_job(0.0) == (1, job(1))
    assert lineup.pause_checks_due(0.0) == []
