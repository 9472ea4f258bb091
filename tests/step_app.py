"""Two Apps whose one task runs three durable steps (``echomq.step``; ``echomq.astep`` in the
all-async one), for tests/test_step_faults.py. Each step's side effect is a line in the ledger
``$ECHOMQ_STEP_LEDGER`` (``{"job", "step", "pid"}``), written by the step's function alone, so a
step run twice shows as two lines. After each step the task pauses once per job and step (``SET
test:paused:<job>:<n> NX``): it notes ``{"job", "paused": n, "pid"}`` in the ledger and waits
for ever, until the test SIGKILLs its worker; an attempt that finds the pause taken goes on."""

from __future__ import annotations

import asyncio
import json
import os
import threading

import redis

import echomq
from echomq import App

STEPS = ("charge", "ship", "email")


def _conn() -> redis.Redis:
    return redis.Redis.from_url(os.environ["ECHOMQ_URL"])


def note(record: dict[str, object]) -> None:
    """One ledger line, written whole with its newline (O_APPEND: one write)."""
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(os.environ["ECHOMQ_STEP_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def side_effect(order: str, step: str) -> str:
    note({"job": order, "step": step, "pid": os.getpid()})
    return f"{step}:{order}"


def first_pause(order: str, n: int) -> bool:
    """Whether this is the first time the job reaches the pause after step ``n``."""
    if not _conn().set(f"test:paused:{order}:{n}", os.getpid(), nx=True):
        return False
    note({"job": order, "paused": n, "pid": os.getpid()})
    return True


sync_app = App(_conn(), "steps", max_attempts=10)
async_app = App(_conn(), "steps", max_attempts=10)


@sync_app.task(name="three")
def three(order: str) -> list[str]:
    done = []
    for n, name in enumerate(STEPS, start=1):
        done.append(echomq.step(name, side_effect, order, name))
        if first_pause(order, n):
            threading.Event().wait()  # until the worker is killed
    return done


@async_app.task(name="three")
async def athree(order: str) -> list[str]:
    done = []
    for n, name in enumerate(STEPS, start=1):
        done.append(await echomq.astep(name, side_effect, order, name))
        if await asyncio.to_thread(first_pause, order, n):
            await asyncio.Event().wait()  # until the worker is killed
    return done
