"""A batch admitted in part: ``Queue.enqueue_many`` (and ``task.enqueue_many``) sends one
command per 10,000 jobs, each all or nothing; a server at its memory limit admits the first
and refuses the others. The error raised is a PartialAdmission — still the server's
OutOfMemoryError — whose verdicts are exactly what was admitted, and sending its ``remaining``
again admits each item (each task call, under the id it was given) once. Both wires, blocking
and asyncio; a sharded queue stops at the shard that refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import echomq.aio
from echomq import App, PartialAdmission, Queue, Verdict
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import ENQUEUE_MANY_MAX
from echomq.tasks.canvas import TaskSignature
from echomq.tasks.envelope import decode_envelope
from tests.conftest import start_server
from tests.task_functions import add

ENQUEUED = Verdict.ENQUEUED
BATCH = 3 * ENQUEUE_MANY_MAX  # three commands of 10,000 jobs


@pytest.fixture
def server() -> Iterator[EmbeddedValkey]:
    """A server of its own: the calibration reads its peak memory, which nothing resets."""
    made = start_server(config={"maxmemory-policy": "noeviction"})
    try:
        yield made
    finally:
        made.stop()


def limit_after(conn: redis.Redis, one_command: Callable[[], object]) -> int:
    """A ``maxmemory`` under which the next batch's first command of 10,000 jobs is admitted
    and the next ones refused, from ``one_command`` (10,000 jobs of the same shape on a queue of
    their own) on a fresh server: it keeps ``kept`` bytes, and needed ``passing`` more while it
    ran (its arguments, its reply), which the server's peak shows. A command is refused when
    it starts at or over the limit: the first starts at most ``passing`` over the memory in use
    now, the second at least ``kept`` + ``passing`` over it (its own arguments), so a limit
    ``kept / 2`` between the two leaves a margin of ``kept / 2`` (about 1.2 MB) either way."""
    before = int(conn.info("memory")["used_memory"])
    one_command()
    memory = conn.info("memory")
    used, peak = int(memory["used_memory"]), int(memory["used_memory_peak"])
    kept, passing = used - before, peak - used
    assert kept > 1_000_000 and passing > 0, memory  # the calibration saw its command
    return used + passing + kept // 2


def full_batch(conn: redis.Redis, send: Callable[[], object]) -> PartialAdmission:
    """``send``'s PartialAdmission, raised as the server's OutOfMemoryError."""
    with pytest.raises(redis.exceptions.OutOfMemoryError) as raised:
        send()
    err = raised.value
    assert isinstance(err, PartialAdmission)
    assert isinstance(err.__cause__, redis.exceptions.OutOfMemoryError)
    assert not isinstance(err.__cause__, PartialAdmission)
    assert "10000 of 30000 items admitted" in str(err)
    return err


def pending_ids(conn: redis.Redis, queue: str) -> set[str]:
    return {member.decode() for member in conn.zrange(f"emq:{{{queue}}}:pending", 0, -1)}


def run(aio: bool, made: Callable[[], Any]) -> Any:
    """``made()``'s result, awaited on a loop of its own when ``aio``."""
    if not aio:
        return made()

    async def body() -> Any:
        return await made()
    return asyncio.run(body())


@pytest.mark.parametrize("wire", [5, 6], ids=["wire5", "wire6"])
@pytest.mark.parametrize("aio", [False, True], ids=["blocking", "asyncio"])
@pytest.mark.pairs(("aio", "wire"), [(False, 5), (True, 6)])
def test_a_queue_batch_refused_after_its_first_command(server: EmbeddedValkey, wire: int,
                                                       aio: bool) -> None:
    conn = server.client()
    items = [(f"JOB:{n}", b"") for n in range(BATCH)]
    try:
        calibration = Queue(conn, "calibration", wire=wire)
        limit = limit_after(conn, lambda: calibration.enqueue_many(
            [(f"JOB:c{n}", b"") for n in range(ENQUEUE_MANY_MAX)]))
        conn.config_set("maxmemory", str(limit))

        def send(batch: list[tuple[str, bytes]]) -> list[Verdict]:
            if not aio:
                return Queue(conn, "full", wire=wire).enqueue_many(batch)

            async def body() -> list[Verdict]:
                client = aredis.Redis(host="127.0.0.1", port=server.port)
                try:
                    queue = echomq.aio.Queue(client, "full", wire=wire, check_policy=False)
                    return await queue.enqueue_many(batch)
                finally:
                    await client.aclose()
            return asyncio.run(body())

        err = full_batch(conn, lambda: send(items))
        assert err.verdicts == [ENQUEUED] * ENQUEUE_MANY_MAX + [None] * (BATCH - 10_000)
        assert err.admitted == ENQUEUE_MANY_MAX
        assert err.remaining == items[ENQUEUE_MANY_MAX:]
        assert err.handles is None
        assert pending_ids(conn, "full") == {f"JOB:{n}" for n in range(ENQUEUE_MANY_MAX)}

        # Still full: nothing of the rest is admitted, and the plain error says so.
        with pytest.raises(redis.exceptions.OutOfMemoryError) as again:
            send(err.remaining)
        assert not isinstance(again.value, PartialAdmission)

        conn.config_set("maxmemory", "0")
        rest = send(err.remaining)
        assert rest == [ENQUEUED] * (BATCH - ENQUEUE_MANY_MAX)
        assert pending_ids(conn, "full") == {item[0] for item in items}
    finally:
        conn.config_set("maxmemory", "0")
        conn.close()


