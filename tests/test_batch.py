"""Batched transitions from Python on both wires: a worker's round (settle), a plain batched
claim, a heartbeat for many leases — and one round trip where single verbs take 2N."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import given, strategies as st

import echomq.aio
from echomq import Ack, ArgumentError, Job, KindError, Queue, Release, Retry, Verdict
from echomq.embedded import EmbeddedValkey

NOW = 1_700_000_000_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Iterator[Queue]:
    yield Queue(conn, "batch", wire=request.param, max_attempts=3)


def fill(queue: Queue, n: int) -> None:
    queue.enqueue_many([(f"JOB:{i}", f"p{i}") for i in range(n)], now=NOW)


def round_trips(conn: redis.Redis) -> dict[str, int]:
    """Transitions sent since the last CONFIG RESETSTAT, per command: EVALSHA or EMQ.* (the
    commands a script runs inside are counted apart by the server, and left out here)."""
    stats = conn.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items()
            if name == "cmdstat_evalsha" or name.startswith("cmdstat_emq.")}


def test_claim_many_leases_oldest_first_each_its_own_fence(queue: Queue) -> None:
    fill(queue, 5)
    jobs = queue.claim_many(3, lease_ms=1_000, now=NOW + 1)
    assert jobs == [Job(f"JOB:{i}", f"p{i}".encode(), 1, fence=i + 1) for i in range(3)]
    assert [queue.conn.zscore(queue.key("active"), job.id) for job in jobs] == [NOW + 1_001] * 3
    assert [job.fence for job in queue.claim_many(10, now=NOW + 2)] == [4, 5]
    assert queue.claim_many(10, now=NOW + 3) == []


def test_settle_acks_retries_and_claims_in_one_call(queue: Queue) -> None:
    fill(queue, 4)
    first = queue.claim_many(2, now=NOW)
    verdicts, jobs = queue.settle([Ack(first[0]), Retry(first[1], delay_ms=500, error="boom")],
                                  claim=2, now=NOW + 10)
    assert verdicts == [Verdict.ACKED, Verdict.RETRYING]
    assert [job.id for job in jobs] == ["JOB:2", "JOB:3"]
    assert queue.conn.zscore(queue.key("delayed"), "JOB:1") == NOW + 510
    assert queue.conn.hget(queue.key("job", "JOB:1"), "error") == b"boom"
    assert queue.counts() == {"pending": 0, "active": 2, "delayed": 1, "dead": 0, "lanes": 0}


def test_stale_outcomes_are_verdicts_not_errors(queue: Queue) -> None:
    fill(queue, 2)
    job, other = queue.claim_many(2, now=NOW)
    outdated = Job(job.id, job.payload, job.attempt, fence=job.fence + 10)
    verdicts, jobs = queue.settle([Ack(outdated), Ack(other), Ack(other), Retry(job, error="x")])
    # the second ack of ``other`` is the first's replay: ACKED, changing nothing
    assert verdicts == [Verdict.STALE, Verdict.ACKED, Verdict.ACKED, Verdict.RETRYING]
    assert jobs == []


def test_retry_inside_a_batch_ends_dead_at_max_attempts(queue: Queue) -> None:
    fill(queue, 1)
    (job,) = queue.claim_many(1, now=NOW)
    verdicts, _ = queue.settle([Retry(job, error="spent", max_attempts=1)], now=NOW + 1)
    assert verdicts == [Verdict.DEAD]
    assert queue.conn.zscore(queue.key("dead"), "JOB:0") == NOW + 1


def test_release_hands_leases_back_unrun(queue: Queue) -> None:
    """A released job is pending again at once where it was, its attempt uncounted; its fence
    is never handed out again, and its old holder's lease is stale."""
    fill(queue, 3)
    jobs = queue.claim_many(3, now=NOW + 5)
    queue.conn.delete(queue.key("wake"))
    verdicts, claimed = queue.settle([Release(jobs[0]), Ack(jobs[1]), Release(jobs[0]),
                                      Release(jobs[2])], claim=3, now=NOW + 10)
    assert verdicts == [Verdict.RELEASED, Verdict.ACKED, Verdict.STALE, Verdict.RELEASED]
    assert claimed == []  # what a call releases, it does not claim
    assert queue.conn.zrange(queue.key("pending"), 0, -1, withscores=True) == [
        (b"JOB:0", NOW), (b"JOB:2", NOW)]
    assert queue.conn.zcard(queue.key("active")) == 0
    assert queue.conn.hget(queue.key("job", "JOB:0"), "a") == b"0"
    assert queue.conn.llen(queue.key("wake")) == 2
    again = queue.claim_many(3, now=NOW + 20)
    assert [(job.id, job.attempt, job.fence) for job in again] == [("JOB:0", 1, 4), ("JOB:2", 1, 5)]
    assert queue.settle([Ack(jobs[0])])[0] == [Verdict.STALE]


