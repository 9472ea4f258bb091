"""The ``echomq`` command line."""

from __future__ import annotations

import os
import sys

import click

from echomq.demo import run_demo
from echomq.errors import Wire6Unsupported


@click.group()
def main() -> None:
    """echomq: a reliable, fair job queue on Valkey."""


@main.command()
@click.option("--jobs", default=20_000, show_default=True, help="jobs per wire")
def demo(jobs: int) -> None:
    """Run a short demonstration on an embedded valkey-server with trafikey loaded."""
    run_demo(jobs=jobs, say=click.echo)


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
@click.option("--max-attempts", default=5, show_default=True, type=click.IntRange(1))
@click.option("--park-cap-ms", default=5_000, show_default=True, type=click.IntRange(1),
              help="longest park on the wake key")
@click.option("--on-ack", metavar="MODULE:FUNC", default=None,
              help="called with each job once its ack returned ACKED")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def worker(handler: str, queue_name: str, lanes: bool, concurrency: int, url: str, wire: str,
           grace: float, lease_ms: int, retry_delay_ms: int, max_attempts: int,
           park_cap_ms: int, on_ack: str | None, log_level: str) -> None:
    """Run CONCURRENCY supervised worker processes calling MODULE:HANDLER(job) per job.

    A crashed worker is restarted; SIGTERM or SIGINT stops claiming, lets running jobs finish
    within the grace period and exits 0 (jobs cut short come back through their leases)."""
    from echomq.worker import WorkerSpec, check_spec, run_workers

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # MODULE is found from where the command runs
    spec = WorkerSpec(handler=handler, queue=queue_name, url=url, lanes=lanes, wire=int(wire),
                      lease_ms=lease_ms, retry_delay_ms=retry_delay_ms,
                      max_attempts=max_attempts, park_cap_ms=park_cap_ms, on_ack=on_ack,
                      log_level=log_level.upper())
    try:
        check_spec(spec)
    except (ImportError, AttributeError, ValueError, TypeError, Wire6Unsupported) as exc:
        raise click.UsageError(f"{type(exc).__name__}: {exc}") from exc
    sys.exit(run_workers(spec, concurrency, grace))
