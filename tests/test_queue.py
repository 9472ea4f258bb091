"""The Python client on both wires: verdicts, leases, fencing, batching, script reloads."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from echomq import (
    ArgumentError,
    Job,
    KindError,
    Queue,
    StaleLease,
    Verdict,
    Wire6Unsupported,
    new_job_id,
)
from echomq.aio import Queue as AsyncQueue
from echomq.engine.clients import async_twin
from echomq.engine.executors import NativeExecutor, executor_for
from echomq.engine.native import id_ok
from echomq.engine.transitions import Transition
from echomq.queue.connection import client_like

NOW = 1_700_000_000_000


@pytest.fixture
def conn(library_conn: Any) -> Any:
    """Every test here runs on a redis-py client and on a valkey-py one."""
    return library_conn


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Iterator[Queue]:
    yield Queue(conn, "emails", wire=request.param)


def commands_sent(conn: redis.Redis) -> int:
    stats = conn.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def test_enqueue_admits_once(queue: Queue) -> None:
    assert queue.enqueue("JOB:1", b"hello", now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:1", b"other", now=NOW + 1) is Verdict.DUPLICATE
    assert queue.conn.hget(queue.key("job", "JOB:1"), "p") == b"hello"
    assert queue.counts() == {"pending": 1, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}


def test_bad_id_is_refused_before_sending(queue: Queue) -> None:
    before = commands_sent(queue.conn)
    with pytest.raises(KindError, match=r"^EMQKIND "):
        queue.enqueue("job:1", b"x")
    with pytest.raises(KindError):
        queue.enqueue_many([("JOB:ok", b"x"), ("JOB:", b"y")])
    assert commands_sent(queue.conn) == before
    assert queue.conn.dbsize() == 0


def test_client_checks_say_what_the_server_says(queue: Queue) -> None:
    with pytest.raises(ArgumentError) as client_side:
        queue.claim(lease_ms=0)
    keys = [queue.key("pending"), queue.key("active"), queue.key("fence")]
    with pytest.raises(ArgumentError) as server_side:
        queue.executor.call(queue.conn, executor_transition("claim"), keys, ["0", "*"])
    assert str(client_side.value) == str(server_side.value)


def executor_transition(name: str) -> Transition:
    from echomq.engine.transitions import TRANSITIONS

    return next(t for t in TRANSITIONS if t.name == name)


def test_claim_ack_lifecycle(queue: Queue) -> None:
    queue.enqueue("JOB:b", b"second", now=NOW + 1)
    queue.enqueue("JOB:a", b"first", now=NOW)
    job = queue.claim(lease_ms=1_000, now=NOW + 2)
    assert job == Job("JOB:a", b"first", 1, fence=1)
    assert queue.conn.zscore(queue.key("active"), "JOB:a") == NOW + 1_002
    assert queue.ack(job, retention_ms=60_000) is Verdict.ACKED
    assert queue.enqueue("JOB:a", b"again") is Verdict.DUPLICATE  # the tombstone holds
    assert 0 < queue.conn.pttl(queue.key("job", "JOB:a")) <= 60_000
    assert queue.claim(now=NOW + 3) == Job("JOB:b", b"second", 1, fence=2)
    assert queue.claim(now=NOW + 4) is None


def test_ack_without_retention_deletes_the_row(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"x", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    queue.ack(job, retention_ms=0)
    assert not queue.conn.exists(queue.key("job", "JOB:1"))
    assert queue.enqueue("JOB:1", b"x", now=NOW) is Verdict.ENQUEUED


def test_fencing_refuses_an_old_lease(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"x", now=NOW)
    first = queue.claim(lease_ms=100, now=NOW)
    assert first is not None
    assert queue.recover(now=NOW + 100) == 1
    second = queue.claim(lease_ms=100, now=NOW + 101)
    assert second == Job("JOB:1", b"x", 2, fence=2)
    for late_call in (queue.ack, queue.extend, queue.retry):
        with pytest.raises(StaleLease):
            late_call(first)
    assert queue.extend(second, lease_ms=500, now=NOW + 102) is Verdict.EXTENDED
    assert queue.conn.zscore(queue.key("active"), "JOB:1") == NOW + 602
    assert queue.ack(second) is Verdict.ACKED


def test_retry_then_dead(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"x", now=NOW)
    for attempt in (1, 2):
        job = queue.claim(now=NOW + attempt * 10)
        assert job is not None and job.attempt == attempt
        verdict = queue.retry(job, delay_ms=5, error=f"boom {attempt}", max_attempts=3,
                              now=NOW + attempt * 10)
        assert verdict is Verdict.RETRYING
        assert queue.promote(now=NOW + attempt * 10 + 4) == 0
        assert queue.promote(now=NOW + attempt * 10 + 5) == 1
    job = queue.claim(now=NOW + 100)
    assert job is not None
    assert queue.retry(job, error="last", max_attempts=3, now=NOW + 100) is Verdict.DEAD
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 1, "lanes": 0}
    assert queue.conn.hget(queue.key("job", "JOB:1"), "error") == b"last"


def test_recover_returns_expired_leases_to_their_place(queue: Queue) -> None:
    queue.enqueue_many([("JOB:1", b"a"), ("JOB:2", b"b")], now=NOW)
    queue.enqueue("JOB:3", b"c", now=NOW + 5)
    first = queue.claim(lease_ms=10, now=NOW + 6)
    assert first is not None and first.id == "JOB:1"
    assert queue.recover(now=NOW + 15) == 0
    assert queue.recover(now=NOW + 16) == 1
    assert queue.conn.zscore(queue.key("pending"), "JOB:1") == NOW
    assert queue.claim(now=NOW + 17) == Job("JOB:1", b"a", 2, fence=2)


def test_enqueue_many_is_one_flush_with_a_verdict_each(queue: Queue) -> None:
    queue.enqueue("JOB:2", b"old", now=NOW)
    verdicts = queue.enqueue_many([("JOB:1", b"a"), ("JOB:2", b"b"), ("JOB:3", b"c")], now=NOW)
    assert verdicts == [Verdict.ENQUEUED, Verdict.DUPLICATE, Verdict.ENQUEUED]
    assert queue.counts()["pending"] == 3


def test_scripts_reload_after_flush(conn: redis.Redis) -> None:
    queue = Queue(conn, "q", wire=5)
    queue.enqueue("JOB:1", b"x", now=NOW)
    conn.script_flush()
    assert queue.enqueue("JOB:2", b"y", now=NOW) is Verdict.ENQUEUED
    conn.script_flush()
    assert queue.enqueue_many([("JOB:3", b"z")], now=NOW) == [Verdict.ENQUEUED]
    assert queue.counts()["pending"] == 3


def test_wire6_refuses_a_script_only_transition_before_sending(conn: redis.Redis) -> None:
    script_only = Transition("scripted", ("ring",), ("lease_ms", "now"), None)
    before = commands_sent(conn)
    with pytest.raises(Wire6Unsupported) as refused:
        NativeExecutor().call(conn, script_only, ["emq:{q}:ring"], ["1", "*"])
    assert refused.value.name == "scripted"
    assert commands_sent(conn) == before


def test_unknown_wire_is_refused() -> None:
    with pytest.raises(ValueError, match="wire"):
        executor_for(7)


def test_job_ids_are_gated_and_time_sortable() -> None:
    ids = [new_job_id() for _ in range(50)]
    assert all(id_ok(job_id) for job_id in ids)
    assert len(set(ids)) == 50


def test_queue_names_with_braces_are_refused(conn: redis.Redis) -> None:
    with pytest.raises(ValueError):
        Queue(conn, "a}b")


def test_an_evicting_server_is_warned_about_at_the_first_command(conn: redis.Redis) -> None:
    """Once per client: the queue made asks nothing; its first command warns (one CONFIG GET);
    neither its next command nor another queue's on the same client asks again; a queue on
    another client asks again."""
    import warnings

    from echomq import EvictionPolicyWarning

    conn.config_set("maxmemory-policy", "allkeys-lru")
    other = client_like(conn)  # a client of its own, to the same server
    try:
        before = policy_asked(conn)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            queue = Queue(conn, "q")
        assert policy_asked(conn) == before
        with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
            queue.counts()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            queue.counts()
            Queue(conn, "other").counts()
        assert policy_asked(conn) == before + 1
        with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
            Queue(other, "q").counts()
        assert policy_asked(conn) == before + 2
    finally:
        conn.config_set("maxmemory-policy", "noeviction")
        other.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Queue(conn, "q").counts()


def policy_asked(conn: redis.Redis) -> int:
    """How many times the server was asked its eviction policy (``CONFIG GET``)."""
    return int(conn.info("commandstats").get("cmdstat_config|get", {}).get("calls", 0))


def test_a_fence_never_repeats_after_readmission(queue: Queue) -> None:
    """An id acked without retention and admitted again gets a lease the stalled old holder
    cannot settle: its ack is stale and the new holder's ack goes through."""
    queue.enqueue("JOB:1", b"first", now=NOW)
    stalled = queue.claim(lease_ms=10, now=NOW)
    assert stalled is not None
    queue.ack(stalled, retention_ms=0)
    queue.enqueue("JOB:1", b"second", now=NOW + 1)
    current = queue.claim(lease_ms=10_000, now=NOW + 2)
    assert current is not None and current.attempt == stalled.attempt
    with pytest.raises(StaleLease):
        queue.ack(stalled, retention_ms=0)
    assert queue.retry(current, error="boom", now=NOW + 3) is Verdict.RETRYING


