"""``echomq worker`` (supervised worker processes serving a handler or an App, its checks made
before anything starts) and ``echomq workers`` (the live ones, from their registry)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import click
import redis

from echomq.cli.args import check_worker_queues, load_failure
from echomq.cli.common import (
    DEFAULT_URL,
    WIRE_CHOICES,
    connect,
    json_option,
    print_json,
    url_option,
)
from echomq.cli.errors import BAD_INPUT, Failure, failure_for
from echomq.consumer.loop import MAX_PREFETCH, PARK_CAP_MS, PREFETCH
from echomq.consumer.roster import live_workers
from echomq.engine.clients import twins
from echomq.engine.errors import EchoMQError, MetricsUnavailable, Wire6Unsupported
from echomq.engine.server_time import server_ms
from echomq.engine.wire import Wire, wire_of


def _metrics_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--metrics-port`` and ``--metrics-addr``: where a worker serves its Prometheus metrics."""
    command = click.option("--metrics-addr", default="127.0.0.1", show_default=True,
                           help="the address /metrics listens on (0.0.0.0 for every interface)"
                           )(command)
    return click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
                        help="serve Prometheus metrics on this port: the jobs of every worker "
                        "process summed, and the depths of the server's queues")(command)


@click.command()
@click.argument("handler", metavar="MODULE:HANDLER|MODULE:APP")
@click.option("--queue", "-q", "queue_names", multiple=True,
              help="a queue to consume; repeat it to serve several in strict priority order, "
              "the first first  [default with an App: the App's queues]")
@click.option("--lanes", is_flag=True,
              help="claim through the lanes in turn (their scripts: not on wire 6)")
@click.option("--events", is_flag=True,
              help="append each change to the queue's events stream, as the producers of an "
              "evented queue do  [default with an App: the App's events flag]")
@click.option("--concurrency", "-c", default=1, show_default=True, type=click.IntRange(1),
              help="worker processes")
@click.option("--url", envvar="ECHOMQ_URL", default=None, show_envvar=True,
              help="the Valkey server; an App's must be its own  [default: an App's own "
              f"connection, else {DEFAULT_URL}]")
@click.option("--wire", type=click.Choice(WIRE_CHOICES), default=None,
              help="auto (trafikey's EMQ.* commands where the server has the module, else "
              "scripts), 5 or scripts (EVALSHA), 6 or native (EMQ.* only)  [default: an App's "
              "wire, else auto]")
@click.option("--grace", default=30.0, show_default=True, type=click.FloatRange(0),
              help="seconds running jobs get to finish after SIGTERM/SIGINT")
@click.option("--lease-ms", default=30_000, show_default=True, type=click.IntRange(1))
@click.option("--retry-delay-ms", default=1_000, show_default=True, type=click.IntRange(0))
@click.option("--max-attempts", default=None, type=click.IntRange(1),
              help="attempts before a job goes dead  [default: the queue's]")
@click.option("--time-limit", default=None, type=click.FloatRange(0, min_open=True),
              metavar="SECONDS", help="a job running longer fails its attempt (retried or "
              "dead) and its worker process is replaced  [default: no limit]")
@click.option("--park-cap-ms", default=PARK_CAP_MS, show_default=True, type=click.IntRange(1),
              help="longest park on the wake key when nothing can fall due sooner")
@click.option("--prefetch", default=PREFETCH, show_default=True,
              type=click.IntRange(1, MAX_PREFETCH),
              help="most jobs a process holds leased at once (claimed in one batch, run one at "
              "a time; a job claimed before runs alone), at most "
              f"{MAX_PREFETCH:,}; 1 claims one job at a time, as --max-attempts 1 wants")
@click.option("--on-ack", metavar="MODULE:FUNC", default=None,
              help="called with each job once its ack returned ACKED")
@click.option("--async-concurrency", default=None, type=click.IntRange(1, MAX_PREFETCH),
              help="jobs in flight per process for an App with async def tasks (the asyncio "
              "consumer; its plain tasks run in threads beside them); refused for any other "
              "target  [default: 10]")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@_metrics_options
def worker(handler: str, queue_names: tuple[str, ...], lanes: bool, events: bool,
           concurrency: int,
           url: str | None, wire: str | None, grace: float, lease_ms: int, retry_delay_ms: int,
           max_attempts: int | None, time_limit: float | None, park_cap_ms: int, prefetch: int,
           on_ack: str | None, async_concurrency: int | None, log_level: str,
           metrics_port: int | None,
           metrics_addr: str) -> None:
    """Run CONCURRENCY supervised worker processes calling MODULE:HANDLER(job) per job, or
    running the tasks of MODULE:APP (on the asyncio consumer when it has async def tasks). An
    App is served on its own connection (its server, options and client library) and its wire.

    A crashed worker is restarted; SIGTERM or SIGINT stops claiming, lets running jobs finish
    within the grace period and exits 0 (jobs cut short come back through their leases). A server
    that cannot serve the workers (unreachable, or wire 6 without trafikey), or workers that
    keep failing at start, end the command with status 1 and the reason."""
    from echomq.worker import WorkersFailed, WorkerSpec, check_spec, probe_server, run_workers

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # MODULE is found from where the command runs
    limit_ms = None if time_limit is None else max(1, round(time_limit * 1000))
    queues, async_in_flight = _worker_target(handler, queue_names, async_concurrency)
    check_worker_queues(queues)
    served_url, served_wire, shown = _served_server(handler, url, wire)
    spec = WorkerSpec(handler=handler, queue=queues, url=served_url, lanes=lanes, events=events,
                      wire=served_wire,
                      lease_ms=lease_ms, retry_delay_ms=retry_delay_ms,
                      max_attempts=max_attempts, park_cap_ms=park_cap_ms, on_ack=on_ack,
                      log_level=log_level.upper(), time_limit_ms=limit_ms,
                      prefetch=prefetch, async_concurrency=async_in_flight,
                      debug=bool(click.get_current_context().find_root().params.get("debug")))
    try:
        check_spec(spec)
    except (ImportError, SyntaxError, AttributeError) as exc:
        raise load_failure(on_ack or handler, exc) from exc
    except (ValueError, TypeError, Wire6Unsupported) as exc:
        raise click.UsageError(f"{type(exc).__name__}: {exc}") from exc
    try:
        probe_server(spec)
    except twins(redis.RedisError, EchoMQError) as exc:
        raise _cannot_serve(queues, shown, exc, own=served_url is None) from exc
    try:
        metrics_at = None if metrics_port is None else (metrics_addr, metrics_port)
        sys.exit(run_workers(spec, concurrency, grace, metrics_at))
    except WorkersFailed as exc:
        raise Failure(str(exc), "fix what the worker's start raised (the log above says where); "
                      "run again with --debug for its traceback") from exc
    except MetricsUnavailable as exc:
        raise click.ClickException(str(exc)) from exc


