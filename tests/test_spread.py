"""A spread consumer's decisions, with no I/O (``echomq.consumer.spread``, ``Lineup`` with
``spread``, ``Rounds.spread_round``): the beat's claim rounds driven against a model of N shards
holding ready jobs. Every shard is asked for a job within N claim rounds (the fairness bound),
the first call of a round asks for exactly the round's size, a round comes back short only when
every shard is empty, and the ramp and the prefetch bounds hold as for one queue. One queue
spread is today's consumer of one queue; several queues without spread keep strict priority. A
shard whose call fails by an error that heals, while others answer, rests from claims (0.1 s
doubling to 1 s) and the round goes on; a round whose every call failed fails."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import settings as hypothesis_settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from echomq.consumer import actions, spread as spread_module
from echomq.consumer.actions import Stepper
from echomq.consumer.aio import Consumer as AsyncConsumer
from echomq.consumer.beat import Beat
from echomq.consumer.blocking import Consumer
from echomq.consumer.loop import Lineup
from echomq.consumer.settings import Settings
from echomq.consumer.spread import MIN_ASK, Spread, SpreadClaim, split
from echomq.engine import calls
from echomq.engine.calls import Job, Verdict
from echomq.queue.bounds import Housekept


def settings_of(prefetch: int, *, max_attempts: int | None = None) -> Settings:
    return Settings(lease_ms=30_000, retry_delay_ms=0, max_attempts=max_attempts,
                    park_cap_ms=75_000, park_floor_ms=0, housekeeping_ms=1_000,
                    time_limit_ms=None, retention_ms=None, heartbeat=True, lanes=False,
                    capacity=prefetch)


class Host:
    """What the beat reads of its shell: a lineup and a clock that moves a millisecond a read;
    ``healing``: whether a call's error heals by waiting (else it stands)."""

    clock = None
    concurrency = 1
    stopping = False
    parking_timeout_s = None

    def __init__(self, lineup: Lineup, *, healing: bool = False) -> None:
        self.lineup = lineup
        self.now = 0.0
        self.healing = healing

    def monotonic(self) -> float:
        self.now += 0.001
        return self.now

    def heals(self, exc: BaseException) -> bool:
        return self.healing


class Shards:
    """The model: N shards, each a queue of ready job ids; a settle call takes its claim from
    its own shard's head. ``calls``: each round trip's claims (a ``SettleAll``'s or one
    ``Settle``'s), as (queue index, claim) pairs; ``broken``: shards whose next call fails."""

    def __init__(self, shards: int) -> None:
        self.ready: list[deque[Job]] = [deque() for _ in range(shards)]
        self.trips: list[list[tuple[int, int]]] = []
        self.broken: set[int] = set()
        self.ids = itertools.count()

    def add(self, shard: int, count: int) -> None:
        for _ in range(count):
            self.ready[shard].append(Job(f"JOB:{shard}-{next(self.ids)}", b"", 1))

    def settle(self, call: actions.Settle) -> tuple[list[Verdict], list[Job]]:
        round_ = call.round
        verdicts = [Verdict.RELEASED if isinstance(outcome, calls.Release) else Verdict.ACKED
                    for outcome in round_.outcomes]
        ready = self.ready[call.index]
        return verdicts, [ready.popleft() for _ in range(min(round_.claim, len(ready)))]

    def answer(self, action: actions.Action) -> Any:
        if isinstance(action, actions.SettleAll):
            self.trips.append([(call.index, call.round.claim) for call in action.calls])
            return [ConnectionError(f"shard {call.index} is down")
                    if call.index in self.broken else self.settle(call)
                    for call in action.calls]
        if isinstance(action, actions.Settle):
            self.trips.append([(action.index, action.round.claim)])
            return self.settle(action)
        assert isinstance(action, actions.Nudge | actions.Report), action
        return None


def drive(program: Any, world: Shards) -> Any:
    steps = Stepper(program)
    while (action := steps.step()) is not None:
        try:
            steps.reply(world.answer(action))
        except Exception as exc:
            steps.reply(error=exc)
    return steps.result


