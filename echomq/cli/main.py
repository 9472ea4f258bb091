"""The ``echomq`` command line."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

import click
import redis
from rich.text import Text

from echomq.cli.args import (
    COUNT,
    MAX_COUNT,
    QUEUE,
    DeadFilter,
    check_worker_queues,
    load_failure,
    requeue_targets,
)
from echomq.cli.demo import run_demo
from echomq.cli.errors import (
    BAD_INPUT,
    URL_META,
    ErrorReportingGroup,
    Failure,
    bad_url,
    failure_for,
)
from echomq.cli.views import (
    LANES_SHOWN,
    human_age,
    one_line,
    print_job,
    print_lanes,
    print_stats,
    print_workers,
)
from echomq.cli.views import console as _console
from echomq.cli.views import table as _table
from echomq.consumer.loop import MAX_PREFETCH, PARK_CAP_MS, PREFETCH
from echomq.consumer.presence import WorkerInfo, counts_by_queue, live_workers, running_by_queue
from echomq.embedded import EmbeddedValkey
from echomq.engine.clients import twins
from echomq.engine.errors import EchoMQError, MetricsUnavailable, Wire6Unsupported
from echomq.engine.server_time import server_ms
from echomq.engine.wire import Wire, wire_of
from echomq.ops import admin
from echomq.queue.blocking import Queue, recover_due
from echomq.queue.ids import new_job_id
from echomq.queue.lanes import lane_report

# Where a worker serving a handler (or an App with no connection of one server) looks.
DEFAULT_URL = "redis://127.0.0.1:6379"
# --wire takes the number or the name: 5 or scripts, 6 or native.
WIRE_CHOICES = ["5", "6", "scripts", "native"]


@click.group(cls=ErrorReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="echomq", message="echomq %(version)s")
@click.option("--debug", is_flag=True, envvar="ECHOMQ_DEBUG",
              help="show the traceback of an error instead of one line and a hint")
def main(debug: bool) -> None:
    """echomq: a reliable, fair job queue on Valkey.

    Exit codes: 0 done; 1 failed (no such job, a job that is not dead, ...); 2 bad usage or
    input (a wrong URL, a bad job id); 3 the server cannot be reached; 4 the server refused
    (trafikey not loaded, NOPERM, wrong password)."""


@main.command()
@click.option("--greedy-jobs", default=6_000, show_default=True, type=click.IntRange(1),
              help="jobs the greedy tenant floods the queue with")
@click.option("--tenants", default=5, show_default=True, type=click.IntRange(1),
              help="small tenants")
@click.option("--per-tenant", default=100, show_default=True, type=click.IntRange(1))
@click.option("--workers", default=4, show_default=True, type=click.IntRange(1))
def demo(greedy_jobs: int, tenants: int, per_tenant: int, workers: int) -> None:
    """Run a short demonstration on an embedded valkey-server with trafikey loaded."""
    _interrupt_on_sigterm()
    run_demo(greedy_jobs, tenants, per_tenant, workers, say=click.echo)


def _metrics_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--metrics-port`` and ``--metrics-addr``: where a worker serves its Prometheus metrics."""
    command = click.option("--metrics-addr", default="127.0.0.1", show_default=True,
                           help="the address /metrics listens on (0.0.0.0 for every interface)"
                           )(command)
    return click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
                        help="serve Prometheus metrics on this port: the jobs of every worker "
                        "process summed, and the depths of the server's queues")(command)


@main.command()
@click.argument("handler", metavar="MODULE:HANDLER|MODULE:APP")
@click.option("--queue", "-q", "queue_names", multiple=True,
              help="a queue to consume; repeat it to serve several in strict priority order, "
              "the first first  [default with an App: the App's queues]")
@click.option("--lanes", is_flag=True, help="claim through the lanes in turn (wire 5 only)")
@click.option("--concurrency", "-c", default=1, show_default=True, type=click.IntRange(1),
              help="worker processes")
@click.option("--url", envvar="ECHOMQ_URL", default=None, show_envvar=True,
              help="the Valkey server; an App's must be its own  [default: an App's own "
              f"connection, else {DEFAULT_URL}]")
