"""A queue name is what its keys, the command line and the dashboard can all carry: non-empty
UTF-8 text without braces (the keys' hash tag), a slash (a path segment of the dashboard's API)
or a control character (NUL, the other C0 controls, DEL, C1). Every way in refuses any other
with the same ValueError before anything is sent: Queue, sharded or asyncio, and an App (its
queue, or a task's); the command line and the dashboard are in test_cli_contract.py and
test_dashboard_requests.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import echomq.aio
from echomq import App, Queue
from echomq.embedded import EmbeddedValkey
from tests.task_functions import add

REFUSED = ["", "a\x00b", "a\x01b", "a\nb", "a\x1fb", "a\x7fb", "a\x85b", "\x9f", "a/b",
           "a{b", "a}b", "a\udc80b"]
TAKEN = ["a b", "émails-ü", "a:b.c", "tenant#7", "a\\b", "100%"]
RULE = "free of braces, slashes and control characters"


@pytest.mark.parametrize("name", REFUSED)
def test_every_way_in_refuses_a_name_no_queue_can_have(valkey: EmbeddedValkey,
                                                        conn: redis.Redis, name: str) -> None:
    conn.config_resetstat()
    for make in (lambda: Queue(conn, name), lambda: Queue(conn, name, wire=6),
                 lambda: Queue(conn, name, shards=4), lambda: App(conn, name)):
        with pytest.raises(ValueError, match=RULE):
            make()
    task = App(conn, "fine").task(name="add")(add)
    for send in (lambda: task.with_options(queue=name).enqueue(1, 2),
                 lambda: task.with_options(queue=name).enqueue_many([(1, 2)]),
                 lambda: App(conn, "fine").task(name="other", queue=name)(add).enqueue(1, 2)):
        if name:  # queue="" names no queue: the task's own
            with pytest.raises(ValueError, match=RULE):
                send()

    async def asyncio_queue() -> None:
        client = aredis.Redis(host="127.0.0.1", port=valkey.port)
        try:
            for shards in (None, 4):
                with pytest.raises(ValueError, match=RULE):
                    echomq.aio.Queue(client, name, shards=shards)
        finally:
            await client.aclose()

    asyncio.run(asyncio_queue())
    assert conn.keys("*") == []
    assert writes(conn) == 0


def writes(conn: redis.Redis) -> int:
    stats = conn.info("commandstats")
    return sum(int(value["calls"]) for name, value in stats.items()
               if name[len("cmdstat_"):] in ("evalsha", "sadd") or name.startswith("cmdstat_emq"))


@pytest.mark.parametrize("name", TAKEN)
def test_other_text_is_a_queue_name(conn: redis.Redis, name: str) -> None:
    queue: Any = Queue(conn, name, wire=6)
    queue.enqueue("JOB:1", b"x")
    assert conn.zrange(f"emq:{{{name}}}:pending", 0, -1) == [b"JOB:1"]
