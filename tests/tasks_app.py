"""An App the worker-process tests run as ``echomq worker tests.tasks_app:app``.

Its connection comes from ``ECHOMQ_URL``, made without a round trip (redis-py connects on the
first call), so importing this module in a worker costs no I/O.
"""

from __future__ import annotations

import asyncio
import os
import time

import redis
import redis.asyncio as aioredis

from echomq import App, Backoff, aio
from tests import task_functions

URL = os.environ.get("ECHOMQ_URL", "redis://127.0.0.1:1")

app = App(redis.Redis.from_url(URL),
          queue="tasks", max_attempts=2, backoff=Backoff(first_ms=0, max_ms=0, jitter=0),
          check_policy=False)


add = app.task(name="add", keep_result=True)(task_functions.add)


@app.task(name="pid", keep_result=True)
def pid() -> int:
    return os.getpid()


broken = app.task(name="broken", keep_result=True)(task_functions.broken)


@app.task(name="urgent", queue="urgent", keep_result=True)
async def urgent(text: str) -> str:
    await asyncio.sleep(0)
    return text.upper()


# An App whose tasks are all async: echomq worker runs it on the asyncio consumer.
async_app = App(redis.Redis.from_url(URL), queue="async-tasks", check_policy=False)


@async_app.task(name="rendezvous", keep_result=True, max_attempts=1)
async def rendezvous(group: str, size: int) -> int:
    """Returns once ``size`` runs of the group have started (the last to arrive opens the gate
    for all), or after 3 s with 0: 1 from every run proves they were in flight together. One
    attempt only, so a retry never counts as a second arrival."""
    conn = aioredis.Redis.from_url(URL)
    try:
        if await conn.incr(f"test:{group}:arrived") == size:
            await conn.rpush(f"test:{group}:gate", *["open"] * size)
        return 1 if await conn.blpop([f"test:{group}:gate"], timeout=3) else 0
    finally:
        await conn.aclose()


# An App with async tasks and plain ones: echomq worker runs it on the asyncio consumer, the
# plain tasks in threads beside the async ones.
mixed_app = App(redis.Redis.from_url(URL), queue="mixed-tasks", max_attempts=1,
                check_policy=False)
mixed_app.task(name="rendezvous", keep_result=True)(rendezvous.function)


@mixed_app.task(name="rendezvous_in_thread", keep_result=True)
def rendezvous_in_thread(group: str, size: int) -> int:
    """``rendezvous`` as a plain function: it only returns 1 if it ran beside the others."""
    conn = redis.Redis.from_url(URL)
    try:
        if conn.incr(f"test:{group}:arrived") == size:
            conn.rpush(f"test:{group}:gate", *["open"] * size)
        return 1 if conn.blpop([f"test:{group}:gate"], timeout=3) else 0
    finally:
        conn.close()


@mixed_app.task(name="hang")
def hang() -> None:
    """Notes its process in ``test:hung`` and blocks past any time limit."""
    redis.Redis.from_url(URL).rpush("test:hung", os.getpid())
    time.sleep(60)


@mixed_app.task(name="outlast", keep_result=True)
async def outlast(job_id: str) -> int:
    """Returns this process's pid once job ``job_id`` has ended (so it runs on past that job's
    time limit), or 0 if that takes 30 s."""
    conn = aioredis.Redis.from_url(URL)
    try:
        ended = await aio.Queue(conn, mixed_app.queue.name).wait(job_id, 30)
        return os.getpid() if ended.ended else 0
    finally:
        await conn.aclose()


mixed_app.task(name="pid", keep_result=True)(pid.function)


# An App of plain tasks only, without hooks: echomq worker runs it on the blocking consumer.
plain_app = App(redis.Redis.from_url(URL), queue="plain-tasks", check_policy=False)
plain_app.task(name="add", keep_result=True)(task_functions.add)
