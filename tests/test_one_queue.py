"""One copy of each piece: the blocking and the asyncio Queue (and their executors) are the same
programs run two ways, so they have the same methods with the same parameters, accept the same
constructor arguments, and do the same thing step for step."""

from __future__ import annotations

import asyncio
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings, strategies as st

from echomq import EchoMQError, EvictionPolicyWarning, Job, Release, Retry, Verdict
from echomq.engine.async_executors import AsyncExecutor
from echomq.engine.clients import async_twin, twins
from echomq.engine.execution import ExecutorMethods
from echomq.engine.executors import Executor
from echomq.engine.program import ops_of
from echomq.queue import aio, blocking
from echomq.queue.methods import QueueMethods
from echomq.queue.sharded import ShardedMethods

NOW = 1_700_000_000_000


def public_methods(cls: type[Any]) -> dict[str, Any]:
    return {name: getattr(cls, name) for name in dir(cls)
            if not name.startswith("_") and callable(getattr(cls, name))}


def public_attributes(cls: type[Any]) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


@pytest.mark.parametrize(("sync", "asyncio_", "core"), [
    (blocking.Queue, aio.Queue, QueueMethods), (Executor, AsyncExecutor, ExecutorMethods),
    (blocking.ShardedQueue, aio.ShardedQueue, ShardedMethods)],
    ids=["queue", "executor", "sharded"])
def test_both_shells_have_the_same_methods_made_of_one_program_each(
        sync: type[Any], asyncio_: type[Any], core: type[Any]) -> None:
    """Each public method is the same program on both shells: same name, same parameters,
    same reply; a plain method on the blocking shell, a coroutine function on the asyncio
    one. Only pure helpers (no I/O) are plain on both."""
    assert public_attributes(sync) == public_attributes(asyncio_)
    methods, async_methods = public_methods(sync), public_methods(asyncio_)
    programs = ops_of(core)
    for name, made in methods.items():
        twin = async_methods[name]
        assert inspect.signature(made).parameters == inspect.signature(twin).parameters, name
        if name in programs:
            assert inspect.signature(made) == inspect.signature(twin), name
            assert made.__wrapped__ is twin.__wrapped__ is programs[name].program
            assert not inspect.iscoroutinefunction(made) and inspect.iscoroutinefunction(twin)
        elif name == "follow":  # a thin loop over ``events`` in each shell
            assert inspect.isgeneratorfunction(made) and inspect.isasyncgenfunction(twin)
        else:  # computed from what the queue holds, never sent
            assert name in {"key", "command", "refuse", "reload", "ran", "shard_of"}, name
            assert made is twin
    assert set(programs) >= {name for name in methods if name not in
                             {"key", "command", "refuse", "reload", "ran", "follow", "shard_of"}}


def test_both_queues_take_the_same_constructor_arguments() -> None:
    assert inspect.signature(blocking.Queue) == inspect.signature(aio.Queue)
    assert list(inspect.signature(aio.Queue).parameters) == [
        "conn", "name", "wire", "retention_ms", "max_attempts", "check_policy", "events",
        "shards", "staging_timeout_ms"]


def run_async(conn: Any, body: Callable[[Any], Any]) -> Any:
    async def main() -> Any:
        client = async_twin(conn)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_the_asyncio_queue_honours_what_it_is_made_with(conn: redis.Redis) -> None:
    """``base``, ``retention_ms``, ``max_attempts`` and the lanes' leases read on the asyncio
    Queue as on the blocking one."""
    sync = blocking.Queue(conn, "made", retention_ms=5_000, max_attempts=1, check_policy=False)

    async def body(client: Any) -> tuple[Any, ...]:
        queue = aio.Queue(client, "made", retention_ms=5_000, max_attempts=1,
                          check_policy=False)
        await queue.enqueue("JOB:1", b"x", lane="acme", now=NOW)
        job = await queue.claim_lane(now=NOW)
        assert job is not None
        leased = await queue.leased_by_lane()
        assert await queue.retry(job, now=NOW + 1) is Verdict.DEAD  # max_attempts=1
        return queue.base, queue.retention_ms, queue.max_attempts, leased

    assert run_async(conn, body) == (sync.base, 5_000, 1, {"acme": 1})
    assert sync.leased_by_lane() == {}