def _cannot_serve(queues: tuple[str, ...], url: str, exc: BaseException, *,
                  own: bool) -> Failure:
    """The server (``url``, shown without credentials) cannot serve the workers: exit 1 (the
    worker's contract), with the hint the other commands give for the same error; an App served
    on its ``own`` connection names its server itself, so an unreachable one is told so."""
    known = failure_for(exc)
    hint = known.hint if known is not None else "check --url and the server's log"
    if own and isinstance(exc, twins(redis.ConnectionError, redis.TimeoutError)):
        hint = "is the server running? the App's connection names it; `echomq serve` starts one"
    return Failure(f"cannot serve queue {', '.join(queues)} from {url}: "
                   f"{type(exc).__name__}: {exc}", hint)


DEFAULT_ASYNC_CONCURRENCY = 10


def _served_server(target: str, url: str | None, wire: str | None
                   ) -> tuple[str | None, int, str]:
    """The URL a worker's spec names (None: the App's own connection), its wire, and the server
    as messages show it. An App with a connection of one server is served on that connection
    and on its wire unless ``--wire`` says otherwise; a ``--url`` (or ECHOMQ_URL) naming another
    server is bad input: its periodic tasks would be admitted where no worker runs."""
    from echomq.queue.connection import server_of, server_of_url, shown_server, shown_url
    from echomq.worker import is_app, load_target

    found = load_target(target)
    app_conn = getattr(found, "conn", None) if is_app(found) else None
    if getattr(app_conn, "connection_pool", None) is None:  # a handler, or a cluster App
        chosen = url or DEFAULT_URL
        connect(chosen)  # a URL that is not one is bad input (exit 2), like any command's
        return chosen, wire_of(wire or Wire.AUTO), shown_url(chosen)
    served_wire = wire_of(wire if wire else getattr(found, "wire", Wire.AUTO))
    if url is not None:
        asked = connect(url)
        if server_of_url(url) != server_of(app_conn):
            raise Failure(f"--url {shown_server(asked)} is not the server of {target}, "
                          f"{shown_server(app_conn)}",
                          "drop --url (and ECHOMQ_URL): a worker serves its App's own server",
                          BAD_INPUT)
    return None, served_wire, shown_server(app_conn)


def _worker_target(target: str, queue_names: tuple[str, ...],
                   async_concurrency: int | None) -> tuple[tuple[str, ...], int | None]:
    """The queues a worker serves (``--queue``, else an App's) and its jobs in flight per
    process on the asyncio consumer (None: the blocking one). A target that does not load is
    bad input, and so is ``--async-concurrency`` for one the asyncio consumer does not run."""
    from echomq.worker import app_queues, is_app, load_target, runs_async

    try:
        found = load_target(target)
    except Exception as exc:  # whatever the module raises as it loads is the target's fault
        raise load_failure(target, exc) from exc
    if not is_app(found) and not queue_names:
        raise click.UsageError("give --queue (a handler has no queues of its own)")
    if not runs_async(found):
        if async_concurrency is not None:
            raise _async_refused(target, "an App with no async def task"
                                 if is_app(found) else "a handler")
        return queue_names or app_queues(found), None
    return queue_names or app_queues(found), async_concurrency or DEFAULT_ASYNC_CONCURRENCY


def _async_refused(target: str, what: str) -> Failure:
    """``--async-concurrency`` given for a target that runs one job at a time per process."""
    return Failure(f"--async-concurrency applies only to an App with async def tasks; "
                   f"{target} is {what}",
                   "drop --async-concurrency; use --concurrency N to run N worker processes",
                   BAD_INPUT)


@click.command()
@url_option
@json_option
def workers(url: str, as_json: bool) -> None:
    """The live worker processes: host, pid, queue, wire, and as at the last beat the jobs in
    hand, the latest and how long it had run; jobs done and failed, last beat. A worker that
    dies unannounced drops out within its expiry."""
    from echomq.cli.views import print_workers  # only here: ``echomq worker`` never draws tables

    conn = connect(url)
    found = live_workers(conn)
    if as_json:
        print_json([w.as_dict() for w in found])
        return
    print_workers(found, server_ms(conn))
