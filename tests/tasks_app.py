"""An App the worker-process tests run as ``echomq worker tests.tasks_app:app``.

Its connection comes from ``ECHOMQ_URL``, made without a round trip (redis-py connects on the
first call), so importing this module in a worker costs no I/O.
"""

from __future__ import annotations

import asyncio
import os

import redis
import redis.asyncio as aioredis

from echomq import App, Backoff
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
