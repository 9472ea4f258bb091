"""An App whose queue is sharded (``App(conn, queue=..., shards=N)``): its tasks' jobs spread
over the shards, recorded on the server at its first command, from the blocking and the asyncio
producer alike; a handle finds its job on its shard."""

from __future__ import annotations

import asyncio

import pytest
import redis

from echomq import App, Verdict
from echomq.queue.shard_layout import ShardError, recorded_shards


def test_an_apps_sharded_queue_takes_its_tasks(conn: redis.Redis) -> None:
    app = App(conn, queue="work", shards=4, check_policy=False)

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    assert recorded_shards(conn, "work") is None and app.queue.shards == 4  # nothing sent yet
    handles = [add.enqueue(n, n) for n in range(40)]
    assert recorded_shards(conn, "work") == 4
    assert {app.queue.shard_of(handle.id) for handle in handles} == set(range(4))
    assert all(handle.outcome().state == "pending" for handle in handles)

    async def produce() -> str:
        handle = await add.aenqueue(1, 2)
        queue = await app.aqueues.queue_named("work")
        assert queue.shards == 4
        assert (await queue.outcome(handle.id)).state == "pending"
        await app.aclose()
        return handle.id

    assert app.queue.outcome(asyncio.run(produce())).state == "pending"
    assert app.queue.counts()["pending"] == 41
    assert handles[0].cancel() is Verdict.CANCELLED
    other = App(conn, queue="work", shards=2, check_policy=False)
    with pytest.raises(ShardError, match="recorded with 4 shards"):
        other.queue.counts()
