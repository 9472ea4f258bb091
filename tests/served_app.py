"""An App on a connection of its own, for ``echomq worker tests.served_app:app`` run without
``--url``: its server's port (``SERVED_APP_PORT``), client library (``SERVED_APP_LIBRARY``:
redis or valkey) and wire (``SERVED_APP_WIRE``) come from the environment, and with
``SERVED_APP_PERIODIC=1`` it enqueues ``tick()`` every second, which counts its runs in
``served:ticks``."""

from __future__ import annotations

import os
from typing import Any

import redis
import valkey

from echomq import App


def make_app(conn: Any, wire: int, periodic: bool = False) -> App:
    app = App(conn, "served", wire=wire, check_policy=False)

    @app.task(name="where", keep_result=True)
    def where() -> list[Any]:
        """The client library and wire the worker's App runs with."""
        return [type(app.conn).__module__.split(".")[0], app.wire]

    @app.task(name="tick")
    def tick() -> None:
        app.conn.incr("served:ticks")

    if periodic:
        app.periodic("* * * * * *", name="tick", catch_up=30)(tick)
    return app


def client_from_environment() -> Any:
    library = valkey.Valkey if os.environ.get("SERVED_APP_LIBRARY") == "valkey" else redis.Redis
    return library(host="127.0.0.1", port=int(os.environ.get("SERVED_APP_PORT", "1")))


app = make_app(client_from_environment(), int(os.environ.get("SERVED_APP_WIRE", "5")),
               periodic=os.environ.get("SERVED_APP_PERIODIC") == "1")
