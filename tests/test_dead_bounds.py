"""Dead jobs bounded by count and age: the bounds on the server (``<base>deadconf``), set
through either Queue with every value checked first; trim_dead on both wires, oldest first, the
age on an explicit clock; a consumer's housekeeping trimming a backlog over a few rounds (rounds
counted, each a forced beat), and sending no trim between its scheduled ones; the command line's
header and ``echomq dead bounds``."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis

from echomq import ArgumentError, Queue
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.queue.bounds import HOUSEKEEPING_STEP, TRIM_EVERY, TRIM_STEPS, DeadTrims, Housekept
from tests.command_line import cli
from tests.shells import Make, async_client_like, make_fixture, shell_fixture  # noqa: F401
from tests.test_cli import assert_one_error, echomq
from tests.test_consumer import command_calls

NOW = 1_700_000_000_000
DAY_MS = 86_400_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "work", wire=request.param)


def bury(queue: Queue, count: int, *, first_died: int = NOW, start: int = 0) -> list[str]:
    """``count`` dead jobs (ids in order of death, one ms apart from ``first_died``), each with
    its row and its ended key, as retry's dead path leaves them."""
    ids = [f"JOB:{n:06d}" for n in range(start, start + count)]
    with queue.conn.pipeline(transaction=False) as pipe:
        for n, job_id in enumerate(ids):
            pipe.hset(queue.key("job", job_id),
                      mapping={"p": "p", "a": 3, "t": NOW - 10,
                               "error": "boom"})
            pipe.zadd(queue.key("dead"), {job_id: first_died + n})
            pipe.rpush(queue.key("ended", job_id), 1)
        pipe.execute()
    return ids


def dead_ids(queue: Queue) -> list[str]:
    return [member.decode() for member in queue.conn.zrange(queue.key("dead"), 0, -1)]


def gone(queue: Queue, job_id: str) -> bool:
    return not queue.conn.exists(queue.key("job", job_id), queue.key("ended", job_id))


# the bounds ---------------------------------------------------------------------------------


def test_the_bounds_default_to_ten_thousand_jobs_for_180_days(queue: Queue) -> None:
    assert (queue.dead_bounds().max_count, queue.dead_bounds().max_age_ms) == (10_000,
                                                                                180 * DAY_MS)
    assert queue.set_dead_bounds(max_count=5).max_age_ms == 180 * DAY_MS
    assert queue.set_dead_bounds(max_age_ms=0).max_count == 5  # ... keeps the other
    assert queue.conn.hgetall(queue.key("deadconf")) == {b"max_count": b"5",
                                                         b"max_age_ms": b"0"}
    cleared = queue.set_dead_bounds(max_count=None, max_age_ms=None)
    assert (cleared.max_count, cleared.max_age_ms) == (10_000, 180 * DAY_MS)
    assert not queue.conn.exists(queue.key("deadconf"))


@pytest.mark.parametrize("bad", [-1, 10**15, 1.5, "3", True])
def test_a_bad_bound_is_refused_before_anything_is_sent(queue: Queue, bad: object) -> None:
    queue.set_dead_bounds(max_count=7)
    with pytest.raises(ArgumentError, match="max_age_ms must be an integer from 0"):
        queue.set_dead_bounds(max_count=8, max_age_ms=bad)  # type: ignore[arg-type]
    assert queue.conn.hgetall(queue.key("deadconf")) == {b"max_count": b"7"}


def test_both_queues_set_the_same_bounds(queue: Queue) -> None:
    async def set_async() -> tuple[int, int]:
        client = async_client_like(queue.conn)
        try:
            bounds = await AsyncQueue(client, "work", wire=queue.wire).set_dead_bounds(
                max_count=3, max_age_ms=DAY_MS)
            return bounds.max_count, bounds.max_age_ms
        finally:
            await client.aclose()

    assert asyncio.run(set_async()) == (3, DAY_MS)
    assert queue.dead_bounds().max_count == 3


# trim_dead on both wires -----------------------------------------------------------------


