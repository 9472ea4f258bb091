"""The ``echomq`` command line."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any

import click
import redis

from echomq import admin
from echomq.demo import run_demo
from echomq.embedded import EmbeddedValkey
from echomq.errors import EchoMQError, Wire6Unsupported
from echomq.ids import new_job_id
from echomq.queue import Queue


@click.group()
def main() -> None:
    """echomq: a reliable, fair job queue on Valkey."""


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


@main.command()
@click.argument("handler", metavar="MODULE:HANDLER")
@click.option("--queue", "-q", "queue_name", required=True, help="the queue to consume")
@click.option("--lanes", is_flag=True, help="claim through the lanes in turn (wire 5 only)")
@click.option("--concurrency", "-c", default=1, show_default=True, type=click.IntRange(1),
              help="worker processes")
@click.option("--url", envvar="ECHOMQ_URL", default="redis://127.0.0.1:6379",
              show_default=True, show_envvar=True, help="the Valkey server")
@click.option("--wire", type=click.Choice(["5", "6"]), default="5", show_default=True,
              help="5: scripts (EVALSHA), 6: trafikey's native EMQ.* commands")
@click.option("--grace", default=30.0, show_default=True, type=click.FloatRange(0),
              help="seconds running jobs get to finish after SIGTERM/SIGINT")
@click.option("--lease-ms", default=30_000, show_default=True, type=click.IntRange(1))
@click.option("--retry-delay-ms", default=1_000, show_default=True, type=click.IntRange(0))
@click.option("--max-attempts", default=None, type=click.IntRange(1),
              help="attempts before a job goes dead  [default: the queue's]")
@click.option("--time-limit", default=None, type=click.FloatRange(0, min_open=True),
              metavar="SECONDS", help="a job running longer fails its attempt (retried or "
              "dead) and its worker process is replaced  [default: no limit]")
@click.option("--park-cap-ms", default=5_000, show_default=True, type=click.IntRange(1),
              help="longest park on the wake key")
@click.option("--on-ack", metavar="MODULE:FUNC", default=None,
              help="called with each job once its ack returned ACKED")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def worker(handler: str, queue_name: str, lanes: bool, concurrency: int, url: str, wire: str,
           grace: float, lease_ms: int, retry_delay_ms: int, max_attempts: int | None,
           time_limit: float | None, park_cap_ms: int, on_ack: str | None,
           log_level: str) -> None:
    """Run CONCURRENCY supervised worker processes calling MODULE:HANDLER(job) per job.

    A crashed worker is restarted; SIGTERM or SIGINT stops claiming, lets running jobs finish
    within the grace period and exits 0 (jobs cut short come back through their leases). A server
    that cannot serve the workers (unreachable, or wire 6 without trafikey), or workers that
    keep failing at start, end the command with status 1 and the reason."""
    from echomq.worker import WorkersFailed, WorkerSpec, check_spec, probe_server, run_workers

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # MODULE is found from where the command runs
    limit_ms = None if time_limit is None else max(1, round(time_limit * 1000))
    spec = WorkerSpec(handler=handler, queue=queue_name, url=url, lanes=lanes, wire=int(wire),
                      lease_ms=lease_ms, retry_delay_ms=retry_delay_ms,
                      max_attempts=max_attempts, park_cap_ms=park_cap_ms, on_ack=on_ack,
                      log_level=log_level.upper(), time_limit_ms=limit_ms)
    try:
        check_spec(spec)
    except (ImportError, AttributeError, ValueError, TypeError, Wire6Unsupported) as exc:
        raise click.UsageError(f"{type(exc).__name__}: {exc}") from exc
    try:
        probe_server(spec)
    except (redis.RedisError, EchoMQError) as exc:
        raise click.ClickException(f"cannot serve queue {queue_name} from {url}: "
                                   f"{type(exc).__name__}: {exc}") from exc
    try:
        sys.exit(run_workers(spec, concurrency, grace))
    except WorkersFailed as exc:
        raise click.ClickException(str(exc)) from exc


# operator commands ---------------------------------------------------------------------------

url_option = click.option("--url", envvar="ECHOMQ_URL", default="redis://127.0.0.1:6379",
                          show_default=True, show_envvar=True, help="the Valkey server")
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON, for scripts")


def _connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def _emit(as_json: bool, value: Any, lines: Callable[[], Iterable[str]]) -> None:
    if as_json:
        click.echo(json.dumps(value, default=_jsonable))
    else:
        for line in lines():
            click.echo(line)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(value: Any) -> str:
    """``value`` shown on one terminal line: odd bytes, newlines and control characters
    (terminal escapes among them) escaped, so a stored error cannot break or restyle the output."""
    return _CONTROL.sub(lambda found: _ESCAPES.get(found[0], f"\\x{ord(found[0]):02x}"),
                        admin.shown(value))


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return admin.shown(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


@main.command()
@click.argument("queue")
@click.argument("payload")
@click.option("--id", "job_id", default=None, help="the job id (default: a new JOB:<ULID>)")
@click.option("--lane", default=None, help="the group's lane to join")
@click.option("--wire", type=click.Choice(["5", "6"]), default="5", show_default=True)
@url_option
@json_option
def enqueue(queue: str, payload: str, job_id: str | None, lane: str | None, wire: str, url: str,
            as_json: bool) -> None:
    """Admit one job with PAYLOAD into QUEUE."""
    job_id = job_id or new_job_id()
    verdict = Queue(_connect(url), queue, wire=int(wire)).enqueue(job_id, payload.encode(),
                                                                  lane=lane)
    _emit(as_json, {"id": job_id, "verdict": verdict.value},
          lambda: [f"{verdict.value} {job_id}"])


@main.command()
@click.argument("queue", required=False)
@url_option
@json_option
def stats(queue: str | None, url: str, as_json: bool) -> None:
    """Depths of QUEUE (or of every queue): pending, active, delayed, dead, lanes, oldest."""
    conn = _connect(url)
    found = [admin.stats(conn, name) for name in ([queue] if queue else admin.queue_names(conn))]
    _emit(as_json, [s.as_dict() for s in found], lambda: _stats_lines(found))


def _stats_lines(found: list[admin.QueueStats]) -> Iterable[str]:
    for s in found:
        age = "-" if s.oldest_pending_age_ms is None else f"{s.oldest_pending_age_ms} ms"
        yield (f"{s.name}: pending {s.pending}, active {s.active}, delayed {s.delayed}, "
               f"dead {s.dead}, in lanes {sum(s.lanes.values())}, oldest pending {age}")
        for group, depth in s.lanes.items():
            yield f"  lane {group}: {depth}"


@main.command()
@click.argument("queue")
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def inspect(queue: str, job_id: str, url: str, as_json: bool) -> None:
    """Show the row of job ID in QUEUE and where the job is."""
    found = admin.inspect(_connect(url), queue, job_id)
    if found is None:
        raise click.ClickException(f"no job {job_id} in queue {queue}")
    _emit(as_json, found, lambda: [f"{k}: {v}" for k, v in found.items() if k != "fields"]
          + [f"  {k}: {one_line(v)}" for k, v in found["fields"].items()])


@main.group()
def dead() -> None:
    """Dead jobs: list them, run them again, or forget them."""


@dead.command("list")
@click.argument("queue")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1))
@url_option
@json_option
def dead_list(queue: str, limit: int, url: str, as_json: bool) -> None:
    """The dead jobs of QUEUE, oldest death first, with their last errors."""
    jobs = admin.dead_jobs(_connect(url), queue, limit)
    _emit(as_json, jobs, lambda: [f"{j.id} attempts={j.attempts} lane={j.lane or '-'} "
                                  f"error={one_line(j.error)}" for j in jobs] or ["no dead jobs"])


@dead.command("requeue")
@click.argument("queue")
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@url_option
@json_option
def dead_requeue(queue: str, job_ids: tuple[str, ...], url: str, as_json: bool) -> None:
    """Run dead jobs ID... of QUEUE again, with fresh attempts."""
    conn = _connect(url)
    done = {job_id: admin.requeue(conn, queue, job_id) for job_id in job_ids}
    _emit(as_json, done, lambda: [f"{'REQUEUED' if ok else 'NOT_DEAD'} {job_id}"
                                  for job_id, ok in done.items()])


@dead.command("purge")
@click.argument("queue")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1))
@url_option
@json_option
def dead_purge(queue: str, limit: int, url: str, as_json: bool) -> None:
    """Forget up to LIMIT dead jobs of QUEUE (oldest first), deleting their rows."""
    purged = admin.purge(_connect(url), queue, limit=limit)
    _emit(as_json, {"purged": purged}, lambda: [f"purged {purged}"])


@main.command()
@click.argument("queue")
@click.option("--wire", type=click.Choice(["5", "6"]), default="5", show_default=True)
@url_option
@json_option
def recover(queue: str, wire: str, url: str, as_json: bool) -> None:
    """Return QUEUE's expired leases and promote its due retries now."""
    q = Queue(_connect(url), queue, wire=int(wire))
    moved = {"recovered": q.recover(), "promoted": q.promote()}
    _emit(as_json, moved, lambda: [f"recovered {moved['recovered']}, "
                                   f"promoted {moved['promoted']}"])


@main.command()
@click.option("--dir", "directory", default=None, type=click.Path(file_okay=False),
              help="keep the data in this directory (append-only file); default: a temp dir")
@click.option("--port", default=None, type=click.IntRange(1, 65535), help="default: a free one")
@click.option("--unix-socket", is_flag=True, help="listen on <dir>/valkey.sock instead")
def serve(directory: str | None, port: int | None, unix_socket: bool) -> None:
    """Run a valkey-server with trafikey loaded in the foreground, for development."""
    stop = _stop_on_signals()  # before anything starts: a stop during start-up is kept
    if directory:
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


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8042, show_default=True, type=click.IntRange(0, 65535))
@url_option
def dashboard(host: str, port: int, url: str) -> None:
    """Serve the web dashboard: queues, lanes, depths over time, dead jobs and requeue."""
    from echomq.dashboard import DashboardServer

    stop = _stop_on_signals()
    server = DashboardServer(_connect(url), host, port)
    click.echo(f"echomq dashboard at {server.url} (Ctrl-C or SIGTERM stops it)")
    server.start_background()
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """Run the benchmark harness of a source checkout (make bench; ARGS go to it)."""
    checkout = Path(__file__).resolve().parent.parent
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