def test_release_puts_a_lane_job_back_at_its_lanes_head(conn: redis.Redis) -> None:
    queue = Queue(conn, "batch", wire=5)
    queue.enqueue("JOB:a1", "1", lane="a", now=NOW)
    queue.enqueue("JOB:a2", "2", lane="a", now=NOW)
    job = queue.claim_lane(now=NOW)
    assert job is not None and job.id == "JOB:a1"
    for wire in (5, 6):  # released by either executor: the lane's order is kept
        verdicts, _ = Queue(conn, "batch", wire=wire).settle([Release(job)], now=NOW)
        assert verdicts == [Verdict.RELEASED]
        assert conn.lrange(queue.key("lane", lane="a"), 0, -1) == [b"JOB:a1", b"JOB:a2"]
        job = queue.claim_lane(now=NOW)
        assert job is not None and (job.id, job.attempt) == ("JOB:a1", 1)


def test_extend_many_pushes_current_leases_only(queue: Queue) -> None:
    fill(queue, 2)
    job, other = queue.claim_many(2, lease_ms=1_000, now=NOW)
    queue.ack(other)
    assert queue.extend_many([job, other], lease_ms=5_000, now=NOW + 100) == [
        Verdict.EXTENDED, Verdict.STALE]
    assert queue.conn.zscore(queue.key("active"), job.id) == NOW + 5_100
    assert queue.extend_many([]) == []


def test_one_settle_round_trip_replaces_two_per_job(queue: Queue) -> None:
    """N single claims and N single acks are 2N commands; the batched round is one."""
    n = 16
    fill(queue, 2 * n + 1)
    warm = queue.claim(now=NOW)  # scripts loaded: no NOSCRIPT round trip is counted below
    assert warm is not None and queue.ack(warm) is Verdict.ACKED
    jobs = queue.claim_many(n, now=NOW)
    queue.conn.config_resetstat()
    for job in jobs:
        queue.ack(job)
        queue.claim(now=NOW + 1)
    singles = round_trips(queue.conn)
    held = queue_active(queue)
    queue.conn.config_resetstat()
    verdicts, claimed = queue.settle([Ack(job) for job in held], claim=n, now=NOW + 2)
    batched = round_trips(queue.conn)
    assert sum(singles.values()) == 2 * n
    assert batched == {"cmdstat_evalsha" if queue.wire == 5 else "cmdstat_emq.settle": 1}
    assert verdicts == [Verdict.ACKED] * n and claimed == []


def queue_active(queue: Queue) -> list[Job]:
    """The current leases, as a worker that holds them would know them."""
    ids = [member.decode() for member in queue.conn.zrange(queue.key("active"), 0, -1)]
    return [Job(job_id, b"", 1, fence=int(queue.conn.hget(queue.key("job", job_id), "f")))
            for job_id in ids]


def test_bad_outcomes_are_refused_before_sending(queue: Queue) -> None:
    fill(queue, 1)
    (job,) = queue.claim_many(1, now=NOW)
    queue.conn.config_resetstat()
    for bad, error in [
        ([Ack(Job("job:1", b"", 1, fence=1))], KindError),
        ([Ack(job), Ack(Job(job.id, b"", 1, fence=0))], ArgumentError),
        ([Retry(job, delay_ms=-1)], ArgumentError),
        ([Retry(job, max_attempts=0)], ArgumentError),
    ]:
        with pytest.raises(error):
            queue.settle(bad)
    with pytest.raises(TypeError):
        queue.settle([job])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        queue.settle([Retry(job, error=None)])  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="count"):
        queue.claim_many(0)
    with pytest.raises(ArgumentError, match="count"):
        queue.settle([], claim=-1)
    with pytest.raises(KindError):
        queue.extend_many([Job("JOB:", b"", 1, fence=1)])
    assert round_trips(queue.conn) == {}
    assert queue.counts()["active"] == 1


