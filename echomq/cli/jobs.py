"""The commands on one job: ``enqueue`` admits it, ``inspect`` shows its row and where it is,
``cancel`` cancels it."""

from __future__ import annotations

import click

from echomq.cli.args import PRIORITY, QUEUE
from echomq.cli.common import WIRE_CHOICES, connect, emit, json_option, print_json, url_option
from echomq.cli.errors import BAD_INPUT, Failure
from echomq.cli.views import print_job
from echomq.engine.errors import ArgumentError
from echomq.engine.server_time import server_ms
from echomq.engine.transitions import INT_MAX
from echomq.engine.unique import unique_options
from echomq.engine.wire import wire_of
from echomq.ops import admin
from echomq.queue.blocking import Verdict, recorded_queue
from echomq.queue.ids import new_job_id


@click.command()
@click.argument("queue", type=QUEUE)
@click.argument("payload")
@click.option("--id", "job_id", default=None, help="the job id (default: a new time-sortable id)")
@click.option("--lane", default=None, help="the group's lane to join")
@click.option("--priority", type=PRIORITY, default=0, show_default=True,
              help="-100 to 100, higher is claimed first")
@click.option("--wire", type=click.Choice(WIRE_CHOICES), default="auto", show_default=True)
@click.option("--dedupe", metavar="KEY", default=None,
              help="admit only while no job of KEY lives (DUPLICATE otherwise)")
@click.option("--debounce", metavar="KEY", default=None,
              help="one delayed job of KEY, pushed back and given PAYLOAD by each call")
@click.option("--throttle", metavar="KEY", default=None,
              help="at most one job of KEY a window (THROTTLED otherwise)")
@click.option("--window-ms", type=click.IntRange(min=0), default=None,
              help="the window of --dedupe (after its job ends), --debounce or --throttle")
@url_option
@json_option
def enqueue(queue: str, payload: str, job_id: str | None, lane: str | None, priority: int,
            wire: str, dedupe: str | None, debounce: str | None, throttle: str | None,
            window_ms: int | None, url: str, as_json: bool) -> None:
    """Admit one job with PAYLOAD into QUEUE."""
    job_id = job_id or new_job_id()
    named = [mode for mode, key in (("dedupe", dedupe), ("debounce", debounce),
                                    ("throttle", throttle)) if key is not None]
    if len(named) > 1 or (window_ms is not None and not named):
        raise click.UsageError("--window-ms goes with one of --dedupe, --debounce, --throttle")
    unique = {f"{named[0]}_ms": window_ms} if named and window_ms is not None else {}
    checked_unique(dedupe, debounce, throttle, unique)
    conn = connect(url)
    producer = recorded_queue(conn, queue, wire=wire_of(wire), events=admin.has_events(conn, queue))
    verdict = producer.enqueue(job_id, payload.encode(), lane=lane, priority=priority,
                               dedupe=dedupe, debounce=debounce, throttle=throttle, **unique)
    admin.register_queue(conn, queue)
    emit(as_json, {"id": job_id, "verdict": verdict.value},
         lambda: [f"{verdict.value} {job_id}"])


def checked_unique(dedupe: str | None, debounce: str | None, throttle: str | None,
                   window: dict[str, int]) -> None:
    """The key and window of --dedupe, --debounce or --throttle checked as the queue checks
    them, before anything is sent: one line and a hint, exit 2, for a bad one."""
    try:
        unique_options(dedupe=dedupe, debounce=debounce, throttle=throttle, **window)
    except ArgumentError as exc:
        reason = str(exc).removeprefix("EMQNUM ")
        for mode in ("dedupe", "debounce", "throttle"):
            reason = reason.replace(f"{mode}_ms must", "--window-ms must")
        raise Failure(f"bad --dedupe, --debounce or --throttle: {reason}",
                      "a key is 1 to 200 bytes of A-Z a-z 0-9 . _ : -; --window-ms is 0 to "
                      f"{INT_MAX} (ms)", BAD_INPUT) from exc


@click.command()
@click.argument("queue", type=QUEUE)
@click.argument("job_id", metavar="ID")
@url_option
@json_option
def inspect(queue: str, job_id: str, url: str, as_json: bool) -> None:
    """Show the row of job ID in QUEUE and where the job is."""
    conn = connect(url)
    found = admin.inspect(conn, queue, job_id)
    if found is None:
        raise Failure(f"no job {job_id} in queue {queue}",
                      f"`echomq stats {queue}` shows what the queue holds; completed jobs are "
                      "kept only for their retention")
    if as_json:
        print_json(found)
        return
    print_job(job_id, queue, found, server_ms(conn))


@click.command()
@click.argument("queue", type=QUEUE)
@click.argument("job_id", metavar="ID")
@click.option("--wire", type=click.Choice(WIRE_CHOICES), default="auto", show_default=True)
@url_option
@json_option
def cancel(queue: str, job_id: str, wire: str, url: str, as_json: bool) -> None:
    """Cancel job ID of QUEUE: one waiting never runs; one running is told at its next
    heartbeat and ends cancelled. Prints the verdict: CANCELLED, CANCELLING (its handler is
    told), DONE or DEAD (it ended so: nothing changes); no such job exits 1."""
    conn = connect(url)
    verdict = recorded_queue(conn, queue, wire=wire_of(wire),
                    events=admin.has_events(conn, queue)).cancel(job_id)
    if verdict is Verdict.UNKNOWN:
        raise Failure(f"no job {job_id} in queue {queue}",
                      f"`echomq stats {queue}` shows what the queue holds; a job that ended is "
                      "kept only for its retention")
    emit(as_json, {"id": job_id, "verdict": verdict.value},
         lambda: [f"{verdict.value} {job_id}"])
