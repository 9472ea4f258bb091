"""Handlers the worker tests run inside worker processes (``tests.handlers:work``).

They talk to the test's server through ``ECHOMQ_URL`` and leave their traces under ``test:*``.
The payload says what a job does: ``b""`` nothing; ``b"sleep:<ms>"`` sleep; ``b"started:<ms>"``
note the job in ``test:started``, then sleep; ``b"spin:<ms>"`` keep the CPU busy in Python code;
``b"victim"`` on its first attempt note the
process in ``test:victim`` and block until the test kills it (``b"victim:<n>"``: once JOB:000 …
JOB:<n - 1> have been acked and told).
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
        if argument:
            wait_acked(int(argument))
        conn().set("test:victim", os.getpid())
        threading.Event().wait(60)


def wait_acked(n: int) -> None:
    """Wait (at most 30 s) until JOB:000 … JOB:<n - 1> have had their ``on_ack``: a victim killed
    then catches no ack of this process between the server's reply and its hook."""
    ids = [f"JOB:{i:03d}" for i in range(n)]
    deadline = time.monotonic() + 30
    while not all(conn().hmget("test:acked", ids)) and time.monotonic() < deadline:
        time.sleep(0.01)


def acked(job: Job) -> None:
    """The ``--on-ack`` hook: runs only after the ack returned ACKED."""
    with conn().pipeline(transaction=True) as pipe:
        pipe.hincrby("test:acked", job.id, 1)
        pipe.sadd("test:attempts", f"{job.id}@{job.attempt}")
        pipe.execute()
