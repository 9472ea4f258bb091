"""The Python client on both wires: verdicts, leases, fencing, batching, script reloads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import redis

from echomq import (
    Ack,
    ArgumentError,
    Job,
    JobOutcome,
    KindError,
    LaneError,
    Queue,
    Retry,
    StaleLease,
    Verdict,
    Wire6Unsupported,
    new_job_id,
)
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.engine.calls import MAX_RESULT_BYTES
from echomq.engine.clients import async_twin
from echomq.engine.executors import NativeExecutor, executor_for
from echomq.engine.native import id_ok
from echomq.engine.transitions import SCRIPT_ONLY, Transition
from echomq.ops import admin

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
    assert queue.conn.hget(queue.key("job", "JOB:1"), "payload") == b"hello"
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


def test_an_evicting_server_is_warned_about(conn: redis.Redis) -> None:
    from echomq import EvictionPolicyWarning

    conn.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with pytest.warns(EvictionPolicyWarning, match="allkeys-lru"):
            Queue(conn, "q")
    finally:
        conn.config_set("maxmemory-policy", "noeviction")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Queue(conn, "q")


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
    assert row[b"attempts"] == b"3"
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
    import asyncio

    from echomq.aio import Queue as AsyncQueue

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


# ---- results kept by the ack ------------------------------------------------------------------


def test_ack_with_a_result_keeps_it_in_the_tombstone(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"payload", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    assert queue.ack(job, result=b"\x00forty-two\r\n", retention_ms=60_000) is Verdict.ACKED
    row = queue.key("job", "JOB:1")
    assert queue.conn.hget(row, "result") == b"\x00forty-two\r\n"
    assert queue.conn.hget(row, "payload") is None
    assert 0 < queue.conn.pttl(row) <= 60_000
    ended = queue.key("ended", "JOB:1")  # its waiters' token expires with the tombstone
    assert queue.conn.lrange(ended, 0, -1) == [b"1"]
    expiry = [queue.conn.execute_command("PEXPIRETIME", key) for key in (row, ended)]
    assert expiry[0] == expiry[1] > 0
    assert queue.counts()["active"] == 0
    # The same ack again (a reply lost) is a replay: ACKED, the result it kept untouched.
    assert queue.ack(job, result=b"again") is Verdict.ACKED
    assert queue.conn.hget(row, "result") == b"\x00forty-two\r\n"


def test_ack_without_a_result_sends_the_plain_ack(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"payload", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    transition, _keys, args = queue.calls.ack(job, None)
    assert transition.name == "ack" and len(args) == 3
    assert queue.ack(job) is Verdict.ACKED
    assert queue.conn.hget(queue.key("job", "JOB:1"), "result") is None


def test_settle_keeps_the_results_of_its_acks(queue: Queue) -> None:
    for n in (1, 2, 3):
        queue.enqueue(f"JOB:{n}", b"p", now=NOW + n)
    one, two, three = queue.claim_many(3, now=NOW)
    verdicts, _ = queue.settle([Ack(one, result=b"first"), Ack(two), Ack(three, result=b"")])
    assert verdicts == [Verdict.ACKED] * 3
    results = [queue.conn.hget(queue.key("job", f"JOB:{n}"), "result") for n in (1, 2, 3)]
    assert results == [b"first", None, b""]


def test_a_result_over_the_cap_is_refused_before_sending(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    before = commands_sent(queue.conn)
    too_long = b"r" * (MAX_RESULT_BYTES + 1)
    with pytest.raises(ArgumentError) as client_side:
        queue.ack(job, result=too_long)
    with pytest.raises(ArgumentError):
        queue.settle([Ack(job), Ack(job, result=too_long)])
    with pytest.raises(ArgumentError):
        queue.settle_leased([Ack(job, result=too_long)], 0, 30_000, None, None)
    assert commands_sent(queue.conn) == before
    keys = [queue.key("active"), queue.key("job", "JOB:1")]
    with pytest.raises(ArgumentError) as server_side:
        queue.executor.call(queue.conn, executor_transition("ack_result"), keys,
                            ["JOB:1", str(job.fence), "1000", too_long])
    assert str(client_side.value) == str(server_side.value)
    assert queue.ack(job, result=b"r" * MAX_RESULT_BYTES) is Verdict.ACKED


# ---- delayed admission ------------------------------------------------------------------------


def test_enqueue_with_a_delay_waits_in_delayed_until_promoted(queue: Queue) -> None:
    assert queue.enqueue("JOB:1", b"later", delay_ms=5_000, now=NOW) is Verdict.ENQUEUED
    assert queue.conn.zscore(queue.key("delayed"), "JOB:1") == NOW + 5_000
    assert queue.claim(now=NOW + 10_000) is None
    assert queue.promote(now=NOW + 4_999) == 0
    assert queue.promote(now=NOW + 5_000) == 1
    job = queue.claim(now=NOW + 5_000)
    assert job is not None and (job.id, job.payload, job.attempt) == ("JOB:1", b"later", 1)


def test_delayed_enqueue_is_idempotent(queue: Queue) -> None:
    assert queue.enqueue("JOB:1", b"a", delay_ms=5_000, now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:1", b"b", delay_ms=1, now=NOW) is Verdict.DUPLICATE
    assert queue.enqueue("JOB:1", b"c", now=NOW) is Verdict.DUPLICATE
    queue.enqueue("JOB:2", b"now", now=NOW)
    assert queue.enqueue("JOB:2", b"later", at_ms=NOW + 9, now=NOW) is Verdict.DUPLICATE
    assert queue.conn.zscore(queue.key("delayed"), "JOB:1") == NOW + 5_000
    assert queue.counts() == {"pending": 1, "active": 0, "delayed": 1, "dead": 0, "lanes": 0}


def test_enqueue_at_runs_at_the_later_of_the_delay_and_the_time(queue: Queue) -> None:
    queue.enqueue("JOB:at", b"p", at_ms=NOW + 60_000, now=NOW)
    queue.enqueue("JOB:past", b"p", at_ms=NOW - 60_000, now=NOW)
    queue.enqueue("JOB:both", b"p", delay_ms=10, at_ms=NOW + 5, now=NOW)
    delayed = dict(queue.conn.zrange(queue.key("delayed"), 0, -1, withscores=True))
    assert delayed == {b"JOB:past": NOW, b"JOB:both": NOW + 10, b"JOB:at": NOW + 60_000}


def test_enqueue_at_on_the_servers_clock(queue: Queue) -> None:
    seconds, micros = queue.conn.time()
    server_now = seconds * 1000 + micros // 1000
    queue.enqueue("JOB:1", b"p", delay_ms=3_600_000)
    due = queue.conn.zscore(queue.key("delayed"), "JOB:1")
    assert due is not None and server_now + 3_600_000 <= due < server_now + 3_660_000


def test_a_bad_delay_is_refused_before_sending(queue: Queue) -> None:
    before = commands_sent(queue.conn)
    with pytest.raises(ArgumentError, match=r"^EMQNUM delay_ms "):
        queue.enqueue("JOB:1", b"p", delay_ms=-1)
    with pytest.raises(ArgumentError, match=r"^EMQNUM at_ms "):
        queue.enqueue("JOB:1", b"p", at_ms=-5)
    assert commands_sent(queue.conn) == before


def test_a_delayed_lane_job_is_promoted_to_its_lane(conn: redis.Redis) -> None:
    queue = Queue(conn, "emails", wire=5)
    assert queue.enqueue("JOB:a1", b"p", lane="a", delay_ms=100, now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:a1", b"p", lane="a", now=NOW) is Verdict.DUPLICATE
    assert queue.lane_depths() == {}
    assert queue.promote(now=NOW + 100) == 1
    assert queue.lane_depths() == {"a": 1}
    job = queue.claim_lane(now=NOW + 100)
    assert job is not None and (job.id, job.lane) == ("JOB:a1", "a")


def test_a_delayed_lane_job_is_refused_on_wire6(conn: redis.Redis) -> None:
    with pytest.raises(Wire6Unsupported):
        Queue(conn, "emails", wire=6).enqueue("JOB:a1", b"p", lane="a", delay_ms=100)
    assert conn.dbsize() == 0


def test_the_async_queue_delays_and_keeps_results(conn: redis.Redis,
                                                   valkey: EmbeddedValkey) -> None:
    async def main() -> tuple[Any, Any]:
        client = async_twin(conn)
        try:
            queue = AsyncQueue(client, "emails", wire=6)
            await queue.enqueue("JOB:1", b"p", delay_ms=50, now=NOW)
            await queue.promote(now=NOW + 50)
            job = await queue.claim(now=NOW + 50)
            assert job is not None
            await queue.ack(job, result=b"ok")
            return (await client.hget(queue.key("job", "JOB:1"), "result"),
                    await client.zscore(queue.key("pending"), "JOB:1"))
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (b"ok", None)


# ---- outcomes and waiting ---------------------------------------------------------------------


def lease(queue: Queue, job_id: str, *, now: int = NOW) -> Job:
    queue.enqueue(job_id, b"p", now=now)
    job = queue.claim(now=now)
    assert job is not None and job.id == job_id
    return job


def test_outcome_names_every_state(queue: Queue) -> None:
    assert queue.outcome("JOB:none") == JobOutcome("unknown", None, None, 0)
    queue.enqueue("JOB:later", b"p", delay_ms=1_000, now=NOW)
    assert queue.outcome("JOB:later").state == "delayed"
    ran = lease(queue, "JOB:ran")
    assert queue.outcome("JOB:ran") == JobOutcome("active", None, None, 1)
    queue.ack(ran, result=b"\x00out")
    assert queue.outcome("JOB:ran") == JobOutcome("done", b"\x00out", None, 1)
    failed = lease(queue, "JOB:failed")
    queue.retry(failed, error="boom \xe9", max_attempts=1, now=NOW)
    assert queue.outcome("JOB:failed") == JobOutcome("dead", None, "boom \xe9", 1)
    plain = lease(queue, "JOB:plain")
    queue.ack(plain)
    assert queue.outcome("JOB:plain") == JobOutcome("done", None, None, 1)
    queue.enqueue("JOB:waiting", b"p", now=NOW + 5)
    assert queue.outcome("JOB:waiting") == JobOutcome("pending", None, None, 0)
    queue.conn.set(queue.key("job", "JOB:odd"), "x")
    assert queue.outcome("JOB:odd").state == "unknown"
    with pytest.raises(KindError):
        queue.outcome("job:1")


def test_outcome_of_a_lane_job_waiting_in_its_lane(conn: redis.Redis) -> None:
    queue = Queue(conn, "emails", wire=5)
    queue.enqueue("JOB:a1", b"p", lane="a", now=NOW)
    assert queue.outcome("JOB:a1") == JobOutcome("pending", None, None, 0)


def blocked_clients(conn: redis.Redis) -> int:
    return int(conn.info("clients")["blocked_clients"])


def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Returns once ``condition`` holds; fails the test when it does not within the bound."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def waiting_for(queue: Queue, job_id: str, waiters: int = 1) -> list[Future[JobOutcome]]:
    """``waiters`` threads blocked in ``queue.wait(job_id, 30)``, each on its own connection."""
    pool = ThreadPoolExecutor(waiters)
    conns = [type(queue.conn)(port=queue.conn.connection_pool.connection_kwargs["port"])
             for _ in range(waiters)]
    futures = [pool.submit(Queue(c, queue.name, wire=queue.wire, check_policy=False).wait,
                           job_id, 30.0) for c in conns]
    pool.shutdown(wait=False)
    until(lambda: blocked_clients(queue.conn) >= waiters)
    return futures


def test_wait_returns_at_once_when_the_job_has_ended(queue: Queue) -> None:
    queue.ack(lease(queue, "JOB:1"), result=b"r")
    started = time.monotonic()
    assert queue.wait("JOB:1", 30.0) == JobOutcome("done", b"r", None, 1)
    assert time.monotonic() - started < 5


def test_an_ack_keeping_a_result_wakes_every_waiter(queue: Queue) -> None:
    job = lease(queue, "JOB:1")
    futures = waiting_for(queue, "JOB:1", waiters=3)
    started = time.monotonic()
    queue.ack(job, result=b"42")
    outcomes = [future.result(timeout=10) for future in futures]
    assert outcomes == [JobOutcome("done", b"42", None, 1)] * 3
    assert time.monotonic() - started < 10
    ended = queue.key("ended", "JOB:1")
    assert queue.conn.lrange(ended, 0, -1) == [b"1"]
    assert 0 < queue.conn.pttl(ended) <= queue.retention_ms


def test_settle_wakes_the_waiters_of_its_done_and_dead_items(queue: Queue) -> None:
    one, two = lease(queue, "JOB:1"), lease(queue, "JOB:2")
    done, dead = waiting_for(queue, "JOB:1"), waiting_for(queue, "JOB:2", waiters=2)
    queue.settle([Ack(one, result=b"r"), Retry(two, error="gone", max_attempts=1)], now=NOW)
    assert done[0].result(timeout=10) == JobOutcome("done", b"r", None, 1)
    assert [f.result(timeout=10) for f in dead] == [JobOutcome("dead", None, "gone", 1)] * 2


def test_a_retry_to_dead_wakes_the_waiter(queue: Queue) -> None:
    job = lease(queue, "JOB:1")
    (future,) = waiting_for(queue, "JOB:1")
    queue.retry(job, error="no more", max_attempts=1, now=NOW)
    assert future.result(timeout=10) == JobOutcome("dead", None, "no more", 1)


def test_a_retry_that_runs_again_wakes_no_one(queue: Queue) -> None:
    job = lease(queue, "JOB:1")
    assert queue.retry(job, delay_ms=5, max_attempts=3, now=NOW) is Verdict.RETRYING
    assert queue.conn.exists(queue.key("ended", "JOB:1")) == 0


def test_recover_of_a_spent_lease_wakes_the_waiter(queue: Queue) -> None:
    lease(queue, "JOB:1")
    (future,) = waiting_for(queue, "JOB:1")
    assert queue.recover(now=NOW + 60_000, max_attempts=1) == 1
    outcome = future.result(timeout=10)
    assert (outcome.state, outcome.error) == (
        "dead", "lease expired during attempt 1: the worker was lost")


def test_wait_does_not_poll(queue: Queue) -> None:
    lease(queue, "JOB:1")
    before = commands_sent(queue.conn)
    started = time.monotonic()
    assert queue.wait("JOB:1", 0.5).state == "active"
    assert time.monotonic() - started >= 0.5
    # two outcome reads of seven commands, one BLMOVE (and the INFO of commands_sent)
    assert commands_sent(queue.conn) - before <= 16


def test_a_token_left_by_an_earlier_life_of_the_id_does_not_spin_the_waiter(
        queue: Queue) -> None:
    queue.conn.rpush(queue.key("ended", "JOB:1"), "1")
    queue.enqueue("JOB:1", b"p", now=NOW)
    before = commands_sent(queue.conn)
    assert queue.wait("JOB:1", 0.3).state == "pending"
    # woken once by the stale token (two reads, the BLMOVE, its DEL), then blocked to the end
    # (a read, the BLMOVE, the last read), and the INFO of commands_sent
    assert commands_sent(queue.conn) - before <= 32
    assert queue.conn.exists(queue.key("ended", "JOB:1")) == 0


def test_requeue_and_purge_take_the_token_with_the_dead_job(queue: Queue) -> None:
    for job_id in ("JOB:1", "JOB:2"):
        queue.retry(lease(queue, job_id), max_attempts=1, now=NOW)
        assert queue.conn.exists(queue.key("ended", job_id)) == 1
    assert admin.requeue(queue.conn, queue.name, "JOB:1", now=NOW)
    assert admin.purge(queue.conn, queue.name) == 1
    assert queue.conn.exists(queue.key("ended", "JOB:1"), queue.key("ended", "JOB:2")) == 0
    assert queue.outcome("JOB:1").state == "pending"


def test_the_async_queue_waits_for_an_outcome(conn: redis.Redis,
                                              valkey: EmbeddedValkey) -> None:
    sync = Queue(conn, "emails", wire=6)
    job = lease(sync, "JOB:1")

    async def main() -> tuple[JobOutcome, JobOutcome]:
        client = async_twin(conn)
        try:
            queue = AsyncQueue(client, "emails", wire=6)
            waiter = asyncio.create_task(queue.wait("JOB:1", 30.0))
            while blocked_clients(conn) < 1:
                await asyncio.sleep(0.005)
            await queue.ack(job, result=b"async")
            return await asyncio.wait_for(waiter, 10), await queue.outcome("JOB:2")
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (JobOutcome("done", b"async", None, 1), JobOutcome(
        "unknown", None, None, 0))


def test_a_delayed_lane_job_with_a_bad_group_is_refused_alike(conn: redis.Redis) -> None:
    queue = Queue(conn, "emails", wire=5)
    before = commands_sent(conn)
    with pytest.raises(LaneError) as client_side:
        queue.enqueue("JOB:a1", b"p", lane="a b", delay_ms=100)
    assert commands_sent(conn) == before
    transition = next(t for t in SCRIPT_ONLY if t.name == "lane_enqueue_delayed")
    keys = [queue.key("job", "JOB:a1"), queue.key("delayed"), queue.key("wake")]
    with pytest.raises(LaneError) as server_side:
        queue.executor.call(conn, transition, keys, ["JOB:a1", b"p", "a b", "*", "100", "0"])
    assert str(client_side.value) == str(server_side.value)
    with pytest.raises(ArgumentError, match=r"^EMQARITY EMQ\.LANE_ENQUEUE_DELAYED takes 3 keys "):
        queue.executor.call(conn, transition, keys, ["JOB:a1", b"p", "a", "*", "100"])
    assert conn.dbsize() == 0
