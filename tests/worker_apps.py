"""Targets for the worker tests of several queues and of Apps (``echomq worker TARGET``).

``record``: a handler noting each job's payload in ``test:order``. ``sync_app``: an App-like
object (``handler`` and ``queues``, as ``echomq worker`` detects one) serving ``high`` then
``low``, noting its ``worker_started``/``worker_stopping`` calls in ``test:hooks``.
``async_app``: an App whose tasks are all async; each job counts itself in flight
(``test:inflight``, its peak in ``test:peak``) and holds until the test pushes a token on
``test:release``. ``async_record``: an all-async App of queue ``cliq`` noting each job's
payload in ``test:order``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aredis

from echomq import Done, Job
from tests.handlers import conn

PEAK = """local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n"""


def record(job: Job) -> None:
    conn().rpush("test:order", job.payload)


@dataclass
class Named:
    name: str
    is_async: bool = False


class SyncApp:
    def __init__(self) -> None:
        self.queue = Named("high")
        self.queues = {"low": Named("low"), "high": Named("high")}
        self.tasks = {"t": Named("t")}

    def handler(self, job: Job) -> Done:
        conn().rpush("test:order", job.payload)
        return Done(b"kept")

    def worker_started(self, spec: Any) -> None:
        conn().rpush("test:hooks", f"started {os.getpid()} {','.join(spec.queues)}")

    def worker_stopping(self) -> None:
        conn().rpush("test:hooks", f"stopping {os.getpid()}")


class AsyncApp:
    def __init__(self) -> None:
        self.queue = Named("work")
        self.queues = {"work": self.queue}
        self.tasks = {"t": Named("t", is_async=True)}
        self._client: aredis.Redis | None = None

    def handler(self, job: Job) -> None:
        raise AssertionError("an all-async App runs on the asyncio consumer")

    async def async_handler(self, job: Job) -> None:
        if self._client is None:
            self._client = aredis.Redis.from_url(os.environ["ECHOMQ_URL"])
        client = self._client
        await client.eval(PEAK, 2, "test:inflight", "test:peak")
        try:
            await client.blpop(["test:release"], timeout=20)
        finally:
            await client.decr("test:inflight")
        await client.rpush("test:done", job.id)


class AsyncRecordApp:
    """An all-async App of queue ``cliq``: each job's payload noted in ``test:order``."""

    def __init__(self) -> None:
        self.queue = Named("cliq")
        self.queues = {"cliq": self.queue}
        self.tasks = {"t": Named("t", is_async=True)}

    def handler(self, job: Job) -> None:
        raise AssertionError("an all-async App runs on the asyncio consumer")

    async def async_handler(self, job: Job) -> None:
        client = aredis.Redis.from_url(os.environ["ECHOMQ_URL"])
        try:
            await client.rpush("test:order", job.payload)
        finally:
            await client.aclose()


sync_app = SyncApp()
async_app = AsyncApp()
async_record = AsyncRecordApp()