@click.option("--wire", type=click.Choice(WIRE_CHOICES), default=None,
              help="5 or scripts (EVALSHA), 6 or native (trafikey's EMQ.* commands)  [default: an "
              "App's wire, else 5]")
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
def worker(handler: str, queue_names: tuple[str, ...], lanes: bool, concurrency: int,
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
    spec = WorkerSpec(handler=handler, queue=queues, url=served_url, lanes=lanes, wire=served_wire,
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
        raise _cannot_serve(queues, shown, exc) from exc
    try:
        metrics_at = None if metrics_port is None else (metrics_addr, metrics_port)
        sys.exit(run_workers(spec, concurrency, grace, metrics_at))
    except WorkersFailed as exc:
        raise Failure(str(exc), "fix what the worker's start raised (the log above says where); "
                      "run again with --debug for its traceback") from exc
    except MetricsUnavailable as exc:
        raise click.ClickException(str(exc)) from exc


def _cannot_serve(queues: tuple[str, ...], url: str, exc: BaseException) -> Failure:
    """The server cannot serve the workers: exit 1 (the worker's contract), with the hint the
    other commands give for the same error."""
    known = failure_for(exc)
    return Failure(f"cannot serve queue {', '.join(queues)} from {url}: "
                   f"{type(exc).__name__}: {exc}",
                   known.hint if known is not None else "check --url and the server's log")


DEFAULT_ASYNC_CONCURRENCY = 10


def _served_server(target: str, url: str | None, wire: str | None
                   ) -> tuple[str | None, int, str]:
    """The URL a worker's spec names (None: the App's own connection), its wire, and the server
    as messages show it. An App with a connection of one server is served on that connection
    and on its wire unless ``--wire`` says otherwise; a ``--url`` (or ECHOMQ_URL) naming another
    server is bad input: its periodic tasks would be admitted where no worker runs."""
    from echomq.queue.connection import server_of, server_of_url, shown_server
    from echomq.worker import is_app, load_target

    found = load_target(target)
    app_conn = getattr(found, "conn", None) if is_app(found) else None
    if getattr(app_conn, "connection_pool", None) is None:  # a handler, or a cluster App
        chosen = url or DEFAULT_URL
        _connect(chosen)  # a URL that is not one is bad input (exit 2), like any command's
        return chosen, wire_of(wire or Wire.SCRIPTS), chosen
    served_wire = wire_of(wire if wire else int(getattr(found, "wire", Wire.SCRIPTS)))
    if url is not None:
        asked = _connect(url)
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


# operator commands ---------------------------------------------------------------------------

url_option = click.option("--url", envvar="ECHOMQ_URL", default="redis://127.0.0.1:6379",
                          show_default=True, show_envvar=True, help="the Valkey server")
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON, for scripts")


def _connect(url: str) -> redis.Redis:
    click.get_current_context().meta[URL_META] = url
    try:
        conn = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    except ValueError as exc:
        raise bad_url(url, exc) from exc
    return conn


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, default=_jsonable))


