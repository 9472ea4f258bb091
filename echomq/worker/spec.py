"""What a worker runs and where: the spec sent to each process, the target it loads (a handler or
an App) and the checks of the server before any process starts."""

from __future__ import annotations

import importlib
import json
import logging
import signal
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis
from redis.cluster import RedisCluster

from echomq.consumer.blocking import refuse_unsupported
from echomq.consumer.loop import PARK_CAP_MS, PREFETCH
from echomq.engine.clients import async_twin, is_cluster
from echomq.engine.errors import EchoMQError, TrafikeyMissing
from echomq.engine.transitions import CLAIM
from echomq.engine.wire import Wire, wire_of
from echomq.queue.blocking import DEFAULT_LEASE_MS
from echomq.queue.connection import client_like, client_options, redis_from_url, tcp_url

log = logging.getLogger("echomq")

LOG_FORMAT = "%(asctime)s %(levelname)s echomq[%(process)d]: %(message)s"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
EXIT_OVERRUN = 3  # a child's exit code after a job overran its time limit
QUICK_DEATH_S = 1.0
# Beyond the time limit, how long a process whose plain task overran waits for its other jobs
# in flight to be settled before it exits anyway.
DRAIN_SLACK_S = 10.0
START_TRIES = 3
MAX_BACKOFF_S = 10.0


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs to build its consumer (sent to it as JSON).

    ``url``: the server; None serves the target App's own (its connection rebuilt in each
    process: ``connect``). ``queue``: one queue, or several in priority order. ``max_attempts``:
    None keeps the queue's. ``time_limit_ms``: None for no limit. ``async_concurrency``: None
    runs the blocking consumer; N the asyncio one with N handlers in flight (an App with async
    tasks; its plain ones run in threads, N at most). ``events``: the queues' calls append their
    changes to the events streams (an App made with ``events=True`` has them do so anyway)."""

    handler: str
    queue: str | tuple[str, ...]
    url: str | None
    lanes: bool = False
    events: bool = False
    wire: int = Wire.AUTO
    lease_ms: int = DEFAULT_LEASE_MS
    retry_delay_ms: int = 1_000
    max_attempts: int | None = None
    park_cap_ms: int = PARK_CAP_MS
    on_ack: str | None = None
    log_level: str = "INFO"
    time_limit_ms: int | None = None
    prefetch: int = PREFETCH
    async_concurrency: int | None = None
    metrics_dir: str | None = None  # count jobs in prometheus_client files there
    debug: bool = False  # a start failure logs its traceback, not one line

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues served, in priority order."""
        return (self.queue,) if isinstance(self.queue, str) else tuple(self.queue)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        fields = json.loads(text)
        if isinstance(fields["queue"], list):
            fields["queue"] = tuple(fields["queue"])
        return cls(**fields)


class WorkersFailed(EchoMQError):
    """The worker processes kept failing at start; the supervisor gave up."""


def load_object(target: str) -> Any:
    """Import ``module:attribute`` (attribute may be dotted) and return it."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:NAME, got {target!r}")
    found: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def load_callable(target: str) -> Callable[..., Any]:
    """Import ``module:attribute`` and return it, if it is callable."""
    found = load_object(target)
    if not callable(found):
        raise TypeError(f"{target} is not callable")
    return found  # type: ignore[no-any-return]


def is_app(found: Any) -> bool:
    """Whether a worker's target is an App (its ``handler`` runs the jobs of its ``queues``)
    rather than a handler."""
    return hasattr(found, "handler") and hasattr(found, "queues")


def load_target(target: str) -> Any:
    """The App or the handler ``target`` names; TypeError for anything else."""
    found = load_object(target)
    if not is_app(found) and not callable(found):
        raise TypeError(f"{target} is neither a handler nor an App")
    return found


def app_queues(app: Any) -> tuple[str, ...]:
    """The names of the queues an App's tasks use, its default queue first."""
    names = [getattr(queue, "name", queue) for queue in app.queues]
    if isinstance(app.queues, dict):
        names = list(app.queues)
    first = getattr(getattr(app, "queue", None), "name", None)
    if first in names:
        names.remove(first)
        names.insert(0, first)
    return tuple(str(name) for name in names)


