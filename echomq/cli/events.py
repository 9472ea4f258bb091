"""``echomq events QUEUE``: a queue's events stream (written by Queues made with
``events=True``), the newest events or those after an id; with ``--follow``, each one as it
comes, until interrupted."""

from __future__ import annotations

import datetime
from dataclasses import asdict
from typing import Any

import click

from echomq.cli.args import QUEUE
from echomq.cli.common import (
    check_terminated,
    connect,
    interrupt_on_sigterm,
    json_option,
    print_json,
    url_option,
)
from echomq.cli.errors import Failure
from echomq.engine.errors import ArgumentError
from echomq.engine.events import Event
from echomq.ops import admin
from echomq.queue.blocking import Queue, recorded_queue
from echomq.queue.events import checked_since

FOLLOW_BLOCK_MS = 10_000


def event_line(event: Event) -> str:
    """One event as a line: its id, kind, job, attempt, time (UTC) and the fields it has."""
    at = datetime.datetime.fromtimestamp(event.at_ms / 1000, datetime.UTC)
    extras = [f"{name}={value}" for name, value in (
        ("fence", event.fence), ("lane", event.lane), ("due", event.due_ms),
        ("priority", event.priority or None)) if value is not None]
    return "  ".join([event.id, f"{event.kind:<9}", event.job_id, f"attempt {event.attempt}",
                      at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC", *extras])


def shown(events: list[Event], as_json: bool) -> None:
    for event in events:
        if as_json:
            print_json(asdict(event))
        else:
            click.echo(event_line(event))


@click.command()
@click.argument("queue", type=QUEUE)
@click.option("--since", default=None, metavar="ID",
              help="the events after this one's id (the first column)  [default: the newest]")
@click.option("--count", default=20, show_default=True, type=click.IntRange(1, 10_000),
              help="at most this many events (with --follow: the first read's)")
@click.option("--follow", "-f", is_flag=True,
              help="then wait for more, and show each as it comes (Ctrl-C stops)")
@url_option
@json_option
def events(queue: str, since: str | None, count: int, follow: bool, url: str,
           as_json: bool) -> None:
    """QUEUE's events, oldest first: the newest COUNT, or those after --since. Each is one line
    (--json: one object a line): its id, kind, job, attempt, time, and its fence, lane, due time
    and priority where it has them. The stream keeps about the last 10,000. A queue that is
    not there (no events stream, not listed, holding nothing) exits 1."""
    try:
        checked_since(since)
    except ArgumentError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    conn = connect(url)
    reader = recorded_queue(conn, queue, check_policy=False)
    batch = reader.latest_events(count) if since is None else reader.events(since, count)
    if not batch:
        _check_known(conn, queue)
    shown(batch, as_json)
    last = batch[-1].id if batch else (since or _last_or_first(reader))
    if follow:
        interrupt_on_sigterm()
        try:
            _follow(reader, last, count, as_json)
        except KeyboardInterrupt:
            return  # Ctrl-C or SIGTERM: the end of a follow, not a failure


def _check_known(conn: Any, queue: str) -> None:
    """Failure (exit 1) for a queue that is not there: no events stream, not listed, holding
    nothing (``echomq stats QUEUE``'s test)."""
    if admin.has_events(conn, queue) or admin.is_listed(conn, queue) \
            or admin.stats(conn, queue).holds_anything():
        return
    raise Failure(f"no queue {queue}: it has no events stream, is not listed and holds nothing",
                  "`echomq stats` lists the queues; a queue's events are written by the Queues "
                  "made with events=True")


def _follow(reader: Queue, last: str, count: int, as_json: bool) -> None:
    while True:
        check_terminated()
        batch = reader.events(last, count, block_ms=FOLLOW_BLOCK_MS)
        shown(batch, as_json)
        last = batch[-1].id if batch else last


def _last_or_first(queue: Queue) -> str:
    """Where following starts when nothing was shown: after the stream's last entry now."""
    newest = queue.latest_events(1)
    return newest[0].id if newest else "0-0"