def _emit(as_json: bool, value: Any, lines: Callable[[], Iterable[str]]) -> None:
    if as_json:
        _print_json(value)
    else:
        for line in lines():
            click.echo(line)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return admin.shown(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


@main.command()
@click.argument("queue", type=QUEUE)
@click.argument("payload")
@click.option("--id", "job_id", default=None, help="the job id (default: a new time-sortable id)")
@click.option("--lane", default=None, help="the group's lane to join")
@click.option("--wire", type=click.Choice(WIRE_CHOICES), default="5", show_default=True)
@url_option
@json_option
def enqueue(queue: str, payload: str, job_id: str | None, lane: str | None, wire: str, url: str,
            as_json: bool) -> None:
    """Admit one job with PAYLOAD into QUEUE."""
    job_id = job_id or new_job_id()
    conn = _connect(url)
    verdict = Queue(conn, queue, wire=wire_of(wire)).enqueue(job_id, payload.encode(), lane=lane)
    admin.register_queue(conn, queue)
    _emit(as_json, {"id": job_id, "verdict": verdict.value},
          lambda: [f"{verdict.value} {job_id}"])


@main.command()
@click.argument("queue", required=False, type=QUEUE)
@click.option("--rescan", is_flag=True,
              help="search the keyspace again for queues missing from the registry")
@click.option("--lanes", "lanes_shown", default=LANES_SHOWN, show_default=True,
              type=click.IntRange(0, MAX_COUNT), help="with QUEUE: list this many of its "
              "lanes, deepest first (0: none)")
@click.option("--lanes-from", default=0, show_default=True, type=click.IntRange(0, MAX_COUNT),
              help="with QUEUE: skip this many of the deepest lanes (a page further)")
@url_option
@json_option
def stats(queue: str | None, rescan: bool, lanes_shown: int, lanes_from: int, url: str,
          as_json: bool) -> None:
    """Depths of QUEUE (or of every queue): pending, active (leased, prefetched leases too),
    running (jobs in its workers' hands at their last beat), delayed, dead, lanes, oldest
    waiting job (flat or in a lane), pause, and its live workers. With QUEUE, its deepest
    lanes."""
    conn = _connect(url)
    if rescan:
        admin.discover_queues(conn)
    found = [admin.stats(conn, name) for name in ([queue] if queue else admin.queue_names(conn))]
    if queue and _holds_anything(found[0]):
        admin.register_queue(conn, queue)
    elif queue and not admin.is_listed(conn, queue):
        raise Failure(f"no queue {queue}: it is not listed and holds nothing",
                      "`echomq stats` lists the queues (--rescan searches the keyspace again)")
    live = _workers_or_none(conn)
    if as_json:
        serving, running = counts_by_queue(live), running_by_queue(live)
        _print_json([{**s.as_dict(), "workers": serving.get(s.name, 0),
                      "running": running.get(s.name, 0)} for s in found])
        return
    print_stats(found, live, lanes_shown if queue else 0, lanes_from)


def _workers_or_none(conn: redis.Redis) -> list[WorkerInfo]:
    """The live workers; none when the server refuses to show the registry (an ACL), so the
    depths still show."""
    try:
        return live_workers(conn)
    except redis.ResponseError:
        return []


def _holds_anything(s: admin.QueueStats) -> bool:
    return bool(s.pending or s.active or s.delayed or s.dead or s.lanes or s.paused)


@main.command()
@url_option
@json_option
def workers(url: str, as_json: bool) -> None:
    """The live worker processes: host, pid, queue, wire, and as at the last beat the jobs in
    hand, the latest and how long it had run; jobs done and failed, last beat. A worker that
    dies unannounced drops out within its expiry."""
    conn = _connect(url)
    found = live_workers(conn)
    if as_json:
        _print_json([w.as_dict() for w in found])
        return
    print_workers(found, server_ms(conn))


@main.command()
@click.argument("queue", type=QUEUE)
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def inspect(queue: str, job_id: str, url: str, as_json: bool) -> None:
    """Show the row of job ID in QUEUE and where the job is."""
    conn = _connect(url)
    found = admin.inspect(conn, queue, job_id)
    if found is None:
        raise Failure(f"no job {job_id} in queue {queue}",
                      f"`echomq stats {queue}` shows what the queue holds; completed jobs are "
                      "kept only for their retention")
    if as_json:
        _print_json(found)
        return
    print_job(job_id, queue, found, server_ms(conn))


@main.group()
def dead() -> None:
    """Dead jobs: list them, run them again, or forget them."""


@dead.command("list")
@click.argument("queue", type=QUEUE)
@click.option("--limit", default=100, show_default=True, type=COUNT)
@url_option
@json_option
def dead_list(queue: str, limit: int, url: str, as_json: bool) -> None:
    """The dead jobs of QUEUE, oldest death first, with their last errors."""
    conn = _connect(url)
    jobs = admin.dead_jobs(conn, queue, limit)
    if as_json:
        _print_json(jobs)
        return
    if not jobs:
        _console().print(f"no dead jobs in {queue}")
        return
    now = server_ms(conn)
    table = _table("job", "task", "attempts", "lane", "died", "error")
    for j in jobs:
        table.add_row(Text(j.id), Text(j.task or "-"), str(j.attempts), Text(j.lane or "-"),
                      f"{human_age(max(0, now - j.died_at_ms))} ago", Text(one_line(j.error)))
    _console().print(table)


@dead.command("requeue")
@click.argument("queue", type=QUEUE)
@click.argument("job_ids", nargs=-1, metavar="[ID...]")
@click.option("--all", "every", is_flag=True, help="every dead job of QUEUE (that the filters "
              "keep), instead of ID...")
@click.option("--error", "error_has", default=None, metavar="TEXT",
              help="with --all: only the jobs whose last error contains TEXT")
@click.option("--lane", default=None, help="with --all: only the jobs of this lane (group)")
@click.option("--task", default=None, help="with --all: only the jobs calling this task")
@url_option
@json_option
def dead_requeue(queue: str, job_ids: tuple[str, ...], every: bool, error_has: str | None,
                 lane: str | None, task: str | None, url: str, as_json: bool) -> None:
    """Run dead jobs ID... of QUEUE again (or, with --all, every dead job the filters keep),
    with fresh attempts. Exits 1 if any ID given was not dead (the others are requeued all the
    same)."""
    conn = _connect(url)
    job_ids = requeue_targets(conn, queue, job_ids, every,
                              DeadFilter(error_has=error_has, lane=lane, task=task))
    done = {job_id: admin.requeue(conn, queue, job_id) for job_id in job_ids}
    _emit(as_json, done, lambda: [f"{'REQUEUED' if ok else 'NOT_DEAD'} {job_id}"
                                  for job_id, ok in done.items()] or ["requeued 0"])
    missing = [job_id for job_id, ok in done.items() if not ok]
    if missing and not every:
        raise Failure(f"{len(missing)} of {len(done)} not dead in {queue}: {' '.join(missing)}",
                      f"`echomq dead list {queue}` shows its dead jobs")


@dead.command("purge")
@click.argument("queue", type=QUEUE)
@click.option("--limit", default=1000, show_default=True, type=COUNT)
@url_option
@json_option
def dead_purge(queue: str, limit: int, url: str, as_json: bool) -> None:
    """Forget up to LIMIT dead jobs of QUEUE (oldest first), deleting their rows."""
    purged = admin.purge(_connect(url), queue, limit=limit)
    _emit(as_json, {"purged": purged}, lambda: [f"purged {purged}"])


@main.command()
@click.argument("queue", type=QUEUE)
@url_option
def forget(queue: str, url: str) -> None:
    """Take QUEUE off the list of queues (its jobs stay; producing into it lists it again)."""
    if not admin.forget_queue(_connect(url), queue):
        raise Failure(f"{queue} is not a listed queue", "`echomq stats` lists them")
    click.echo(f"forgot {queue}")


@main.command()
@click.argument("queue", type=QUEUE)
@click.option("--wire", type=click.Choice(WIRE_CHOICES), default="5", show_default=True)
@url_option
@json_option
def recover(queue: str, wire: str, url: str, as_json: bool) -> None:
    """Return QUEUE's expired leases and promote its due retries now, every one that is due
    (in short steps of 1,000)."""
    recovered, promoted = recover_due(Queue(_connect(url), queue, wire=wire_of(wire)))
    moved = {"recovered": recovered, "promoted": promoted}
    _emit(as_json, moved, lambda: [f"recovered {moved['recovered']}, "
                                   f"promoted {moved['promoted']}"])


@main.command()
@click.argument("queue", type=QUEUE)
@click.option("--lane", default=None, help="pause only this lane (group); default: the queue")
@url_option
def pause(queue: str, lane: str | None, url: str) -> None:
    """Pause QUEUE (no job is leased, flat or lane) or one of its lanes (its jobs wait out of
    the ring). Jobs in hand run on."""
    Queue(_connect(url), queue, check_policy=False).pause(lane)
    click.echo(f"paused {queue}" + (f" lane {lane}" if lane else ""))


@main.command()
@click.argument("queue", type=QUEUE)
@click.option("--lane", default=None, help="resume only this lane (group); default: the queue")
@url_option
def resume(queue: str, lane: str | None, url: str) -> None:
    """Resume QUEUE or one of its lanes; parked workers wake."""
    Queue(_connect(url), queue, check_policy=False).resume(lane)
    click.echo(f"resumed {queue}" + (f" lane {lane}" if lane else ""))


@main.command()
@click.argument("queue", type=QUEUE)
@url_option
@json_option
def lanes(queue: str, url: str, as_json: bool) -> None:
    """QUEUE's lanes: each group's knobs, jobs waiting, leases held, ready or why parked."""
    q = Queue(_connect(url), queue, check_policy=False)
    whole, _ = q.paused()
    rows = lane_report(q)
    if as_json:
        _print_json({"paused": whole, "defaults": q.lane_settings(), "lanes": rows})
        return
    print_lanes(queue, whole, rows)


@main.command()
@click.option("--dir", "directory", default=None, type=click.Path(file_okay=False),
              help="keep the data in this directory (append-only file); default: a temp dir")
@click.option("--port", default=None, type=click.IntRange(1, 65535), help="default: a free one")
@click.option("--unix-socket", is_flag=True, help="listen on <dir>/valkey.sock instead")
def serve(directory: str | None, port: int | None, unix_socket: bool) -> None:
    """Run a valkey-server with trafikey loaded in the foreground, for development."""
    stop = _stop_on_signals()  # before anything starts: a stop during start-up is kept
    if directory:
        directory = os.path.abspath(directory)  # the server runs in its own directory
        os.makedirs(directory, exist_ok=True)
    server = EmbeddedValkey(directory=directory, port=port, persist=directory is not None,
                            unix_socket=unix_socket)
    with server:
        click.echo(f"valkey-server with trafikey at {server.url} (Ctrl-C or SIGTERM stops it)")
        click.echo(f"export ECHOMQ_URL={server.url}")
        _wait_for(stop, server)


def _interrupt_on_sigterm() -> None:
    """Take SIGTERM as Ctrl-C (KeyboardInterrupt in the main thread), so a command stopped by a
    service manager, or started where SIGINT is ignored, cleans up the way Ctrl-C does."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _stop_on_signals() -> threading.Event:
    """An event that SIGINT or SIGTERM sets."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _wait_for(stop: threading.Event, server: EmbeddedValkey) -> None:
    while not stop.wait(0.5):
        if server.process is None or server.process.poll() is not None:
            raise click.ClickException(f"valkey-server exited:\n{server.log()[-2000:]}")


LOOPBACK_ADDRESSES = ("127.0.0.1", "::1", "localhost")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="the address to listen on; anything but loopback is reachable by others")
@click.option("--port", default=8042, show_default=True, type=click.IntRange(0, 65535),
              help="0: a free one")
