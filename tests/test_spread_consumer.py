"""A spread consumer (``spread=True``: several queues served as one, the shards of a sharded
queue) on a real server, both wires and both shells: it drains every shard; with every shard
loaded, each one has jobs claimed within N rounds (a ledger of the claim rounds the consumer
performed and of the jobs each shard gave); each round is one round trip carrying every shard's
settle call; a stop hands back what it prefetched on every shard, attempts uncounted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from echomq import Consumer, Job, Queue, Verdict
from echomq.consumer import actions, spread
from echomq.engine import calls, once, program
from echomq.engine.scripts import script_for
from echomq.engine.transitions import SETTLE
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import parked, running, wait_until

SHARDS = 4


@pytest.fixture(autouse=True)
def every_shard_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls of one job at least (``spread.MIN_ASK``), so the small rounds of these tests ask
    every shard; ``test_a_call_asks_a_shard_for_min_ask_jobs_by_default`` keeps the default."""
    monkeypatch.setattr(spread, "MIN_ASK", 1)


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def shards(conn: redis.Redis, wire: int) -> list[Queue]:
    return [Queue(conn, f"spread{n}", wire=wire) for n in range(SHARDS)]


def fill(shards: list[Queue], per_shard: int, tag: str = "") -> None:
    for n, shard in enumerate(shards):
        shard.enqueue_many([(f"JOB:{tag}{n}-{k}", b"x") for k in range(per_shard)])


def consumer_of(made: Any) -> Any:
    """The echomq consumer behind what ``make`` built (the asyncio one behind its shell)."""
    return getattr(made, "consumer", made)


class Ledger:
    """What a consumer asked of its shards (each ``SettleAll``: its calls, and what each
    claimed) and the jobs its handler ran, as they happen."""

    def __init__(self, made: Any) -> None:
        self.rounds: list[list[tuple[int, int, int]]] = []  # (shard, asked, claimed) per call
        self.ran: list[str] = []
        # each SettleAll's shards that handed back jobs (releases) in it
        self.handed_back: list[set[int]] = []
        self.lock = threading.Lock()
        consumer = consumer_of(made)
        perform = consumer._io[actions.SettleAll]
        consumer._io[actions.SettleAll] = lambda action: self._noted(action, perform(action))

    def _noted(self, action: actions.SettleAll, reply: Any) -> Any:
        if hasattr(reply, "__await__"):
            async def awaited() -> Any:
                return self._note(action, await reply)
            return awaited()
        return self._note(action, reply)

    def _note(self, action: actions.SettleAll, replies: list[Any]) -> list[Any]:
        with self.lock:
            self.rounds.append([(call.index, call.round.claim,
                                 0 if isinstance(reply, Exception) else len(reply[1]))
                                for call, reply in zip(action.calls, replies, strict=True)])
            self.handed_back.append({call.index for call in action.calls
                                     if any(isinstance(outcome, calls.Release)
                                            for outcome in call.round.outcomes)})
        return replies

    def handler(self, job: Job) -> None:
        with self.lock:
            self.ran.append(job.id)

    def claiming(self) -> list[list[tuple[int, int, int]]]:
        """The rounds that claimed anything, in order."""
        return [calls for calls in self.rounds if any(asked for _, asked, _ in calls)]


def test_a_spread_consumer_drains_every_shard(make: Make, shards: list[Queue]) -> None:
    for n, shard in enumerate(shards):
        shard.enqueue_many([(f"JOB:{n}-{k}", b"x") for k in range(5 + 7 * n)])
    made = make(shards, None, spread=True, prefetch=8, announce=False)
    ledger = Ledger(made)
    made.handler = ledger.handler
    total = sum(5 + 7 * n for n in range(SHARDS))
    with running(made):
        assert wait_until(lambda: len(ledger.ran) == total)
    assert sorted(ledger.ran) == sorted(f"JOB:{n}-{k}" for n in range(SHARDS)
                                        for k in range(5 + 7 * n))
    for shard in shards:
        assert shard.conn.zcard(shard.key("pending")) == 0
        assert shard.conn.zcard(shard.key("active")) == 0
    # one consumer over the four: every round asked them together
    assert max(len(calls) for calls in ledger.rounds) == SHARDS


