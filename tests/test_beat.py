"""Both consumer shells perform one beat program (``echomq.consumer.beat``): given the same replies,
the blocking ``Consumer`` (threads) and the asyncio one (tasks) ask for the same actions in the same
order — through ``run``, ``beat`` and ``drain`` alike, errors included — and each shell has a way
to perform every action the program may ask of it."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import deque
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import redis
import redis.asyncio
from hypothesis import given, settings, strategies as st

from echomq.consumer import actions
from echomq.consumer.actions import Action, OnJob, OnQueue, Stepper
from echomq.consumer.aio import Consumer as AsyncConsumer
from echomq.consumer.blocking import Consumer
from echomq.consumer.settings import Round
from echomq.consumer.shell import NOTICES
from echomq.engine import calls
from echomq.engine.calls import Job, Verdict
from echomq.engine.rows import Layout
from echomq.queue.bounds import Housekept
from echomq.queue.parking import Sighting


class World:
    """Scripted replies to a consumer's actions, the same for either shell: a queue holding
    ``jobs`` (claimed in order), handlers that fail on ``failing`` ids, a settle call that fails
    when it is the ``broken``-th, and a clock that moves a millisecond an action. A park stops
    the consumer. ``trace``: every action asked for, claim ids left out (they are random)."""

    def __init__(self, jobs: list[Job], failing: set[str], broken: int | None) -> None:
        self.pending = deque(jobs)
        self.failing = failing
        self.broken = broken
        self.settles = 0
        self.now = 0.0
        self.trace: list[str] = []
        self.stop: Callable[[], None] = lambda: None
        self.ahead: Any = None

    def clock(self) -> float:
        return self.now

    def answer(self, action: Action) -> Any:
        self.trace.append(re.sub(r"claim_id='[^']*'", "claim_id=ID", repr(action)))
        self.now += 0.001
        if isinstance(action, actions.Settle | actions.SendAhead | actions.Collect):
            return self.round_trip(action)
        if isinstance(action, actions.ClaimLane):
            return self.pending.popleft() if self.pending else None
        if isinstance(action, actions.Run):
            if action.job.id in self.failing:
                return None, RuntimeError(f"{action.job.id} fails")
            return None, None
        if isinstance(action, actions.Read):
            return [Sighting(due=None, ready=False)]
        if isinstance(action, actions.Block):
            self.stop()
            return None
        if isinstance(action, actions.Housekeep):
            return Housekept(0, 0, 0)  # nothing was due, nothing dead
        return isinstance(action, actions.TakeToken) or None  # a token taken; not paused

    def round_trip(self, action: actions.Settle | actions.SendAhead | actions.Collect) -> Any:
        """A settle call: sent and read at once, sent ahead (settled on the server now, its reply
        read later), or that reply read."""
        if isinstance(action, actions.Settle):
            return self.settle(action.round)
        if isinstance(action, actions.SendAhead):
            self.ahead = self.settled_ahead(action.round)
            return None
        reply = self.ahead
        if not action.peek:  # the keeper's read leaves the reply for the Collect that takes it
            self.ahead = None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def settled_ahead(self, round_: Any) -> Any:
        """A round sent ahead: its reply, or the error reading it will raise."""
        try:
            return self.settle(round_)
        except redis.ConnectionError as exc:
            return exc

    def settle(self, round_: Any) -> tuple[list[Verdict], list[Job]]:
        self.settles += 1
        if self.settles == self.broken:
            raise redis.ConnectionError("the server went away")
        verdicts = [Verdict.RELEASED if isinstance(outcome, calls.Release) else
                    Verdict.RETRYING if isinstance(outcome, calls.Retry) else Verdict.ACKED
                    for outcome in round_.outcomes]
        taken = [self.pending.popleft() for _ in range(min(round_.claim, len(self.pending)))]
        return verdicts, taken


def queue_of(conn: Any, awaited: bool = False) -> Any:
    """What a consumer reads of a queue it is given, before any I/O, and the methods its calls
    name (never called here)."""
    unused = {name: lambda *args, **options: None
              for name in ("is_paused", "claim_lane", "settle_leased", "extend_many")}
    return SimpleNamespace(name="beat", wire=5, conn=conn, max_attempts=None,
                           key=lambda *parts: ":".join(("emq:{beat}", *parts)),
                           row_layout=(_layout_awaited if awaited else lambda: Layout(None)),
                           **unused)


async def _layout_awaited() -> Layout:
    return Layout(None)


def blocking_trace(world: World, call: str, options: dict[str, Any]) -> list[str]:
    consumer = Consumer(queue_of(redis.Redis()), lambda job: None, announce=False, **options)
    consumer.monotonic = world.clock  # type: ignore[method-assign]
    consumer._parker.socket_timeout_s = None  # as bound to a parking client without one
    world.stop = consumer.stop

    def perform(steps: Stepper[Any], action: Action) -> None:
        try:
            steps.reply(world.answer(action))
        except BaseException as exc:
            steps.reply(error=exc)

    consumer._perform = perform  # type: ignore[method-assign]
    try:
        attempt(getattr(consumer, call))
    finally:
        consumer.close()
    return world.trace


def async_trace(world: World, call: str, options: dict[str, Any]) -> list[str]:
    async def main() -> None:
        consumer = AsyncConsumer(queue_of(redis.asyncio.Redis(), awaited=True), lambda job: None,
                                 announce=False, **options)
        consumer.monotonic = world.clock  # type: ignore[method-assign]
        consumer._parker.timeout_s = None  # as bound to a parking client without one
        world.stop = consumer.stop

        async def perform(action: Action) -> Any:
            return world.answer(action)

        consumer._perform = perform  # type: ignore[method-assign]
        with contextlib.suppress(redis.ConnectionError):
            await getattr(consumer, call)()

    asyncio.run(main())
    return world.trace


def attempt(call: Callable[[], object]) -> None:
    # A beat or a drain raises what its last round met, either shell alike.
    with contextlib.suppress(redis.ConnectionError):
        call()


jobs_of = st.lists(st.tuples(st.integers(1, 2), st.booleans()), max_size=8).map(
    lambda specs: [(Job(f"JOB:{n}", b"x", attempt), fails) for n, (attempt, fails)
                   in enumerate(specs)])


@settings(max_examples=60, deadline=None)
@given(jobs=jobs_of, call=st.sampled_from(["run", "beat", "drain"]),
       prefetch=st.integers(1, 4), lanes=st.booleans(),
       broken=st.none() | st.integers(1, 6), time_limit=st.sampled_from([None, 60_000]))
def test_both_shells_ask_for_the_same_actions_given_the_same_replies(
        jobs: list[tuple[Job, bool]], call: str, prefetch: int, lanes: bool,
        broken: int | None, time_limit: int | None) -> None:
    failing = {job.id for job, fails in jobs if fails}
    options = {"prefetch": prefetch, "lanes": lanes, "time_limit_ms": time_limit,
               "lease_ms": 30_000}
    queued = [job for job, _ in jobs]
    sync = blocking_trace(World(queued, failing, broken), call, options)
    aio = async_trace(World(queued, failing, broken), call, options)
    assert sync == aio
    assert sum(entry.startswith("Run(") for entry in sync) >= (1 if jobs and not broken else 0)


def concrete_actions() -> set[type[Action]]:
    found: set[type[Action]] = set()
    pending: list[type[Action]] = [Action]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            found.add(sub)
    return found - {OnQueue, OnJob}


def performed_by(consumer: Any) -> set[type[Action]]:
    """The actions ``consumer`` has a performer for: a call on a queue, its own, a notice."""
    queue_calls = {kind for kind in concrete_actions() if issubclass(kind, OnQueue)
                   and consumer._queue_call(sample(kind)) is not None}
    own = set(consumer._io) | set(getattr(consumer, "_now_io", {}))
    return queue_calls | own | set(NOTICES)


def sample(kind: type[Action]) -> Action:
    """An instance of ``kind`` with placeholder fields."""
    fields = kind.__dataclass_fields__  # type: ignore[attr-defined]
    values: dict[str, Any] = {"index": 0, "round": Round([], 0)}
    return kind(**{name: values.get(name) for name in fields})


def test_each_shell_performs_every_action_its_program_may_ask() -> None:
    sync = Consumer(queue_of(redis.Redis()), lambda job: None, announce=False)
    try:
        missing = concrete_actions() - performed_by(sync)
    finally:
        sync.close()
    # A blocking consumer runs one handler at a time: nothing to spawn or wait for.
    assert missing == {actions.Spawn, actions.WaitOne, actions.SettleInFlight}

    async def async_missing() -> set[type[Action]]:
        consumer = AsyncConsumer(queue_of(redis.asyncio.Redis(), awaited=True), lambda job: None,
                                 announce=False)
        return concrete_actions() - performed_by(consumer)

    assert asyncio.run(async_missing()) == set()
