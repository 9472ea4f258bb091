"""Handlers for the worker-process tests that watch which process ran what.

``serve``: ``b"hang"`` notes the process in ``test:hung`` (a list) and never returns; anything
else notes ``job id -> pid`` in ``test:served``.

``misbehave`` (and ``exiting_app``, its all-async App): ``b"exit"`` calls ``sys.exit(2)`` on its
first attempt, as a library's argument parser does; ``b"poison"`` ends its process at once
(``os._exit``) at every attempt; ``b"spawn"`` leaves a subprocess and a forked child running,
their pids in ``test:spawned``. Each job first notes ``<id>@<attempt>`` in ``test:starts``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import redis

from echomq import Job
from tests.handlers import conn


def serve(job: Job) -> None:
    if job.payload == b"hang":
        conn().rpush("test:hung", os.getpid())
        threading.Event().wait()
    conn().hset("test:served", job.id, os.getpid())


def misbehave(job: Job) -> None:
    conn().rpush("test:starts", f"{job.id}@{job.attempt}")
    if job.payload == b"exit" and job.attempt == 1:
        sys.exit(2)
    if job.payload == b"poison":
        os._exit(1)
    if job.payload == b"spawn":
        spawn()


def spawn() -> None:
    """A subprocess and a forked child that outlive the job (a minute at most). Each pid is
    noted once its process is what it will stay: the subprocess once it runs ``sleep`` (Popen
    returns after the exec), the forked child by itself, on a connection of its own, once its
    at-fork handlers have run (its signal mask set as the worker leaves it)."""
    child = subprocess.Popen(["sleep", "60"])
    if os.fork() == 0:
        try:
            redis.Redis.from_url(os.environ["ECHOMQ_URL"]).rpush("test:spawned", os.getpid())
            time.sleep(60)
        finally:
            os._exit(0)
    conn().rpush("test:spawned", child.pid)


@dataclass
class Named:
    name: str
    is_async: bool = False


@dataclass
class ExitingApp:
    """An all-async App running ``misbehave``."""

    queue: Named = field(default_factory=lambda: Named("exits"))
    tasks: dict[str, Named] = field(default_factory=lambda: {"t": Named("t", is_async=True)})

    @property
    def queues(self) -> dict[str, Named]:
        return {self.queue.name: self.queue}

    def handler(self, job: Job) -> None:
        raise AssertionError("an all-async App runs on the asyncio consumer")

    async def async_handler(self, job: Job) -> None:
        misbehave(job)


exiting_app = ExitingApp()