def test_every_loaded_shard_has_jobs_claimed_within_n_rounds(make: Make,
                                                              shards: list[Queue]) -> None:
    """A gate job holds the consumer while every shard is loaded; from then on, until the
    first shard runs dry, any N claim rounds in a row claim from every shard — with batches of
    2, fewer than the shards: the shard first in line turns each round."""
    at_gate, loaded = threading.Event(), threading.Event()
    made = make(shards, None, spread=True, prefetch=2, settle_delay_ms=20_000,
                announce=False)
    ledger = Ledger(made)

    def handler(job: Job) -> None:
        if job.id == "JOB:gate0-0":
            at_gate.set()
            assert loaded.wait(10)
        ledger.handler(job)

    made.handler = handler
    with running(made):
        shards[0].enqueue("JOB:gate0-0", b"gate")
        assert at_gate.wait(5)
        fill(shards, 20)
        loaded.set()
        assert wait_until(lambda: len(ledger.ran) == 1 + SHARDS * 20)
    rounds = ledger.claiming()
    gate = next(n for n, calls in enumerate(rounds) if any(claimed for *_, claimed in calls))
    loaded_rounds = rounds[gate + 1:]
    last = {shard: max(n for n, calls in enumerate(loaded_rounds)
                       if any(index == shard and claimed for index, _, claimed in calls))
            for shard in range(SHARDS)}
    while_all_loaded = loaded_rounds[:min(last.values())]
    assert len(while_all_loaded) >= SHARDS * 2
    for start in range(len(while_all_loaded) - SHARDS + 1):
        window = while_all_loaded[start:start + SHARDS]
        served = {index for calls in window for index, _, claimed in calls if claimed}
        assert served == set(range(SHARDS)), (start, window)
    # each round asked two shards, one job each, the pair turning by one shard a round
    asked = [sorted(index for index, count, _ in calls if count) for calls in while_all_loaded]
    assert all(len(pair) == 2 for pair in asked)
    assert len({tuple(pair) for pair in asked}) >= SHARDS - 1


def is_settle(command: Any, wire: int) -> bool:
    name = str(command[0]).upper()
    if wire == 6:
        return name == str(SETTLE.native).upper()
    return name == "EVALSHA" and command[1] == script_for(SETTLE).sha


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch, wire: int) -> Iterator[list[int]]:
    """How many settle calls each round trip that carried any carried (a flush, or one
    command sent on its own), on either client."""
    seen: list[int] = []
    lock = threading.Lock()

    def note(commands: Any) -> None:
        count = sum(is_settle(command, wire) for command in commands)
        if count:
            with lock:
                seen.append(count)

    def flush(client: Any, commands: Any) -> Any:
        note(commands)
        return once.flush_once(client, commands)

    async def async_flush(client: Any, commands: Any) -> Any:
        note(commands)
        return await once.async_flush_once(client, commands)

    def send(client: Any, *command: Any) -> Any:
        note([command])
        return once.send_once(client, *command)

    async def async_send(client: Any, *command: Any) -> Any:
        note([command])
        return await once.async_send_once(client, *command)

    monkeypatch.setattr(program, "flush_once", flush)
    monkeypatch.setattr(program, "async_flush_once", async_flush)
    monkeypatch.setattr(program, "send_once", send)
    monkeypatch.setattr(program, "async_send_once", async_send)
    yield seen


def settle_calls(conn: redis.Redis) -> int:
    """How many ``EMQ.SETTLE`` calls the server ran."""
    stats = conn.info("commandstats")
    return int(stats.get(f"cmdstat_{str(SETTLE.native).lower()}", {}).get("calls", 0))


def test_each_round_is_one_round_trip_carrying_every_shards_call(
        make: Make, shards: list[Queue], trips: list[int], wire: int,
        conn: redis.Redis) -> None:
    fill(shards, 30)
    Queue(conn, "warm", wire=shards[0].wire).settle_leased([], 1, 30_000, None, None)
    trips.clear()  # the settle script is loaded: no NOSCRIPT sends a call again below
    conn.config_resetstat()
    made = make(shards, None, spread=True, prefetch=16, settle_delay_ms=20_000,
                announce=False)
    ledger = Ledger(made)
    made.handler = ledger.handler
    with running(made):
        assert wait_until(lambda: len(ledger.ran) == SHARDS * 30)
    # each SettleAll the consumer performed was one round trip with all its calls in it
    assert trips == [len(calls) for calls in ledger.rounds]
    assert sum(len(calls) == SHARDS for calls in ledger.rounds) >= 5
    if wire == 6:  # and the server ran each call once (on wire 5 EVALSHA counts every script)
        assert settle_calls(conn) == sum(trips)