def test_trim_dead_forgets_the_oldest_beyond_the_count(queue: Queue) -> None:
    ids = bury(queue, 12)
    queue.set_dead_bounds(max_count=5, max_age_ms=0)
    assert queue.trim_dead(now=NOW, limit=4) == 4  # the limit holds
    assert queue.trim_dead(now=NOW) == 3
    assert queue.trim_dead(now=NOW) == 0
    assert dead_ids(queue) == ids[7:]
    assert all(gone(queue, job_id) for job_id in ids[:7])
    assert not any(gone(queue, job_id) for job_id in ids[7:])


def test_trim_dead_forgets_those_dead_for_the_age_on_the_callers_clock(queue: Queue) -> None:
    ids = bury(queue, 10, first_died=NOW)  # died at NOW .. NOW + 9
    queue.set_dead_bounds(max_count=0, max_age_ms=1_000)
    assert queue.trim_dead(now=NOW + 999) == 0  # none is a second dead yet
    assert queue.trim_dead(now=NOW + 1_003) == 4  # NOW .. NOW + 3: exactly 1,000 ms or more
    assert dead_ids(queue) == ids[4:]
    assert queue.trim_dead(now=NOW + 10**6) == 6


def test_a_bad_bound_on_the_server_changes_nothing_on_either_wire(queue: Queue) -> None:
    bury(queue, 3)
    before = queue.conn.zrange(queue.key("dead"), 0, -1)
    queue.conn.hset(queue.key("deadconf"), mapping={"max_count": "1", "max_age_ms": "30d"})
    with pytest.raises(ArgumentError) as refused:
        queue.trim_dead(now=NOW)
    assert str(refused.value) == ("EMQNUM deadconf max_age_ms must be an integer from 0 to "
                                  "999999999999999")
    assert queue.conn.zrange(queue.key("dead"), 0, -1) == before


# housekeeping ------------------------------------------------------------------------------


def test_housekeeping_trims_a_backlog_oldest_first_over_a_few_rounds(make: Make,
                                                                      queue: Queue) -> None:
    """More dead jobs over the bound than one round takes: each forced beat (a housekeeping
    round) takes at most TRIM_STEPS * HOUSEKEEPING_STEP, the oldest first, until the bound
    holds; the round after sends no trim at all. The interval is an hour: a round that takes
    longer than the default second on a loaded machine would otherwise let the beat's drain
    housekeep (and trim) again."""
    per_round = TRIM_STEPS * HOUSEKEEPING_STEP
    kept = 50
    ids = bury(queue, kept + 2 * per_round + 500)
    queue.set_dead_bounds(max_count=kept)
    consumer = make(queue, lambda job: None, clock=lambda: NOW + 1_000,
                    housekeeping_ms=3_600_000)
    remaining = [len(ids)]
    for _ in range(4):
        consumer.beat(park=False)
        remaining.append(queue.conn.zcard(queue.key("dead")))
    assert remaining == [len(ids), len(ids) - per_round, kept + 500, kept, kept]
    assert dead_ids(queue) == ids[-kept:]
    assert gone(queue, ids[0]) and gone(queue, ids[-kept - 1]) and not gone(queue, ids[-kept])


def test_housekeeping_trims_by_age_on_the_consumers_clock(make: Make, queue: Queue) -> None:
    ids = bury(queue, 6, first_died=NOW)
    queue.set_dead_bounds(max_age_ms=DAY_MS)
    consumer = make(queue, lambda job: None, clock=lambda: NOW + DAY_MS + 2)
    consumer.beat(park=False)
    assert dead_ids(queue) == ids[3:]  # died at NOW, NOW + 1, NOW + 2: a day ago or more


def trims_sent(conn: redis.Redis) -> int:
    """trim_dead calls so far: the native command's, or its script's one HMGET (no other script
    a flat queue runs reads a hash so)."""
    calls = command_calls(conn)
    return calls.get("emq.trim_dead", 0) + calls.get("hmget", 0)


def test_rounds_between_scheduled_trims_send_none(make: Make, queue: Queue) -> None:
    """Nothing dead: the first round trims (one call, it finds nothing), the next rounds
    housekeep with recover and promote alone — no command more than before trimming existed."""
    consumer = make(queue, lambda job: None, clock=lambda: NOW)
    before = trims_sent(queue.conn)
    consumer.beat(park=False)
    first = trims_sent(queue.conn)
    for _ in range(5):
        consumer.beat(park=False)
    assert (first - before, trims_sent(queue.conn) - first) == (1, 0)


