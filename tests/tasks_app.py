"""An App the worker-process tests run as ``echomq worker tests.tasks_app:app``.

Its connection comes from ``ECHOMQ_URL``, made without a round trip (redis-py connects on the
first call), so importing this module in a worker costs no I/O.
"""

from __future__ import annotations

import asyncio
import os

import redis

from echomq import App, Backoff

app = App(redis.Redis.from_url(os.environ.get("ECHOMQ_URL", "redis://127.0.0.1:1")),
          queue="tasks", max_attempts=2, backoff=Backoff(first_ms=0, max_ms=0, jitter=0),
          check_policy=False)


@app.task(name="add", keep_result=True)
def add(a: int, b: int) -> int:
    return a + b


@app.task(name="pid", keep_result=True)
def pid() -> int:
    return os.getpid()


@app.task(name="broken", keep_result=True)
def broken(reason: str) -> None:
    raise RuntimeError(reason)


@app.task(name="urgent", queue="urgent", keep_result=True)
async def urgent(text: str) -> str:
    await asyncio.sleep(0)
    return text.upper()