def run_in_hand(lineup: Lineup, now: float) -> list[Job]:
    """Run every job in hand (each one acked), as the beat does before its next round."""
    ran = []
    while (picked := lineup.next_job(now)) is not None:
        index, job = picked
        core = lineup.cores[index]
        core.finished(job)
        core.record(job, core.settlement(None), now)
        ran.append(job)
    return ran


class SpreadMachine(RuleBasedStateMachine):
    """A spread consumer's claim rounds over shards whose ready jobs come and go."""

    @initialize(shards=st.integers(1, 6), prefetch=st.integers(1, 120))
    def start(self, shards: int, prefetch: int) -> None:
        self.shards = shards
        self.world = Shards(shards)
        self.lineup = Lineup.of(settings_of(prefetch), shards, spread=True)
        self.host = Host(self.lineup)
        self.beat = Beat(self.host)
        self.unasked = [0] * shards  # claim rounds in a row that asked the shard for nothing
        self.leased = 0

    @rule(shard=st.integers(0, 5), count=st.integers(0, 30))
    def add(self, shard: int, count: int) -> None:
        self.world.add(shard % self.shards, count)

    @rule()
    def claim_round(self) -> None:
        lineup = self.lineup
        wanted, ramp, room = lineup.round_size(), lineup.ramp, lineup.room()
        ready = sum(len(shard) for shard in self.world.ready)
        trips = len(self.world.trips)
        held = lineup.held()
        drive(self.beat.claim_round(), self.world)
        taken = lineup.held() - held
        rounds = self.world.trips[trips:]
        # each call asks at most what the round still lacks: never more than the room
        assert all(sum(claim for _, claim in trip) <= wanted for trip in rounds)
        assert taken <= wanted <= room
        if self.shards == 1:
            # one queue: today's round, one settle call of the round's size
            assert rounds == ([[(0, wanted)]] if wanted or lineup.cores[0].outbox else [])
            return
        if wanted:
            first = dict(rounds[0])
            assert sum(first.values()) == wanted  # the round's first call asks for all of it
            for shard in range(self.shards):
                self.unasked[shard] = 0 if first.get(shard, 0) else self.unasked[shard] + 1
                # the fairness bound: asked within N claim rounds
                assert self.unasked[shard] < self.shards
            if wanted >= self.shards * MIN_ASK:
                assert all(first.get(shard, 0) >= 1 for shard in range(self.shards))
            # each call asks a shard for MIN_ASK jobs at least, while the round has as many
            assert all(claim >= min(wanted, MIN_ASK) for claim in first.values() if claim)
        # short only when every shard is empty; then nothing ready was left behind
        assert taken == min(wanted, ready)
        # the ramp doubles on a whole round, up to the cap, and only then
        expected = min(ramp * 2, lineup.batch_cap) if wanted and taken == wanted else ramp
        assert lineup.ramp == expected

    @rule()
    def run_batch(self) -> None:
        run_in_hand(self.lineup, self.host.monotonic())

    @rule()
    def park(self) -> None:
        self.lineup.rested()

    @precondition(lambda self: self.shards > 1)
    @rule(shard=st.integers(0, 5))
    def shard_call_fails(self, shard: int) -> None:
        """A round whose call on one shard fails: that shard's outcomes wait for the next
        round, the other shards' calls went through."""
        broken = shard % self.shards
        waiting = list(self.lineup.cores[broken].outbox)
        self.world.broken = {broken}
        trips = len(self.world.trips)
        try:
            drive(self.beat.claim_round(), self.world)
            failed = False
        except ConnectionError:
            failed = True
        finally:
            self.world.broken = set()
        called = any(index == broken for trip in self.world.trips[trips:] for index, _ in trip)
        assert failed == called
        assert [outcome for outcome in self.lineup.cores[broken].outbox
                if not isinstance(outcome, calls.Release)] == \
            [outcome for outcome in waiting if not isinstance(outcome, calls.Release)]
        self.unasked = [0] * self.shards  # a failed round is no claim round of the bound

    @invariant()
    def bounds(self) -> None:
        lineup = self.lineup
        assert lineup.held() <= lineup.settings.capacity  # the prefetch over every shard
        assert 1 <= lineup.ramp <= max(1, lineup.batch_cap)
        assert not lineup.reads_ahead or self.shards == 1


