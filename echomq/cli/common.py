"""What the commands share: the ``--url``, ``--json`` and ``--wire`` options, the connection
to the server, JSON and line output, and the signals a foreground command stops on."""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

import click
import redis
from redis.cluster import RedisCluster

from echomq.cli.errors import URL_META, bad_url
from echomq.ops import admin
from echomq.queue.connection import shown_url

# Where a worker serving a handler (or an App with no connection of one server) looks.
DEFAULT_URL = "redis://127.0.0.1:6379"
# --wire takes the number or the name: 5 or scripts, 6 or native; or auto (the default: native
# where the server has trafikey, else scripts).
WIRE_CHOICES = ["auto", "5", "6", "scripts", "native"]

url_option = click.option("--url", envvar="ECHOMQ_URL", default="redis://127.0.0.1:6379",
                          show_default=True, show_envvar=True, help="the Valkey server")
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON, for scripts")


# The client's timeouts, on a single server and on each node of a cluster.
TIMEOUTS = {"socket_connect_timeout": 5, "socket_timeout": 30}


def connect(url: str) -> redis.Redis | RedisCluster:
    """A client of the server at ``url``; of the whole cluster (``RedisCluster``, which learns
    the other nodes from this one) when the server says it is a cluster node
    (``cluster_enabled:1`` in ``INFO cluster``: one round trip)."""
    shown = shown_url(url)  # every message names the server so: a password is never printed
    click.get_current_context().meta[URL_META] = shown
    try:
        conn = redis.Redis.from_url(url, **TIMEOUTS)
    except ValueError as exc:
        raise bad_url(shown, exc) from exc
    if not _cluster_node(conn):
        return conn
    conn.close()
    return RedisCluster.from_url(url, **TIMEOUTS)


def _cluster_node(conn: redis.Redis) -> bool:
    """Whether the server is a cluster node; False when it refuses to say (an ACL without
    INFO) or cannot be reached: the command then runs on this server alone, and meets the
    same error in its own words."""
    try:
        return bool(conn.info("cluster").get("cluster_enabled"))
    except (redis.ResponseError, redis.ConnectionError, redis.TimeoutError):
        return False


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, default=_jsonable))


def emit(as_json: bool, value: Any, lines: Callable[[], Iterable[str]]) -> None:
    if as_json:
        print_json(value)
    else:
        for line in lines():
            click.echo(line)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return admin.shown(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


_TERMINATED = threading.Event()


def interrupt_on_sigterm() -> None:
    """Take SIGTERM as Ctrl-C (KeyboardInterrupt in the main thread), so a command stopped by a
    service manager, or started where SIGINT is ignored, cleans up the way Ctrl-C does. The
    signal is also noted for ``check_terminated``: a raise that lands in a finalizer (a
    ``__del__`` run by the garbage collector) is ignored by Python."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        _TERMINATED.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def check_terminated() -> None:
    """KeyboardInterrupt when SIGTERM came (after ``interrupt_on_sigterm``): called between the
    steps of a long command, so a stop whose first raise was ignored still ends it."""
    if _TERMINATED.is_set():
        raise KeyboardInterrupt


def stop_on_signals() -> threading.Event:
    """An event that SIGINT or SIGTERM sets."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop
