"""Queue.enqueue_many as one command: a run of flat jobs is one EMQ.ENQUEUE_MANY (wire 6) or one
EVALSHA (wire 5), at most 10,000 jobs a call; a job with a lane goes as its own lane enqueue in
its place; the verdicts, the checks before sending and the asyncio twin are those of before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aredis

import echomq.aio
import echomq.engine.calls
from echomq import ArgumentError, KindError, Queue, Verdict, Wire6Unsupported
from echomq.embedded import EmbeddedValkey
from echomq.engine.produce import enqueue_many_calls
from echomq.engine.transitions import ENQUEUE_MANY, ENQUEUE_MANY_MAX, LANE_ENQUEUE

NOW = 1_700_000_000_000
ENQUEUED, DUPLICATE = Verdict.ENQUEUED, Verdict.DUPLICATE


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Iterator[Queue]:
    yield Queue(conn, "many", wire=request.param)


def sent(conn: redis.Redis) -> dict[str, int]:
    """Commands of a transition sent since the last CONFIG RESETSTAT: EVALSHA, EMQ.*."""
    stats = conn.info("commandstats")
    return {name[len("cmdstat_"):]: int(value["calls"]) for name, value in stats.items()
            if name == "cmdstat_evalsha" or name.startswith("cmdstat_emq.")}


def warm(queue: Queue, *items: tuple[str, bytes, str]) -> None:
    """The scripts loaded (a first EVALSHA may find none), then the counts reset."""
    queue.enqueue_many([("JOB:warm", b""), *items])
    queue.conn.config_resetstat()


def one_call(queue: Queue) -> dict[str, int]:
    return {"evalsha" if queue.wire == 5 else "emq.enqueue_many": 1}


def test_a_batch_of_flat_jobs_is_one_command(queue: Queue) -> None:
    warm(queue)
    verdicts = queue.enqueue_many([(f"JOB:{n}", f"p{n}") for n in range(50)], now=NOW)
    assert verdicts == [ENQUEUED] * 50
    assert sent(queue.conn) == one_call(queue)
    assert queue.conn.zrange(queue.key("pending"), 0, 2) == [b"JOB:0", b"JOB:1", b"JOB:10"]
    assert queue.conn.hgetall(queue.key("job", "JOB:7")) == {
        b"p": b"p7", b"t": str(NOW).encode()}


def test_duplicates_inside_the_batch_and_of_rows_already_there(queue: Queue) -> None:
    queue.enqueue("JOB:old", b"", now=NOW)
    verdicts = queue.enqueue_many([("JOB:a", b"1"), ("JOB:old", b"2"), ("JOB:a", b"3"),
                                   ("JOB:b", b"4", None, 7)], now=NOW)
    assert verdicts == [ENQUEUED, DUPLICATE, DUPLICATE, ENQUEUED]
    assert queue.conn.hget(queue.key("job", "JOB:a"), "p") == b"1"
    assert queue.conn.hget(queue.key("job", "JOB:b"), "priority") == b"7"
    assert queue.claim(now=NOW).id == "JOB:b"  # its priority: claimed first


def test_a_bad_item_anywhere_sends_nothing(queue: Queue) -> None:
    queue.conn.config_resetstat()
    items = [("JOB:1", b""), ("JOB:2", b"")]
    with pytest.raises(KindError):
        queue.enqueue_many([*items, ("job:3", b""), ("JOB:4", b"")])
    with pytest.raises(ArgumentError):
        queue.enqueue_many([*items, ("JOB:3", b"", None, 101)])
    with pytest.raises(TypeError):
        queue.enqueue_many([*items, ("JOB:3", None)])  # type: ignore[list-item]
    assert sent(queue.conn) == {}
    assert queue.conn.keys("*") == []
    assert queue.enqueue_many([]) == []
    assert sent(queue.conn) == {}


def test_more_than_the_bound_goes_as_several_calls(queue: Queue) -> None:
    warm(queue)
    n = ENQUEUE_MANY_MAX + 3
    assert queue.enqueue_many([(f"JOB:{i}", b"") for i in range(n)], now=NOW) == [ENQUEUED] * n
    calls = sent(queue.conn)
    assert calls == {name: 2 for name in one_call(queue)}
    assert queue.counts()["pending"] == n + 1


def test_the_calls_of_a_batch_keep_the_items_order() -> None:
    """Runs of flat jobs are cut at the bound and around each job with a lane (lanes have no
    batch), so every job is admitted in list order."""
    calls = echomq.engine.calls.QueueCalls("q")
    items = [("JOB:1", b"a"), ("JOB:2", b"b", None, -3), ("JOB:3", b"c", "g"),
             ("JOB:4", "d"), ("JOB:5", b"e"), ("JOB:6", b"f")]
    made = enqueue_many_calls(calls, items, NOW, most=2)
    assert [(call[0], list(call[2])) for call in made] == [
        (ENQUEUE_MANY, [str(NOW), "JOB:1", b"a", "0", "0", "JOB:2", b"b", "0", "-3"]),
        (LANE_ENQUEUE, ["JOB:3", b"c", "g", str(NOW)]),
        (ENQUEUE_MANY, [str(NOW), "JOB:4", b"d", "0", "0", "JOB:5", b"e", "0", "0"]),
        (ENQUEUE_MANY, [str(NOW), "JOB:6", b"f", "0", "0"])]
    assert made[0][1] == ["emq:{q}:pending", "emq:{q}:delayed", "emq:{q}:wake"]
    evented = echomq.engine.calls.QueueCalls("q", events=True)
    assert enqueue_many_calls(evented, items[:1], None)[0][1][-1] == "emq:{q}:events"
    assert enqueue_many_calls(calls, [], NOW) == []


def test_lane_jobs_keep_their_own_enqueue_in_their_place(conn: redis.Redis) -> None:
    queue = Queue(conn, "many", wire=5)
    warm(queue, ("JOB:warm-a", b"", "b"))
    verdicts = queue.enqueue_many([("JOB:1", b""), ("JOB:a1", b"", "a"), ("JOB:2", b""),
                                   ("JOB:1", b"", "a")], now=NOW)
    assert verdicts == [ENQUEUED, ENQUEUED, ENQUEUED, DUPLICATE]
    assert sent(conn) == {"evalsha": 4}
    assert conn.lrange(queue.key("lane", lane="a"), 0, -1) == [b"JOB:a1"]
    with pytest.raises(Wire6Unsupported):
        Queue(conn, "many", wire=6).enqueue_many([("JOB:3", b""), ("JOB:b1", b"", "b")])
    assert conn.zcard(queue.key("pending")) == 3


def test_events_of_a_batch(conn: redis.Redis) -> None:
    queue = Queue(conn, "many", wire=6, events=True)
    queue.enqueue_many([("JOB:1", b""), ("JOB:2", b"", None, 4), ("JOB:1", b"")], now=NOW)
    entries = [fields for _, fields in conn.xrange(queue.key("events"))]
    assert entries == [
        {b"kind": b"enqueued", b"job": b"JOB:1", b"attempt": b"0", b"at": str(NOW).encode()},
        {b"kind": b"enqueued", b"job": b"JOB:2", b"attempt": b"0", b"at": str(NOW).encode(),
         b"priority": b"4"}]
    assert conn.lrange(queue.key("wake"), 0, -1) == [b"1", b"1"]


@pytest.mark.parametrize("wire", [5, 6])
def test_the_asyncio_queue_sends_one_command_too(valkey: EmbeddedValkey, conn: redis.Redis,
                                                 wire: int) -> None:
    async def body() -> list[Verdict]:
        client = aredis.Redis(host="127.0.0.1", port=valkey.port)
        try:
            queue = echomq.aio.Queue(client, "many", wire=wire)
            await queue.enqueue_many([("JOB:warm", b"")])
            await client.config_resetstat()
            return await queue.enqueue_many([("JOB:1", b"a"), ("JOB:2", b"b"), ("JOB:1", b"c")],
                                            now=NOW)
        finally:
            await client.aclose()

    assert asyncio.run(body()) == [ENQUEUED, ENQUEUED, DUPLICATE]
    assert sent(conn) == {"evalsha" if wire == 5 else "emq.enqueue_many": 1}


def test_a_delay_for_the_whole_batch(queue: Queue) -> None:
    verdicts = queue.enqueue_many([("JOB:1", b""), ("JOB:2", b"", None, 3)], now=NOW,
                                  delay_ms=5_000)
    assert verdicts == [ENQUEUED, ENQUEUED]
    assert queue.conn.zrange(queue.key("delayed"), 0, -1, withscores=True) == [
        (b"JOB:1", NOW + 5_000), (b"JOB:2", NOW + 5_000)]
    assert queue.counts()["pending"] == 0
    with pytest.raises(ArgumentError, match="delay_ms"):
        queue.enqueue_many([("JOB:3", b"")], delay_ms=-1)
