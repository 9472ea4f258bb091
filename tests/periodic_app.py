"""An App with a periodic task, run by the end-to-end test as ``echomq worker
tests.periodic_app:app``: every second it enqueues ``beat("tick")``, which counts its runs.
``PERIODIC_SKEW_MS`` sets its schedulers' clock that far off the server's."""

from __future__ import annotations

import os
from typing import Any

import redis

from echomq import App
from echomq.engine.server_time import server_ms

URL = os.environ.get("ECHOMQ_URL", "redis://127.0.0.1:1")
SKEW_MS = int(os.environ.get("PERIODIC_SKEW_MS", "0"))

app = App(redis.Redis.from_url(URL), queue="cron", check_policy=False)


def skewed_clock(conn: Any) -> int:
    return server_ms(conn) + SKEW_MS


if SKEW_MS:
    app.scheduler.clock = skewed_clock


@app.periodic("* * * * * *", args=("tick",), name="beat", catch_up=30)
@app.task(name="beat")
def beat(label: str) -> None:
    app.conn.incr(f"runs:{label}")
