"""An App with a periodic task, run by the end-to-end test as ``echomq worker
tests.periodic_app:app``: every second it enqueues ``beat("tick")``, which counts its runs."""

from __future__ import annotations

import os

import redis

from echomq import App

URL = os.environ.get("ECHOMQ_URL", "redis://127.0.0.1:1")

app = App(redis.Redis.from_url(URL), queue="cron", check_policy=False)


@app.periodic("* * * * * *", args=("tick",), name="beat", catch_up=30)
@app.task(name="beat")
def beat(label: str) -> None:
    app.conn.incr(f"runs:{label}")