def test_a_stop_hands_back_what_every_shard_prefetched_uncounted(
        make: Make, shards: list[Queue]) -> None:
    fill(shards, 10)
    made = make(shards, None, spread=True, prefetch=16, announce=False)
    consumer = consumer_of(made)
    ledger = Ledger(made)
    held: list[int] = []

    def handler(job: Job) -> None:
        ledger.handler(job)
        if not held and all(core.prefetched for core in consumer.lineup.cores):
            held.extend(len(core.prefetched) for core in consumer.lineup.cores)
            made.stop()

    made.handler = handler
    with running(made, stop_within=5):
        assert wait_until(lambda: made.stopping)
    assert held and all(held)
    # the last round handed back each shard's prefetched jobs in one round trip
    last = ledger.rounds[-1]
    assert sorted(index for index, _, _ in last) == list(range(SHARDS))
    ran = [0] * SHARDS
    for job_id in ledger.ran:
        ran[int(job_id.removeprefix("JOB:").split("-")[0])] += 1
    for n, shard in enumerate(shards):
        assert shard.conn.zcard(shard.key("active")) == 0
        back = shard.claim_many(100)
        assert len(back) == 10 - ran[n]
        assert all(job.attempt == 1 for job in back)  # handed back: no attempt counted


def test_a_job_claimed_before_runs_alone_over_every_shard(make: Make,
                                                         shards: list[Queue]) -> None:
    """A retried job of one shard, claimed with the other shards' jobs, runs with nothing else
    in hand: every shard's prefetched jobs go back first, their attempts uncounted."""
    shards[2].enqueue("JOB:2-again", b"x")
    claimed = shards[2].claim()
    assert claimed is not None
    fill(shards, 3)
    assert shards[2].retry(claimed, delay_ms=0) is Verdict.RETRYING
    fill(shards, 3, tag="more")
    made = make(shards, None, spread=True, prefetch=16, announce=False)
    consumer = consumer_of(made)
    ledger = Ledger(made)
    seen: dict[str, tuple[int, int]] = {}  # id: (attempt, leases in hand as it ran)

    def handler(job: Job) -> None:
        seen[job.id] = (job.attempt, consumer.lineup.held())
        ledger.handler(job)

    made.handler = handler
    with running(made):
        assert wait_until(lambda: len(ledger.ran) == 1 + SHARDS * 6)
    assert seen["JOB:2-again"] == (2, 1)  # alone in hand
    # it came with another shard's jobs not started yet, which went back before it ran
    assert any(shards_back - {2} for shards_back in ledger.handed_back)
    assert all(attempt == 1 for job_id, (attempt, _) in seen.items() if job_id != "JOB:2-again")
    assert sorted(ledger.ran) == sorted(set(ledger.ran))


def test_a_sharded_queue_is_served_spread_by_consumer_of_it(shards: list[Queue]) -> None:
    """``Consumer(q)`` of a queue that has ``shards`` and ``shard_queues`` (as a sharded queue
    has) serves the shards as one."""
    fill(shards, 5)
    sharded = SimpleNamespace(name="spread", wire=shards[0].wire, shards=SHARDS,
                              shard_queues=shards)
    ran: list[str] = []
    consumer = Consumer(sharded, lambda job: ran.append(job.id),  # type: ignore[arg-type]
                        prefetch=8, announce=False)
    try:
        assert consumer.lineup.spread is not None
        assert consumer.drain() == SHARDS * 5
    finally:
        consumer.close()
    assert sorted(ran) == sorted(f"JOB:{n}-{k}" for n in range(SHARDS) for k in range(5))


def test_a_parked_spread_consumer_wakes_for_a_job_on_any_shard(
        make: Make, shards: list[Queue], conn: redis.Redis) -> None:
    made = make(shards, None, spread=True, park_cap_ms=30_000, announce=False)
    ledger = Ledger(made)
    made.handler = ledger.handler
    with running(made):
        for n in (3, 1, 2, 0):
            assert parked(conn)
            shards[n].enqueue(f"JOB:{n}-woke", b"x")
            assert wait_until(lambda n=n: f"JOB:{n}-woke" in ledger.ran)  # type: ignore[misc]


def test_a_call_asks_a_shard_for_min_ask_jobs_by_default(
        make: Make, shards: list[Queue], monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default ``MIN_ASK`` (32), a round of 128 asks 4 shards for 32 each, not every
    shard for a few: fewer calls, each claiming more; still every job runs once."""
    monkeypatch.setattr(spread, "MIN_ASK", spread.DEFAULT_MIN_ASK)
    fill(shards, 150)
    made = make(shards, None, spread=True, prefetch=128, announce=False)
    ledger = Ledger(made)
    made.handler = ledger.handler
    with running(made):
        assert wait_until(lambda: len(ledger.ran) == SHARDS * 150)
    assert sorted(ledger.ran) == sorted(f"JOB:{n}-{k}" for n in range(SHARDS)
                                        for k in range(150))
    for calls_ in ledger.claiming():
        asked = [asked for _, asked, _ in calls_ if asked]
        wanted = sum(asked)
        assert all(ask >= min(wanted, spread.DEFAULT_MIN_ASK) for ask in asked)
    assert any(sum(asked for _, asked, _ in calls_) >= 128 for calls_ in ledger.claiming())
