"""Replies lost on the way back, through a proxy that forwards a call and closes the client's
connection when its reply comes (tests/reply_dropper.py), against a real server, on both wires
and on clients built to retry (``Retry``, as redis-py 6 and later do by default).

A transition is never sent again by the client: the caller sees the connection error, and what
it sends again is safe — the consumer's own retry of an ack whose reply was lost answers ACKED
(its ``on_ack`` runs, no refused ack is logged), an enqueue that went through answers ENQUEUED;
an admin purge or requeue sends nothing twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq import Consumer, Queue, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.engine.scripts import script_for
from echomq.engine.transitions import (
    ACK,
    ALL_TRANSITIONS,
    ENQUEUE,
    PURGE,
    REQUEUE,
    SETTLE,
    Transition,
)
from echomq.ops.admin import purge, requeue
from tests.reply_dropper import ReplyDropper

NOW = 1_700_000_000_000
RETRYING = {"retry": Retry(NoBackoff(), 3),
            "retry_on_error": [redis.ConnectionError, redis.TimeoutError]}


def marker(transition: Transition, wire: int) -> bytes:
    """The bytes that name ``transition`` in a request on ``wire``."""
    if wire == 6 and transition.native is not None:
        return transition.native.encode()
    return script_for(transition).sha.encode()


@pytest.fixture
def proxy(valkey: EmbeddedValkey, conn: redis.Redis) -> Iterator[ReplyDropper]:
    for transition in ALL_TRANSITIONS:  # loaded: the call watched is the one that runs
        conn.script_load(script_for(transition).source)
    dropper = ReplyDropper(valkey.port)
    yield dropper
    dropper.close()


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def retrying_client(proxy: ReplyDropper) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=10, **RETRYING)


def test_a_lost_ack_reply_is_retried_by_the_consumer_as_a_replay(
        proxy: ReplyDropper, conn: redis.Redis, wire: int,
        caplog: pytest.LogCaptureFixture) -> None:
    """The ack went through and its reply was lost: the consumer sends it again, hears ACKED,
    runs ``on_ack`` and logs no refused ack."""
    Queue(conn, "work", wire=wire).enqueue("JOB:1", b"x")
    client = retrying_client(proxy)
    acked = threading.Event()
    consumer = Consumer(Queue(client, "work", wire=wire), lambda job: None,
                        on_ack=lambda job: acked.set(), lease_ms=5_000)
    sha_or_name = marker(SETTLE, wire)
    proxy.drop(lambda chunk: sha_or_name in chunk and b"\r\nack\r\n" in chunk)
    runner = threading.Thread(target=consumer.run)
    with caplog.at_level(logging.WARNING, logger="echomq"):
        runner.start()
        try:
            assert acked.wait(30), "on_ack never ran"
        finally:
            consumer.stop()
            runner.join(30)
    client.close()
    assert proxy.dropped == 1
    assert "the ack was refused" not in caplog.text
    row = Queue(conn, "work", wire=wire).key("job", "JOB:1")
    assert conn.hget(row, "p") is None and conn.zcard("emq:{work}:active") == 0


def test_an_ack_whose_reply_was_lost_raises_and_its_replay_answers_acked(
        proxy: ReplyDropper, conn: redis.Redis, wire: int) -> None:
    Queue(conn, "work", wire=wire).enqueue("JOB:1", b"x", now=NOW)
    queue = Queue(retrying_client(proxy), "work", wire=wire)
    job = queue.claim(now=NOW)
    assert job is not None
    sha_or_name = marker(ACK, wire)
    proxy.drop(lambda chunk: sha_or_name in chunk)
    with pytest.raises(redis.ConnectionError):
        queue.ack(job)
    assert queue.ack(job) is Verdict.ACKED
    assert proxy.dropped == 1


@pytest.mark.parametrize("now", [NOW, None], ids=["explicit-now", "server-clock"])
def test_an_enqueue_whose_reply_was_lost_answers_enqueued(
        proxy: ReplyDropper, conn: redis.Redis, wire: int, now: int | None) -> None:
    """Sent again blindly, the admission would answer DUPLICATE for the job it admitted: the
    queue reads the row instead, finds its own admission, and answers ENQUEUED, once."""
    queue = Queue(retrying_client(proxy), "work", wire=wire)
    sha_or_name = marker(ENQUEUE, wire)
    proxy.drop(lambda chunk: sha_or_name in chunk)
    assert queue.enqueue("JOB:1", b"x", now=now) is Verdict.ENQUEUED
    assert conn.zrange("emq:{work}:pending", 0, -1) == [b"JOB:1"]
    assert proxy.dropped == 1
    assert queue.enqueue("JOB:1", b"x", now=now) is Verdict.DUPLICATE  # a second call's


def test_an_admission_whose_reply_was_lost_is_told_from_another_producers() -> None:
    """The rule behind it: the row must hold the call's payload, admitted within the call."""
    from echomq.engine.calls import QueueCalls, lost_admission

    calls = QueueCalls("work")
    explicit, clocked = calls.enqueue("JOB:1", b"x", None, NOW), calls.enqueue("JOB:1", b"x",
                                                                              None, None)
    clock = (NOW // 1000, (NOW % 1000) * 1000)
    assert lost_admission(explicit, [(None, None), clock], 0.1) is None
    assert lost_admission(explicit, [(b"x", str(NOW).encode()), clock], 0.1) is Verdict.ENQUEUED
    assert lost_admission(explicit, [(b"y", str(NOW).encode()), clock], 0.1) is Verdict.DUPLICATE
    assert lost_admission(explicit, [(b"x", b"5"), clock], 0.1) is Verdict.DUPLICATE
    assert lost_admission(clocked, [(b"x", str(NOW - 50).encode()), clock], 0.1) \
        is Verdict.ENQUEUED
    assert lost_admission(clocked, [(b"x", str(NOW - 500).encode()), clock], 0.1) \
        is Verdict.DUPLICATE  # admitted before this call was sent


def dead_jobs(conn: redis.Redis, count: int) -> None:
    queue = Queue(conn, "work")
    for n in range(count):
        queue.enqueue(f"JOB:{n}", b"x", now=NOW + n)
    for job in queue.claim_many(count, now=NOW + count):
        assert queue.retry(job, max_attempts=1, now=NOW + count) is Verdict.DEAD


def test_a_purge_whose_reply_was_lost_purged_at_most_its_limit(
        proxy: ReplyDropper, conn: redis.Redis) -> None:
    dead_jobs(conn, 10)
    sha = marker(PURGE, 5)
    proxy.drop(lambda chunk: sha in chunk)
    with pytest.raises(redis.ConnectionError):
        purge(retrying_client(proxy), "work", limit=5)
    assert conn.zcard("emq:{work}:dead") == 5
    assert proxy.dropped == 1


def test_a_requeue_whose_reply_was_lost_is_not_answered_false(
        proxy: ReplyDropper, conn: redis.Redis) -> None:
    """Sent again, the requeue would have answered False (not dead) for the job it requeued;
    the caller hears the lost reply instead, and the job runs again once."""
    dead_jobs(conn, 1)
    sha = marker(REQUEUE, 5)
    proxy.drop(lambda chunk: sha in chunk)
    with pytest.raises(redis.ConnectionError):
        requeue(retrying_client(proxy), "work", "JOB:0", now=NOW + 5)
    assert conn.zrange("emq:{work}:pending", 0, -1) == [b"JOB:0"]
    assert conn.zcard("emq:{work}:dead") == 0


def test_the_asyncio_client_sends_a_transition_once(proxy: ReplyDropper, conn: redis.Redis,
                                                    wire: int) -> None:
    import asyncio

    Queue(conn, "work", wire=wire).enqueue("JOB:1", b"x", now=NOW)
    sha_or_name = marker(SETTLE, wire)

    async def body() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=proxy.port,
                                     retry=AsyncRetry(NoBackoff(), 3),
                                     retry_on_error=RETRYING["retry_on_error"])
        queue = AsyncQueue(client, "work", wire=wire)
        proxy.drop(lambda chunk: sha_or_name in chunk)
        with pytest.raises(redis.ConnectionError):
            await queue.claim_many(1, now=NOW)
        # the lost claim leased the job once, not twice
        assert await queue.claim_many(1, now=NOW) == []
        proxy.drop(lambda chunk: marker(ENQUEUE, wire) in chunk)
        assert await queue.enqueue("JOB:2", b"y") is Verdict.ENQUEUED
        await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(body())
    assert conn.zrange("emq:{work}:active", 0, -1) == [b"JOB:1"]
    assert conn.hget("emq:{work}:job:JOB:1", "a") == b"1"
    assert conn.zrange("emq:{work}:pending", 0, -1) == [b"JOB:2"]
    assert proxy.dropped == 2
