"""The commands that run echomq's own tools: the demonstration on an embedded server, the
benchmark harness of a source checkout, and the conformance check of both executors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from echomq.cli.common import check_terminated, interrupt_on_sigterm
from echomq.cli.demo import run_demo


@click.command()
@click.option("--greedy-jobs", default=6_000, show_default=True, type=click.IntRange(1),
              help="jobs the greedy tenant floods the queue with")
@click.option("--tenants", default=5, show_default=True, type=click.IntRange(1),
              help="small tenants")
@click.option("--per-tenant", default=100, show_default=True, type=click.IntRange(1))
@click.option("--workers", default=4, show_default=True, type=click.IntRange(1))
def demo(greedy_jobs: int, tenants: int, per_tenant: int, workers: int) -> None:
    """Run a short demonstration on an embedded valkey-server with trafikey loaded."""
    interrupt_on_sigterm()
    run_demo(greedy_jobs, tenants, per_tenant, workers, say=click.echo, check=check_terminated)


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(args: tuple[str, ...]) -> None:
    """Run the benchmark harness of a source checkout (make bench; ARGS go to it)."""
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / "bench" / "__main__.py").is_file():
        raise click.ClickException("the benchmark lives in echomq's source checkout (bench/)")
    command = ["make", "-C", str(checkout), "bench", f"BENCH_ARGS={' '.join(args)}"]
    sys.exit(subprocess.call(command))


@click.command()
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
