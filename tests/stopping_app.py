"""A real App the worker tests run to see ``worker_stopping`` called on every way out of a worker
process (``tests.stopping_app:app``).

It has a periodic schedule (so each worker process runs the scheduler's thread) and the task
``hang``, which notes its process in ``test:hung`` and blocks past any time limit.
``worker_started`` and ``worker_stopping`` note themselves in ``test:hooks``, the second with
whether the scheduler's thread still runs once the App stopped it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis

from echomq import App
from tests.handlers import conn


class RecordingApp(App):
    def worker_started(self, spec: Any) -> None:
        super().worker_started(spec)
        conn().rpush("test:hooks", f"started {os.getpid()} periodic={periodic_running()}")

    def worker_stopping(self) -> None:
        super().worker_stopping()
        conn().rpush("test:hooks", f"stopping {os.getpid()} periodic={periodic_running()}")


def periodic_running() -> bool:
    return any(thread.name == "echomq-periodic" and thread.is_alive()
               for thread in threading.enumerate())


app = RecordingApp(redis.Redis.from_url(os.environ.get("ECHOMQ_URL", "redis://127.0.0.1:6379")),
                   queue="stopping", max_attempts=1, check_policy=False)


@app.periodic("0 0 1 1 *")  # once a year: the thread runs, and waits
@app.task(name="yearly")
def yearly() -> None:
    pass


@app.task(name="hang")
def hang() -> None:
    conn().rpush("test:hung", os.getpid())
    threading.Event().wait(60)