SpreadMachine.TestCase.settings = hypothesis_settings(max_examples=150, stateful_step_count=40,
                                                      deadline=None)
TestSpreadRounds = SpreadMachine.TestCase


# the split ------------------------------------------------------------------------------------

@pytest.fixture
def every_shard_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls of one job at least: every shard of the order is asked while the round has a job
    for each (the split's even shares, seen on small rounds)."""
    monkeypatch.setattr(spread_module, "MIN_ASK", 1)


def test_a_round_asks_as_many_shards_as_give_each_call_min_ask() -> None:
    assert MIN_ASK == 32
    assert split(10, [2, 3, 0, 1], 4) == [0, 0, 10, 0]
    assert split(128, [2, 3, 0, 1], 4) == [32, 32, 32, 32]
    assert split(80, [2, 3, 0, 1], 4) == [0, 0, 40, 40]
    assert split(128, list(range(12)), 12) == [32] * 4 + [0] * 8
    assert split(134, list(range(12)), 12) == [34, 34, 33, 33] + [0] * 8


@pytest.mark.usefixtures("every_shard_asked")
def test_split_gives_each_shard_an_even_share_and_the_first_the_remainder() -> None:
    assert split(10, [2, 3, 0, 1], 4) == [2, 2, 3, 3]
    assert split(1, [2, 3, 0, 1], 4) == [0, 0, 1, 0]
    assert split(5, [1, 3], 4) == [0, 3, 0, 2]
    assert split(0, [0, 1], 2) == [0, 0]


@pytest.mark.usefixtures("every_shard_asked")
def test_each_shard_is_first_once_in_n_rounds_of_one_job() -> None:
    spread = Spread(3)
    firsts = [spread.turn(1).asks().index(1) for _ in range(6)]
    assert firsts == [0, 1, 2, 0, 1, 2]


@pytest.mark.usefixtures("every_shard_asked")
def test_a_short_round_asks_again_only_the_shards_not_found_dry() -> None:
    claim = SpreadClaim(8, [1, 2, 3, 0], 4)
    assert claim.asks() == [2, 2, 2, 2]
    claim.took([2, 2, 2, 2], [2, 0, 1, 2])  # shards 1 and 2 are dry
    assert claim.asks() == [1, 0, 0, 2]  # the shortfall of 3 over shards 3 and 0, in order
    claim.took([1, 0, 0, 2], [0, 0, 0, 2])
    assert claim.asks() == [0, 0, 0, 1]
    claim.took([0, 0, 0, 1], [0, 0, 0, 1])
    assert claim.taken == 8 and claim.asks() == [0, 0, 0, 0]


@pytest.mark.usefixtures("every_shard_asked")
def test_a_failing_shard_rests_from_claims_doubling_until_it_is_answered() -> None:
    spread = Spread(3)
    spread.failed(1, 10.0)
    assert spread.turn(3, 10.05).asks() == [2, 0, 1]  # shard 1 rests 0.1 s: asked for none
    assert spread.turn(3, 10.2).asks() == [1, 1, 1]  # its rest is over: asked again
    spread.failed(1, 10.2)
    assert spread.left_out(10.35) == {1}  # failing again: twice as long
    assert spread.left_out(10.41) == set()
    for _ in range(8):
        spread.failed(1, 20.0)
    assert spread.left_out(20.99) == {1} and spread.left_out(21.01) == set()  # at most 1 s
    spread.answered(1)
    spread.failed(1, 30.0)
    assert spread.left_out(30.11) == set()  # answered in between: 0.1 s again
    for shard in range(3):
        spread.failed(shard, 40.0)
    assert spread.left_out(40.01) == set()  # never all of them: each is asked
    assert spread.turn(3, None).asks() == [1, 1, 1]


@pytest.mark.usefixtures("every_shard_asked")
def test_a_shard_call_that_fails_by_an_error_that_heals_rests_the_shard_not_the_round() -> None:
    world = Shards(3)
    for shard in range(3):
        world.add(shard, 20)
    lineup = Lineup.of(settings_of(6), 3, spread=True)
    lineup.ramp = 6
    host = Host(lineup, healing=True)
    beat = Beat(host)
    world.broken = {1}
    drive(beat.claim_round(), world)  # no error raised: the other shards answered
    assert lineup.held() == 6
    assert world.trips == [[(0, 2), (1, 2), (2, 2)], [(0, 1), (2, 1)]]
    run_in_hand(lineup, host.monotonic())
    world.trips.clear()
    drive(beat.claim_round(), world)
    assert all(index != 1 or claim == 0 for trip in world.trips for index, claim in trip)
    run_in_hand(lineup, host.monotonic())
    world.broken, world.trips = set(), []
    host.now += 0.2  # the rest is over
    drive(beat.claim_round(), world)
    assert dict(world.trips[0])[1] > 0 and lineup.spread is not None
    assert lineup.spread.left_out(host.now) == set()
    # every call failing is the round's failure, as is an error that does not heal
    run_in_hand(lineup, host.monotonic())
    world.broken = {0, 1, 2}
    with pytest.raises(ConnectionError):
        drive(beat.claim_round(), world)
    host.healing, world.broken = False, {2}
    with pytest.raises(ConnectionError):
        drive(beat.claim_round(), world)


# no change for one queue, nor for strict priority ---------------------------------------------

def rounds_of(lineup: Lineup, world: Shards, rounds: int) -> list[list[tuple[int, int]]]:
    host = Host(lineup)
    beat = Beat(host)
    for _ in range(rounds):
        drive(beat.claim_round(), world)
        run_in_hand(lineup, host.monotonic())
    return world.trips


def test_one_queue_spread_is_todays_consumer_of_one_queue() -> None:
    spread, plain = Shards(1), Shards(1)
    spread.add(0, 50)
    plain.add(0, 50)
    lineup = Lineup.of(settings_of(16), 1, spread=True)
    assert lineup.spread is None and lineup.reads_ahead
    assert rounds_of(lineup, spread, 8) == rounds_of(Lineup.of(settings_of(16), 1), plain, 8)
    # the claims ramp 1, 2, 4, 8 (half the prefetch: it reads ahead), then the rest
    assert [trip[0][1] for trip in plain.trips] == [1, 2, 4, 8, 8, 8, 8, 8]


def test_several_queues_without_spread_keep_strict_priority() -> None:
    world = Shards(3)
    world.add(0, 3)
    world.add(2, 50)
    trips = rounds_of(Lineup.of(settings_of(8), 3), world, 4)
    # one settle call a queue, one after another, each asking what the earlier ones left
    # (queue 0 holds 3 jobs: the third round finds it empty, then queue 1, then takes 2's)
    assert trips == [[(0, 1)], [(0, 2)], [(0, 4)], [(1, 4)], [(2, 4)],
                     [(0, 8)], [(1, 8)], [(2, 8)]]


@pytest.mark.usefixtures("every_shard_asked")
def test_spread_sends_every_shards_call_of_a_round_in_one_round_trip() -> None:
    world = Shards(4)
    for shard in range(4):
        world.add(shard, 20)
    trips = rounds_of(Lineup.of(settings_of(16), 4, spread=True), world, 6)
    assert [sum(claim for _, claim in trip) for trip in trips] == [1, 2, 4, 8, 16, 16]
    # the second round: shard 0's outcome (no claim: its turn has passed) and two claims
    assert trips[1] == [(0, 0), (1, 1), (2, 1)]
    assert [len(trip) for trip in trips] == [1, 3, 4, 4, 4, 4]


def test_a_sharded_queue_is_served_spread_over_its_shards() -> None:
    shards = [SimpleNamespace(name=f"orders~{n}", wire=5, conn=redis.Redis(), max_attempts=None,
                              key=lambda *parts, n=n: ":".join((f"emq:{{orders~{n}}}", *parts)))
              for n in range(3)]
    sharded = SimpleNamespace(name="orders", wire=5, shards=3, shard_queues=shards)
    for served in (sharded, [sharded]):  # as the worker passes it: alone, or a list of one
        consumer = Consumer(served, lambda job: None, announce=False)  # type: ignore[arg-type]
        try:
            assert consumer.queues == shards and consumer.lineup.spread is not None
        finally:
            consumer.close()
    with pytest.raises(ValueError, match="consumer of its own"):
        Consumer([sharded, shards[0]], lambda job: None,  # type: ignore[list-item]
                 announce=False)

    async def served_by_asyncio() -> list[Any]:
        aio_shards = [SimpleNamespace(**{**vars(shard), "conn": redis.asyncio.Redis()})
                      for shard in shards]
        aio_sharded = SimpleNamespace(name="orders", wire=5, shards=3, shard_queues=aio_shards)
        consumer = AsyncConsumer(aio_sharded, lambda job: None,  # type: ignore[arg-type]
                                 announce=False)
        assert consumer.lineup.spread is not None
        return list(consumer.queues)

    assert [queue.name for queue in asyncio.run(served_by_asyncio())] == \
        [shard.name for shard in shards]


def test_a_round_of_nothing_asked_sends_only_what_waits() -> None:
    lineup = Lineup.of(settings_of(2), 2, spread=True)
    core = lineup.cores[1]
    job = Job("JOB:x", b"", 1)
    core.claimed([job, Job("JOB:y", b"", 1), Job("JOB:z", b"", 1)], 0.0)
    core.next_job(0.0)
    core.finished(job)
    core.record(job, core.settlement(None), 0.0)
    assert lineup.room() == 0
    world = Shards(2)
    drive(Beat(Host(lineup)).claim_round(), world)
    assert world.trips == [[(1, 0)]]  # the outcome went out; no claim (no room)
    assert lineup.cores[1].outbox == []


def test_a_spread_lane_consumer_tries_the_shards_in_the_turning_order() -> None:
    options = {**settings_of(4).__dict__, "lanes": True}
    lineup = Lineup.of(Settings(**options), 3, spread=True)
    beat = Beat(Host(lineup))
    tried: list[int] = []

    def answer(action: actions.Action) -> Any:
        if isinstance(action, actions.ClaimLane):
            tried.append(action.index)
            return None
        if isinstance(action, actions.Settle):
            return [], []
        return None

    firsts = []
    for _ in range(4):
        tried.clear()
        steps = Stepper(beat.claim_round())
        while (action := steps.step()) is not None:
            steps.reply(answer(action))
        firsts.append(list(tried))
    assert firsts == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]