def test_a_fence_never_repeats_after_requeue(queue: Queue) -> None:
    """A dead job requeued starts its attempts afresh; the holder of its first lease, stalled
    all along, cannot settle the new first attempt."""
    from echomq.ops.admin import requeue

    queue.enqueue("JOB:1", b"x", now=NOW)
    stalled = queue.claim(lease_ms=10, now=NOW)
    assert stalled is not None
    assert queue.recover(now=NOW + 10) == 1
    second = queue.claim(lease_ms=10, now=NOW + 11)
    assert second is not None
    assert queue.retry(second, error="boom", max_attempts=2, now=NOW + 12) is Verdict.DEAD
    assert requeue(queue.conn, queue.name, "JOB:1", now=NOW + 13)
    current = queue.claim(lease_ms=10_000, now=NOW + 14)
    assert current is not None and current.attempt == stalled.attempt
    with pytest.raises(StaleLease):
        queue.ack(stalled, retention_ms=0)
    assert queue.ack(current, retention_ms=0) is Verdict.ACKED


def test_a_job_that_kills_its_worker_ends_dead(queue: Queue) -> None:
    """Every attempt counts, crashed ones too: with max_attempts=3 a job whose worker dies at
    every attempt is dead after the third lease expires, with an error that says so."""
    poison = Queue(queue.conn, queue.name, wire=queue.wire, max_attempts=3)
    poison.enqueue("JOB:1", b"x", now=NOW)
    clock = NOW
    for _ in range(20):
        clock += 100
        if poison.claim(lease_ms=10, now=clock) is None:
            break
        poison.recover(now=clock + 10)
    assert poison.counts()["dead"] == 1
    row = poison.conn.hgetall(poison.key("job", "JOB:1"))
    assert row[b"a"] == b"3"
    assert row[b"error"] == b"lease expired during attempt 3: the worker was lost"
    assert poison.conn.llen(poison.key("wake")) == 3  # the enqueue's and two recoveries'