def test_the_asyncio_queue_checks_the_policy_before_its_first_command(
        conn: redis.Redis) -> None:
    conn.config_set("maxmemory-policy", "allkeys-lru")
    try:
        async def body(client: Any) -> list[Any]:
            made = aio.Queue(client, "evict")  # no I/O yet
            with pytest.warns(EvictionPolicyWarning, match="allkeys-lru") as first:
                await made.counts()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                await made.counts()  # asked once
                await aio.Queue(client, "evict", check_policy=False).counts()
            asked = aio.Queue(client, "evict")
            with pytest.warns(EvictionPolicyWarning) as explicit:
                assert await asked.check_policy() == "allkeys-lru"
            return [*first, *explicit]

        seen = run_async(conn, body)
    finally:
        conn.config_set("maxmemory-policy", "noeviction")
    assert len(seen) == 2  # one each: the explicit check is the check
    assert all(warning.filename == __file__ for warning in seen)


# Both shells, step for step --------------------------------------------------------------------

JOB_IDS = [f"JOB:{n}" for n in range(4)]
steps = st.one_of(
    st.tuples(st.just("enqueue"), st.sampled_from(JOB_IDS), st.sampled_from([None, "a", "b"]),
              st.sampled_from([0, 5])),
    st.tuples(st.just("enqueue_many"), st.lists(st.sampled_from(JOB_IDS), max_size=3)),
    st.tuples(st.just("claim"), st.sampled_from([1, 50])),
    st.tuples(st.just("claim_lane"), st.sampled_from([1, 50])),
    st.tuples(st.just("claim_many"), st.integers(1, 3)),
    st.tuples(st.sampled_from(["ack", "retry", "extend", "release", "outcome"]),
              st.integers(0, 7)),
    st.tuples(st.sampled_from(["recover", "promote", "counts", "lane_depths", "next_due",
                               "leased_by_lane", "paused", "is_paused", "pause", "resume"])),
)


def step_of(queue: Any, step: tuple[Any, ...], held: list[Job], now: int) -> Any:
    """The call of ``step`` on ``queue`` (a coroutine on the asyncio one)."""
    name, *args = step
    if name == "enqueue":
        return queue.enqueue(args[0], b"p", lane=args[1], delay_ms=args[2], now=now)
    if name == "enqueue_many":
        return queue.enqueue_many([(job_id, b"q") for job_id in args[0]], now=now)
    if name in ("claim", "claim_lane"):
        return getattr(queue, name)(args[0], now=now)
    if name == "claim_many":
        return queue.claim_many(args[0], 50, now=now)
    if name in ("ack", "retry", "extend", "release", "outcome"):
        return job_step(queue, name, held[args[0] % len(held)] if held else None, now)
    if name in ("recover", "promote"):
        return getattr(queue, name)(now=now)
    return getattr(queue, name)()


def job_step(queue: Any, name: str, job: Job | None, now: int) -> Any:
    if job is None:
        return queue.outcome("JOB:0")
    if name == "ack":
        return queue.ack(job, result=b"r")
    if name == "retry":
        return queue.retry(job, delay_ms=3, error="e", now=now)
    if name == "extend":
        return queue.extend(job, lease_ms=20, now=now)
    if name == "release":
        return queue.settle([Release(job), Retry(job)], claim=1, now=now)
    return queue.outcome(job.id)


def kept(reply: Any, held: list[Job]) -> Any:
    """What a reply says, jobs leased kept in hand for the steps after it."""
    found = reply if isinstance(reply, list) else [reply]
    if isinstance(reply, tuple) and len(reply) == 2 and isinstance(reply[1], list):
        found = reply[1]
    held.extend(job for job in found if isinstance(job, Job))
    return reply


def failed(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc)


@pytest.mark.parametrize("wire", [5, 6])
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=st.lists(steps, min_size=1, max_size=25))
def test_both_queues_reply_alike_step_for_step(conn: redis.Redis, wire: int,
                                               program: list[tuple[Any, ...]]) -> None:
    """The same steps, at the same times, on a blocking Queue and on an asyncio one (each on a
    queue of its own): the same replies, errors included."""
    conn.flushall()
    sync = blocking.Queue(conn, "sync", wire=wire, check_policy=False)
    sync_held: list[Job] = []
    sync_replies = []
    for n, step in enumerate(program):
        try:
            sync_replies.append(kept(step_of(sync, step, sync_held, NOW + 10 * n), sync_held))
        except (*twins(redis.RedisError), EchoMQError) as exc:
            sync_replies.append(failed(exc))

    async def body(client: Any) -> list[Any]:
        queue = aio.Queue(client, "async", wire=wire, check_policy=False)
        held: list[Job] = []
        replies = []
        for n, step in enumerate(program):
            try:
                replies.append(kept(await step_of(queue, step, held, NOW + 10 * n), held))
            except (*twins(redis.RedisError), EchoMQError) as exc:
                replies.append(failed(exc))
        return replies

    assert run_async(conn, body) == sync_replies