@pytest.mark.parametrize("wire", [5, 6])
def test_asyncio_queue_has_the_same_batches(valkey: EmbeddedValkey, wire: int) -> None:
    async def body() -> tuple[list[Verdict], list[Job], list[Verdict]]:
        client = aredis.Redis(host="127.0.0.1", port=valkey.port)
        try:
            await client.flushall()
            queue = echomq.aio.Queue(client, "batch", wire=wire)
            await queue.enqueue_many([("JOB:1", b"a"), ("JOB:2", b"b"), ("JOB:3", b"c")],
                                     now=NOW)
            first = await queue.claim_many(2, now=NOW)
            extended = await queue.extend_many(first, lease_ms=10, now=NOW)
            verdicts, jobs = await queue.settle([Ack(first[0]), Retry(first[1])], claim=5,
                                                now=NOW)
            return verdicts, jobs, extended
        finally:
            await client.aclose()

    verdicts, jobs, extended = asyncio.run(body())
    assert extended == [Verdict.EXTENDED, Verdict.EXTENDED]
    assert verdicts == [Verdict.ACKED, Verdict.RETRYING]
    assert jobs == [Job("JOB:3", b"c", 1, fence=3)]


def script_calls(conn: redis.Redis) -> tuple[int, int]:
    """(SCRIPT LOAD, EVALSHA) calls since the last CONFIG RESETSTAT."""
    stats = conn.info("commandstats")
    return (int(stats.get("cmdstat_script|load", {}).get("calls", 0)),
            int(stats.get("cmdstat_evalsha", {}).get("calls", 0)))


def test_enqueue_many_loads_no_script_on_a_warm_server(conn: redis.Redis) -> None:
    """A batch is one EVALSHA only; a server that lost its scripts gets one load and the failed
    call sent again."""
    queue = Queue(conn, "batch", wire=5)
    queue.enqueue_many([("JOB:warm", "w")], now=NOW)
    conn.config_resetstat()
    for batch in range(3):
        queue.enqueue_many([(f"JOB:{batch}.{i}", "p") for i in range(4)], now=NOW)
    assert script_calls(conn) == (0, 3)
    conn.script_flush()
    conn.config_resetstat()
    verdicts = queue.enqueue_many([(f"JOB:f{i}", "p") for i in range(5)], now=NOW)
    assert verdicts == [Verdict.ENQUEUED] * 5
    assert script_calls(conn) == (1, 2)
    assert queue.counts()["pending"] == 18


def test_asyncio_enqueue_many_loads_no_script_on_a_warm_server(valkey: EmbeddedValkey,
                                                               conn: redis.Redis) -> None:
    async def body() -> list[Verdict]:
        client = aredis.Redis(host="127.0.0.1", port=valkey.port)
        try:
            queue = echomq.aio.Queue(client, "batch", wire=5)
            await queue.enqueue_many([("JOB:warm", "w")], now=NOW)
            await client.config_resetstat()
            for batch in range(3):
                await queue.enqueue_many([(f"JOB:{batch}.{i}", "p") for i in range(4)], now=NOW)
            assert script_calls(conn) == (0, 3)
            await client.script_flush()
            await client.config_resetstat()
            return await queue.enqueue_many([(f"JOB:f{i}", "p") for i in range(5)], now=NOW)
        finally:
            await client.aclose()

    assert asyncio.run(body()) == [Verdict.ENQUEUED] * 5
    assert script_calls(conn) == (1, 2)


@given(value=st.one_of(st.integers(-10, 10**16), st.sampled_from([
    0, 1, 999_999_999_999_999, 10**15, -1, True, False])), minimum=st.sampled_from([0, 1]))
def test_checked_int_takes_a_plain_int_exactly_as_the_c_rule_does(value: int,
                                                                  minimum: int) -> None:
    """checked_int answers a plain int in range without calling into C: the same answer."""
    from echomq._core import ffi, lib

    from echomq.engine.native import checked_int

    text = str(value) if type(value) is int else ""
    accepted = bool(lib.emq_parse_int(text.encode(), len(text), minimum, ffi.new("long long *")))
    try:
        assert checked_int("n", value, minimum) == text and accepted
    except ArgumentError:
        assert not accepted