@pytest.mark.parametrize(("spread", "healing"), [(True, True), (True, False), (False, True)])
def test_a_shard_whose_housekeeping_fails_by_an_error_that_heals_leaves_the_others_theirs(
        spread: bool, healing: bool) -> None:
    """A spread consumer's housekeeping over 3 shards, shard 1's node down: shards 0 and 2 are
    still housekept and the beat goes on; an error that does not heal, or a consumer of several
    queues in priority (not spread), raises as before."""
    lineup = Lineup.of(settings_of(8), 3, spread=spread)
    beat = Beat(Host(lineup, healing=healing))
    housekept: list[int] = []

    def answer(action: actions.Action) -> Any:
        if isinstance(action, actions.TakeToken):
            if action.index == 1:
                raise ConnectionError("shard 1 is down")
            return True
        assert isinstance(action, actions.Housekeep), action
        housekept.append(action.index)
        return Housekept(recovered=0, promoted=0, trimmed=0)

    steps = Stepper(beat.housekeep())
    raised: Exception | None = None
    try:
        while (action := steps.step()) is not None:
            try:
                steps.reply(answer(action))
            except Exception as exc:
                steps.reply(error=exc)
    except ConnectionError as exc:
        raised = exc
    if spread and healing:
        assert raised is None and housekept == [0, 2]
    else:
        assert raised is not None and housekept == [0]