def test_the_trim_schedule_is_the_first_round_every_nth_and_after_a_full_one() -> None:
    trims = DeadTrims()
    schedule = []
    for _ in range(2 * TRIM_EVERY + 1):
        wanted = trims.wanted()
        schedule.append(wanted)
        trims.done(wanted, Housekept(0, 0, 0))
    assert [n for n, wanted in enumerate(schedule) if wanted] == [0, TRIM_EVERY, 2 * TRIM_EVERY]
    trims.done(True, Housekept(0, 0, TRIM_STEPS * HOUSEKEEPING_STEP))
    assert trims.wanted()  # a full trim: more may be over, the next round trims too
    trims.done(True, Housekept(0, 0, 1))
    assert not trims.wanted()


def test_recover_due_trims_unless_told_not_to(queue: Queue) -> None:
    bury(queue, 4)
    queue.set_dead_bounds(max_count=1)
    assert queue.recover_due(now=NOW, trim=False) == Housekept(0, 0, 0)
    assert queue.recover_due(now=NOW) == Housekept(0, 0, 3)


# the command line --------------------------------------------------------------------------


def test_the_dead_list_shows_the_bounds_and_dead_bounds_sets_them(
        valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    assert cli(valkey, "dead", "list", "mail") == (
        "no dead jobs in mail (kept: at most 10,000 for 180 days)\n")
    assert cli(valkey, "dead", "bounds", "mail", "--max-count", "500", "--max-age", "30d") == (
        "kept: at most 500 for 30 days\n")
    assert queue.dead_bounds().max_age_ms == 30 * DAY_MS
    assert cli(valkey, "dead", "bounds", "mail", "--max-age", "90m") == (
        "kept: at most 500 for 1 h 30 min\n")
    assert json.loads(cli(valkey, "dead", "bounds", "mail", "--max-count", "0", "--json")) == {
        "max_count": 0, "max_age_ms": 90 * 60_000}
    assert cli(valkey, "dead", "bounds", "mail", "--max-age", "default") == (
        "kept: any number for 180 days\n")
    bury(queue, 1)
    assert cli(valkey, "dead", "list", "mail").splitlines()[0] == "kept: any number for 180 days"


@pytest.mark.parametrize("option", [["--max-count", "-3"], ["--max-count", "1e3"],
                                    ["--max-age", "30 days"], ["--max-age", "1w"]])
def test_a_bad_bound_on_the_command_line_is_one_line_and_exit_2(
        valkey: EmbeddedValkey, conn: redis.Redis, option: list[str]) -> None:
    assert_one_error(echomq("dead", "bounds", "mail", *option, url=valkey.url), 2, option[0])
    assert not conn.exists("emq:{mail}:deadconf")


# the lockstep machine ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_lockstep_machine_trims_dead_jobs_over_a_lowered_bound(valkey: EmbeddedValkey,
                                                                  protocol: int) -> None:
    """Two jobs die (a retry at the last attempt); the operator lowers the bounds; trim_dead on
    both executors and the model, in lockstep, takes the one over the count, then the one past
    its age on the machine's clock, each with its row and ended key."""
    from echomq.engine.transitions import RETRY
    from tests.stateful_world import POOL, key
    from tests.test_stateful import QueueMachine, status

    machine = QueueMachine(valkey.port, protocol)
    try:
        for job_id in POOL[:2]:
            machine.enqueue_id(job_id, b"p")
            assert machine.claim_one(1_000) == job_id
            fence = machine.fences[job_id][-1]
            argv = [4, key(b"active"), key(b"delayed"), key(b"dead"), key(b"job", job_id),
                    job_id, fence, 0, 1, b"boom", machine.now]
            assert machine.fenced(RETRY, job_id, fence, argv) == status("DEAD")
            machine.now += 10
        machine.lower_dead_bounds(b"1", b"0")
        assert machine.trimmed(1_000) == (b":1\r\n", {POOL[0]})
        assert machine.zmembers(b"dead") == [POOL[1]]
        assert machine.model.kind(key(b"job", POOL[0])) == b"none"
        machine.now += 1_000
        machine.lower_dead_bounds(b"0", b"1000")
        assert machine.trimmed(1_000) == (b":1\r\n", {POOL[1]})
        assert machine.zmembers(b"dead") == []
        machine.keyspaces_agree()
    finally:
        machine.teardown()