@pytest.mark.parametrize("wire", [5, 6], ids=["wire5", "wire6"])
@pytest.mark.parametrize("aio", [False, True], ids=["blocking", "asyncio"])
@pytest.mark.pairs(("aio", "wire"), [(False, 5), (True, 6)])
def test_a_task_batch_sent_again_admits_each_call_once(server: EmbeddedValkey, wire: int,
                                                       aio: bool) -> None:
    conn = server.client()
    try:
        app = App(conn, "full", wire=wire)
        task = app.task(name="add")(add)
        calls = [(n, 1) for n in range(BATCH)]
        limit = limit_after(conn, lambda: task.with_options(queue="calibration").enqueue_many(
            calls[:ENQUEUE_MANY_MAX]))
        conn.config_set("maxmemory", str(limit))

        def send(batch: list[Any]) -> Any:
            return task.aenqueue_many(batch) if aio else task.enqueue_many(batch)

        err = full_batch(conn, lambda: run(aio, lambda: send(calls)))
        assert err.verdicts == [ENQUEUED] * ENQUEUE_MANY_MAX + [None] * (BATCH - 10_000)
        handles = err.handles
        assert handles is not None and all(handle is None for handle in handles[10_000:])
        kept = [handle.id for handle in handles[:ENQUEUE_MANY_MAX] if handle is not None]
        assert pending_ids(conn, "full") == set(kept) and len(kept) == ENQUEUE_MANY_MAX
        assert all(isinstance(call, TaskSignature) for call in err.remaining)
        assert [call.args for call in err.remaining] == calls[ENQUEUE_MANY_MAX:]

        conn.config_set("maxmemory", "0")
        rest = iter(run(aio, lambda: send(err.remaining)))
        done = [handle or next(rest) for handle in handles]
        assert next(rest, None) is None
        assert [handle.id for handle in done[10_000:]] == [
            call.job_id for call in err.remaining]  # the ids they were given
        assert pending_ids(conn, "full") == {handle.id for handle in done}
        assert len(pending_ids(conn, "full")) == BATCH  # each call admitted once
        for n in (0, 9_999, 10_000, BATCH - 1):
            payload = conn.hget(f"emq:{{full}}:job:{done[n].id}", "p")
            assert decode_envelope(payload).args == [n, 1]
    finally:
        conn.config_set("maxmemory", "0")
        conn.close()


@pytest.mark.parametrize("wire", [5, 6], ids=["wire5", "wire6"])
def test_a_sharded_batch_stops_at_the_shard_that_refused(conn: redis.Redis,
                                                          wire: int) -> None:
    queue = Queue(conn, "parts", wire=wire, shards=2)
    items = [(f"JOB:{n}", b"") for n in range(40)]
    on = [queue.shard_of(item[0]) for item in items]
    first = on[0]  # the shards are sent to in the order their first item comes
    shards = queue.shard_queues
    conn.set(shards[1 - first].key("pending"), "not a sorted set")
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE") as raised:
        queue.enqueue_many(items)
    err = raised.value
    assert isinstance(err, PartialAdmission)
    assert err.verdicts == [ENQUEUED if shard == first else None for shard in on]
    assert err.remaining == [item for item, shard in zip(items, on, strict=True)
                             if shard != first]
    admitted = conn.zrange(shards[first].key("pending"), 0, -1)
    assert {member.decode() for member in admitted} == {
        item[0] for item, shard in zip(items, on, strict=True) if shard == first}
