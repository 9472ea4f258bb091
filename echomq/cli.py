"""The ``echomq`` command line."""

from __future__ import annotations

import click

from echomq.demo import run_demo


@click.group()
def main() -> None:
    """echomq: a reliable, fair job queue on Valkey."""


@main.command()
@click.option("--jobs", default=20_000, show_default=True, help="jobs per wire")
def demo(jobs: int) -> None:
    """Run a short demonstration on an embedded valkey-server with trafikey loaded."""
    run_demo(jobs=jobs, say=click.echo)
