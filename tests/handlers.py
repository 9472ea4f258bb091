"""Handlers the worker tests run inside worker processes (``tests.handlers:work``).

They talk to the test's server through ``ECHOMQ_URL`` and leave their traces under ``test:*``.
The payload says what a job does: ``b""`` nothing; ``b"sleep:<ms>"`` sleep; ``b"started:<ms>"``
note the job in ``test:started``, then sleep; ``b"spin:<ms>"`` keep the CPU busy in Python code;
``b"victim"`` on its first attempt note the
process in ``test:victim`` and block until the test kills it.
"""

from __future__ import annotations

import os
import threading
import time

import redis

from echomq import Job

_conn: redis.Redis | None = None


def conn() -> redis.Redis:
    global _conn
    if _conn is None:
        _conn = redis.Redis.from_url(os.environ["ECHOMQ_URL"])
    return _conn


def work(job: Job) -> None:
    kind, _, argument = job.payload.decode().partition(":")
    if kind == "sleep":
        time.sleep(int(argument) / 1000)
    elif kind == "started":
        conn().rpush("test:started", job.id)
        time.sleep(int(argument) / 1000)
    elif kind == "spin":
        deadline = time.monotonic() + int(argument) / 1000
        while time.monotonic() < deadline:
            sum(range(1000))
    elif kind == "victim" and job.attempt == 1:
        conn().set("test:victim", os.getpid())
        threading.Event().wait(60)


def acked(job: Job) -> None:
    """The ``--on-ack`` hook: runs only after the ack returned ACKED."""
    with conn().pipeline(transaction=True) as pipe:
        pipe.hincrby("test:acked", job.id, 1)
        pipe.sadd("test:attempts", f"{job.id}@{job.attempt}")
        pipe.execute()