@click.option("--token", envvar="ECHOMQ_DASHBOARD_TOKEN", show_envvar=True, default=None,
              help="require it: as a bearer token, or as the basic-auth password")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME[:PORT]",
              help="a Host header to serve besides localhost, 127.0.0.1 and [::1] on this "
                   "port (the name people reach it by); repeatable")
@url_option
def dashboard(host: str, port: int, token: str | None, allow_hosts: tuple[str, ...],
              url: str) -> None:
    """Serve the web dashboard: queues, lanes, depths over the last hour, rates, dead jobs with
    their errors, requeue and purge. State changes need the page's CSRF token and its origin."""
    import uvicorn

    from echomq.ops.dashboard import LOOPBACK_HOSTS, create_app

    conn = _connect(url)
    conn.ping()  # one clear error now rather than a page of them later
    listener = _listen(host, port)
    bound = listener.getsockname()[1]
    allowed = [f"{name}:{bound}" for name in LOOPBACK_HOSTS] + list(allow_hosts)
    if host not in LOOPBACK_ADDRESSES:
        _warn_exposed(host, token)
    app = create_app(conn, allowed_hosts=allowed, token=token)
    shown_host = f"[{host}]" if ":" in host else host
    click.echo(f"echomq dashboard at http://{shown_host}:{bound}/ (Ctrl-C or SIGTERM stops it)")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    stop = _stop_on_signals()
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]},
                              name="echomq-dashboard", daemon=True)
    thread.start()  # off the main thread, so the signals stay ours
    while not stop.wait(0.5) and thread.is_alive():
        pass
    server.should_exit = True
    thread.join(timeout=10)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise Failure(f"cannot listen on {host}:{port}: {exc.strerror}",
                      "choose another --port (0 picks a free one)") from exc
    listener.listen(128)
    return listener


