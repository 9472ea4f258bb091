"""The ``echomq`` command line: the group, its global options, and every command registered on
it, from the modules of each concern (the commands never import the group)."""

from __future__ import annotations

import click

from echomq.cli.dead import dead
from echomq.cli.errors import ErrorReportingGroup
from echomq.cli.events import events
from echomq.cli.jobs import cancel, enqueue, inspect
from echomq.cli.limits import limits
from echomq.cli.queues import forget, lanes, migrate, pause, recover, resume, stats
from echomq.cli.serve import dashboard, serve
from echomq.cli.tools import bench, conformance, demo
from echomq.cli.workers import worker, workers


@click.group(cls=ErrorReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="echomq", message="echomq %(version)s")
@click.option("--debug", is_flag=True, envvar="ECHOMQ_DEBUG",
              help="show the traceback of an error instead of one line and a hint")
def main(debug: bool) -> None:
    """echomq: a reliable, fair job queue on Valkey.

    Exit codes: 0 done; 1 failed (no such job, a job that is not dead, ...); 2 bad usage or
    input (a wrong URL, a bad job id); 3 the server cannot be reached; 4 the server refused
    (trafikey not loaded, NOPERM, wrong password)."""


for command in (demo, worker, enqueue, stats, workers, inspect, cancel, dead, forget, recover,
                pause, resume, lanes, events, serve, dashboard, bench, conformance, limits,
                migrate):
    main.add_command(command)