@pytest.mark.parametrize("payload", [{"a": 1}, None, 7, ["x"]])
def test_a_payload_that_is_not_bytes_or_text_is_refused(queue: Queue, payload: object) -> None:
    before = commands_sent(queue.conn)
    with pytest.raises(TypeError):
        queue.enqueue("JOB:1", payload)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        queue.enqueue_many([("JOB:2", b"ok"), ("JOB:3", payload)])  # type: ignore[list-item]
    assert commands_sent(queue.conn) == before
    assert queue.conn.dbsize() == 0


@pytest.mark.parametrize("payload", [bytearray(b"ab\x00"), memoryview(b"ab\x00"), b"ab\x00"])
def test_a_bytes_like_payload_is_stored_as_its_bytes(queue: Queue, payload: object) -> None:
    assert queue.enqueue("JOB:1", payload, now=NOW) is Verdict.ENQUEUED  # type: ignore[arg-type]
    job = queue.claim(now=NOW)
    assert job is not None and job.payload == b"ab\x00"


def test_a_retry_error_that_is_not_bytes_or_text_is_refused(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"x", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    with pytest.raises(TypeError):
        queue.retry(job, error=ValueError("boom"), now=NOW)  # type: ignore[arg-type]
    assert queue.retry(job, error=bytearray(b"boom"), now=NOW) is Verdict.RETRYING
    assert queue.conn.hget(queue.key("job", "JOB:1"), "error") == b"boom"


def test_async_recover_takes_max_attempts_too(queue: Queue) -> None:
    """echomq.aio.Queue.recover: the queue's max_attempts by default, or the one given."""


    async def crash_twice() -> tuple[int, int]:
        client = async_twin(queue.conn)
        try:
            spent = AsyncQueue(client, "poison", wire=queue.wire, max_attempts=1)
            await spent.enqueue("JOB:1", b"x", now=NOW)
            await spent.enqueue("JOB:2", b"x", now=NOW)
            await spent.claim(lease_ms=10, now=NOW)
            await spent.claim(lease_ms=10, now=NOW)
            return (await spent.recover(now=NOW + 10, limit=1, max_attempts=2),
                    await spent.recover(now=NOW + 10))
        finally:
            await client.aclose()

    assert asyncio.run(crash_twice()) == (1, 1)
    poison = Queue(queue.conn, "poison")
    assert poison.counts() == {"pending": 1, "active": 0, "delayed": 0, "dead": 1, "lanes": 0}
    assert queue.conn.zrange(poison.key("dead"), 0, -1) == [b"JOB:2"]


def test_recover_due_takes_a_backlog_in_short_steps_on_both_queues(queue: Queue) -> None:
    """Over two steps' worth of expired leases and due retries: one call takes them all, each
    recover and promote call at most HOUSEKEEPING_STEP jobs — the asyncio Queue likewise."""
    from echomq.queue.bounds import HOUSEKEEPING_STEP

    total = 2 * HOUSEKEEPING_STEP + 5

    def backlog(name: str) -> None:
        target = Queue(queue.conn, name, wire=queue.wire)
        target.enqueue_many([(f"JOB:{n}", b"p") for n in range(total)], now=NOW)
        while target.claim_many(HOUSEKEEPING_STEP, lease_ms=10, now=NOW):
            pass

    backlog("emails")
    assert queue.recover_due(now=NOW + 11) == (total, 0, 0, 0)
    assert queue.counts()["active"] == 0 and queue.counts()["pending"] == total

    backlog("emails-async")

    async def recovered_async() -> tuple[int, ...]:
        client = async_twin(queue.conn)
        try:
            return await AsyncQueue(client, "emails-async", wire=queue.wire).recover_due(
                now=NOW + 11)
        finally:
            await client.aclose()

    assert asyncio.run(recovered_async()) == (total, 0, 0, 0)


def test_recover_due_promotes_a_backlog_of_due_jobs_in_short_steps_on_both_queues(
        queue: Queue) -> None:
    """Over two steps' worth of delayed jobs fallen due: one call promotes them all, in
    promote calls of at most HOUSEKEEPING_STEP jobs (three here) — the asyncio Queue likewise."""
    from echomq.queue.bounds import HOUSEKEEPING_STEP

    total = 2 * HOUSEKEEPING_STEP + 5

    def backlog(name: str) -> None:
        target = Queue(queue.conn, name, wire=queue.wire)
        target.enqueue_many([(f"JOB:{n}", b"p") for n in range(total)], now=NOW, delay_ms=10)
        assert target.counts()["delayed"] == total

    def promote_calls() -> int:
        name = "cmdstat_emq.promote" if queue.wire == 6 else "cmdstat_evalsha"
        return int(queue.conn.info("commandstats").get(name, {"calls": 0})["calls"])

    backlog("emails")
    before = promote_calls()
    assert queue.recover_due(now=NOW + 10, trim=False) == (0, total, 0, 0)
    assert queue.counts() == {"pending": total, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}
    if queue.wire == 6:
        assert promote_calls() - before == 3  # 1000, 1000, then 5: less than a step, done

    backlog("emails-async")

    async def promoted_async() -> tuple[int, ...]:
        client = async_twin(queue.conn)
        try:
            return await AsyncQueue(client, "emails-async", wire=queue.wire).recover_due(
                now=NOW + 10, trim=False)
        finally:
            await client.aclose()

    assert asyncio.run(promoted_async()) == (0, total, 0, 0)
    assert Queue(queue.conn, "emails-async").counts()["pending"] == total
