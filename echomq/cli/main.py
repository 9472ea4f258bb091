"""The ``echomq`` command line: the group, its global options, and every command on it, each
imported from the module of its concern only when it runs (or its own help is asked for), so
``echomq --help`` and each command load only what they need (the commands never import the
group)."""

from __future__ import annotations

import importlib

import click

from echomq.cli.errors import ErrorReportingGroup

# Each command: the module that defines it (under its own name) and the first sentence of its
# help, which ``echomq --help`` lists without importing it (tests/test_cli_lazy.py holds each to
# the command's own).
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("echomq.cli.tools",
              "Run the benchmark harness of a source checkout (make bench; ARGS go to it)."),
    "cancel": ("echomq.cli.jobs",
              "Cancel job ID of QUEUE: one waiting never runs; one running is told at its next "
              "heartbeat and ends cancelled."),
    "conformance": ("echomq.cli.tools",
              "Check that both executors agree on a server: every case, RESP2 and RESP3, and a "
              "seeded random sequence, in scratch keys of its own that it removes afterwards."),
    "dashboard": ("echomq.cli.serve",
              "Serve the web dashboard: queues, lanes, depths over the last hour, rates, dead "
              "jobs with their errors, requeue and purge."),
    "dead": ("echomq.cli.dead",
              "Dead jobs: list them, run them again, or forget them."),
    "demo": ("echomq.cli.tools",
              "Run a short demonstration on an embedded valkey-server with trafikey loaded."),
    "enqueue": ("echomq.cli.jobs",
              "Admit one job with PAYLOAD into QUEUE."),
    "events": ("echomq.cli.events",
              "QUEUE's events, oldest first: the newest COUNT, or those after --since."),
    "forget": ("echomq.cli.queues",
              "Take QUEUE off the list of queues (its jobs stay; producing into it lists it "
              "again)."),
    "inspect": ("echomq.cli.jobs",
              "Show the row of job ID in QUEUE and where the job is."),
    "lanes": ("echomq.cli.queues",
              "QUEUE's lanes: each group's knobs, jobs waiting, leases held, ready or why "
              "parked."),
    "limits": ("echomq.cli.limits",
              "Show QUEUE's queue-wide limits, or set those given: at most N jobs leased at "
              "once and at most R claimed a window, shared by every worker of the queue."),
    "migrate": ("echomq.cli.queues",
              "Rewrite the job rows of QUEUES (default: every listed queue) that an earlier "
              "release wrote, to this release's field names (payload, attempts, enqueued_at, "
              "fence: p, a, t, f), each row atomically; rows already rewritten are left alone, "
              "so it is safe to run again."),
    "pause": ("echomq.cli.queues",
              "Pause QUEUE (no job is leased, flat or lane) or one of its lanes (its jobs wait "
              "out of the ring)."),
    "recover": ("echomq.cli.queues",
              "Return QUEUE's expired leases and promote its due retries now, every one that is "
              "due (in short steps of 1,000), cancel the jobs of a workflow whose admission was "
              "abandoned (held, never sealed, STAGING_TIMEOUT_MS after it was admitted), then "
              "trim its dead jobs to their bounds (`echomq dead bounds`)."),
    "resume": ("echomq.cli.queues",
              "Resume QUEUE or one of its lanes; parked workers wake."),
    "serve": ("echomq.cli.serve",
              "Run a valkey-server with trafikey loaded in the foreground, for development."),
    "stats": ("echomq.cli.queues",
              "Depths of QUEUE (or of every queue): pending, active (leased, prefetched leases "
              "too), running (jobs in its workers' hands at their last beat), delayed, dead, "
              "lanes, oldest waiting job (flat or in a lane), pause, and its live workers."),
    "worker": ("echomq.cli.workers",
              "Run CONCURRENCY supervised worker processes calling MODULE:HANDLER(job) per job, "
              "or running the tasks of MODULE:APP (on the asyncio consumer when it has async "
              "def tasks)."),
    "workers": ("echomq.cli.workers",
              "The live worker processes: host, pid, queue, wire, and as at the last beat the "
              "jobs in hand, the latest and how long it had run; jobs done and failed, last "
              "beat."),
}


class CommandTable(ErrorReportingGroup):
    """The group of ``COMMANDS``, each imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = COMMANDS.get(cmd_name)
        if found is None:
            return None
        command = getattr(importlib.import_module(found[0]), cmd_name)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists them, from ``COMMANDS``' summaries."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary(name, limit)) for name in sorted(COMMANDS)])


def summary(name: str, limit: int) -> str:
    """Command ``name``'s help in the listing, at most ``limit`` characters, as click shortens
    a command's own."""
    return click.Command(name, help=COMMANDS[name][1]).get_short_help_str(limit)


@click.group(cls=CommandTable, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="echomq", message="echomq %(version)s")
@click.option("--debug", is_flag=True, envvar="ECHOMQ_DEBUG",
              help="show the traceback of an error instead of one line and a hint")
def main(debug: bool) -> None:
    """echomq: a reliable, fair job queue on Valkey.

    Exit codes: 0 done; 1 failed (no such job, a job that is not dead, ...); 2 bad usage or
    input (a wrong URL, a bad job id); 3 the server cannot be reached; 4 the server refused
    (trafikey not loaded, NOPERM, wrong password)."""