def runs_async(app: Any) -> bool:
    """Whether ``app`` has an ``async def`` task: then the asyncio consumer serves it, running
    its plain tasks (if any) in threads beside the async ones."""
    tasks = getattr(app, "tasks", None)
    found = list(tasks.values()) if isinstance(tasks, dict) else list(tasks or ())
    return hasattr(app, "async_handler") and any(getattr(task, "is_async", False)
                                                 for task in found)


def check_spec(spec: WorkerSpec) -> None:
    """Fail before any process starts: the target and hook import, the queues are given,
    the wire can drain."""
    target = load_target(spec.handler)
    if spec.url is None and getattr(target, "conn", None) is None:
        raise ValueError(f"no server to serve: {spec.handler} has no connection of its own; "
                         "give a URL")
    if spec.on_ack:
        load_callable(spec.on_ack)
    if not spec.queues or not all(spec.queues):
        raise ValueError("no queue to serve: give --queue (or a target App with queues)")
    if spec.async_concurrency is not None and spec.async_concurrency < 1:
        raise ValueError("async_concurrency must be at least 1")
    wire_of(spec.wire)  # 5, 6 or auto
    refuse_unsupported(spec.wire, spec.lanes)


def check_server(conn: Any, wire: int) -> None:
    """Raise what keeps this server from serving a worker at all: no connection (a redis
    error), or for ``wire=6`` no trafikey (TrafikeyMissing). Changes nothing."""
    conn.ping()
    if wire == Wire.NATIVE and CLAIM.native is not None:
        # One string, so redis-py's COMMAND parser (which fails on a nil entry) is not used.
        found = conn.execute_command("COMMAND INFO", CLAIM.native)
        if not found or found[0] is None:
            raise TrafikeyMissing(CLAIM.native)


def cluster_or_server(url: str) -> Any:
    """A worker's client of the server at ``url``: of the whole cluster (``RedisCluster``,
    which learns the other nodes from this one) when the server says it is a cluster node
    (``cluster_enabled:1`` in ``INFO cluster``), as the command line's own client is."""
    conn = redis_from_url(url)
    try:
        clustered = bool(conn.info("cluster").get("cluster_enabled"))
    except (redis.ResponseError, redis.ConnectionError, redis.TimeoutError):
        return conn  # the server alone then meets the same error in its own words
    if not clustered:
        return conn
    conn.close()
    return RedisCluster.from_url(tcp_url(url), **client_options(url, {}))


def async_connect(spec: WorkerSpec, conn: Any) -> Any:
    """A new asyncio client to the server ``conn`` (the worker's blocking client) talks to:
    ``spec.url``'s, of the whole cluster when ``conn`` is a cluster client (the asyncio
    ``RedisCluster``, learning the other nodes from that one); without a URL, the twin of
    ``conn`` (the App's own connection rebuilt)."""
    if spec.url is None:
        return async_twin(conn)
    if is_cluster(conn):
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

        return AsyncRedisCluster.from_url(tcp_url(spec.url))
    import redis.asyncio as aredis

    return aredis.Redis.from_url(spec.url)


def connect(spec: WorkerSpec, target: Any = None) -> Any:
    """A new blocking client to the server the workers serve: ``spec.url``'s, or (no URL) the
    target App's own connection rebuilt, of its client library
    (``echomq.queue.connection.client_like``);
    ``target``: the App (None: loaded)."""
    if spec.url is not None:
        return cluster_or_server(spec.url)
    app = load_target(spec.handler) if target is None else target
    return client_like(app.conn)


def probe_server(spec: WorkerSpec, target: Any = None) -> None:
    """``check_server`` on a connection of its own, closed after."""
    conn = connect(spec, target)
    try:
        check_server(conn, spec.wire)
    finally:
        conn.close()