def _warn_exposed(host: str, token: str | None) -> None:
    click.secho(f"WARNING: the dashboard listens on {host}, not loopback: anyone who can reach "
                "this address can see your queues" + ("" if token else " and requeue or purge "
                "dead jobs, since no --token is set") + ".", err=True, fg="red", bold=True)
    click.secho("WARNING: serve it behind TLS, set --token (or ECHOMQ_DASHBOARD_TOKEN), and "
                "--allow-host the name it is reached by.", err=True, fg="red", bold=True)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """Run the benchmark harness of a source checkout (make bench; ARGS go to it)."""
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / "bench" / "__main__.py").is_file():
        raise click.ClickException("the benchmark lives in echomq's source checkout (bench/)")
    command = ["make", "-C", str(checkout), "bench", f"BENCH_ARGS={' '.join(args)}"]
    sys.exit(subprocess.call(command))


@main.command()
@click.option("--url", envvar="ECHOMQ_URL", required=True, show_envvar=True,
              help="the server to check, with trafikey loaded: redis://host:port[/db]")
@click.option("--seed", default=None, type=int, help="the random sequence's seed  [default: new]")
@click.option("--random-steps", default=500, show_default=True, type=click.IntRange(0))
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
def conformance(url: str, seed: int | None, random_steps: int, as_json: bool) -> None:
    """Check that both executors agree on a server: every case, RESP2 and RESP3, and a seeded
    random sequence, in scratch keys of its own that it removes afterwards."""
    from echomq.conformance.runner import run

    sys.exit(run(url, seed, random_steps, as_json, click.echo))
