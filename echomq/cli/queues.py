"""The commands on a whole queue: ``stats`` (its depths and live workers), ``lanes``, ``pause``
and ``resume``, ``recover`` (its due leases and retries now), ``forget`` and ``migrate`` (its
rows to this release's layout)."""

from __future__ import annotations

from typing import Any

import click
import redis

from echomq.cli.args import MAX_COUNT, QUEUE
from echomq.cli.common import WIRE_CHOICES, connect, emit, json_option, print_json, url_option
from echomq.cli.errors import Failure
from echomq.cli.views import LANES_SHOWN, print_lanes, print_stats
from echomq.consumer.roster import WorkerInfo, counts_by_queue, live_workers, running_by_queue
from echomq.engine.wire import wire_of
from echomq.ops import admin
from echomq.ops.migrate import migrate_queue
from echomq.queue.blocking import recorded_queue
from echomq.queue.lanes import lane_report
from echomq.queue.staging import STAGING_TIMEOUT_MS


@click.command()
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
    conn = connect(url)
    if rescan:
        admin.discover_queues(conn)
    found = [admin.stats(conn, name) for name in ([queue] if queue else admin.queue_names(conn))]
    if queue and found[0].holds_anything():
        admin.register_queue(conn, queue)
    elif queue and not admin.is_listed(conn, queue):
        raise Failure(f"no queue {queue}: it is not listed and holds nothing",
                      "`echomq stats` lists the queues (--rescan searches the keyspace again)")
    live = _workers_or_none(conn)
    if as_json:
        serving, running = counts_by_queue(live), running_by_queue(live)
        print_json([{**s.as_dict(), "workers": serving.get(s.name, 0),
                     "running": running.get(s.name, 0)} for s in found])
        return
    print_stats(found, live, lanes_shown if queue else 0, lanes_from)


def _workers_or_none(conn: Any) -> list[WorkerInfo]:
    """The live workers; none when the server refuses to show the registry (an ACL), so the
    depths still show."""
    try:
        return live_workers(conn)
    except redis.ResponseError:
        return []


@click.command()
@click.argument("queue", type=QUEUE)
@url_option
def forget(queue: str, url: str) -> None:
    """Take QUEUE off the list of queues (its jobs stay; producing into it lists it again)."""
    if not admin.forget_queue(connect(url), queue):
        raise Failure(f"{queue} is not a listed queue", "`echomq stats` lists them")
    click.echo(f"forgot {queue}")


@click.command()
@click.argument("queue", type=QUEUE)
@click.option("--wire", type=click.Choice(WIRE_CHOICES), default="auto", show_default=True)
@click.option("--staging-timeout-ms", type=click.IntRange(min=1), default=STAGING_TIMEOUT_MS,
              show_default=True, help="how long a held job of a staged workflow may wait")
@url_option
@json_option
def recover(queue: str, wire: str, staging_timeout_ms: int, url: str, as_json: bool) -> None:
    """Return QUEUE's expired leases and promote its due retries now, every one that is due
    (in short steps of 1,000), cancel the jobs of a workflow whose admission was abandoned
    (held, never sealed, STAGING_TIMEOUT_MS after it was admitted), then trim its dead jobs to
    their bounds (`echomq dead bounds`)."""
    conn = connect(url)
    housekeeper = recorded_queue(conn, queue, wire=wire_of(wire),
                                 events=admin.has_events(conn, queue),
                                 staging_timeout_ms=staging_timeout_ms)
    done = housekeeper.recover_due()
    moved = {"recovered": done.recovered, "promoted": done.promoted, "abandoned": done.abandoned}
    emit(as_json, moved, lambda: [f"recovered {moved['recovered']}, "
                                  f"promoted {moved['promoted']}, "
                                  f"abandoned {moved['abandoned']}"])


@click.command()
@click.argument("queue", type=QUEUE)
@click.option("--lane", default=None, help="pause only this lane (group); default: the queue")
@url_option
def pause(queue: str, lane: str | None, url: str) -> None:
    """Pause QUEUE (no job is leased, flat or lane) or one of its lanes (its jobs wait out of
    the ring). Jobs in hand run on."""
    recorded_queue(connect(url), queue, check_policy=False).pause(lane)
    click.echo(f"paused {queue}" + (f" lane {lane}" if lane else ""))


@click.command()
@click.argument("queue", type=QUEUE)
@click.option("--lane", default=None, help="resume only this lane (group); default: the queue")
@url_option
def resume(queue: str, lane: str | None, url: str) -> None:
    """Resume QUEUE or one of its lanes; parked workers wake."""
    recorded_queue(connect(url), queue, check_policy=False).resume(lane)
    click.echo(f"resumed {queue}" + (f" lane {lane}" if lane else ""))


@click.command()
@click.argument("queue", type=QUEUE)
@url_option
@json_option
def lanes(queue: str, url: str, as_json: bool) -> None:
    """QUEUE's lanes: each group's knobs, jobs waiting, leases held, ready or why parked."""
    q = recorded_queue(connect(url), queue, check_policy=False)
    whole, _ = q.paused()
    rows = sorted((row for shard in q.shard_queues for row in lane_report(shard)),
                  key=lambda row: row["group"])
    if as_json:
        print_json({"paused": whole, "defaults": q.lane_settings(), "lanes": rows})
        return
    print_lanes(queue, whole, rows)


@click.command()
@click.argument("queues", nargs=-1, type=QUEUE)
@url_option
@json_option
def migrate(queues: tuple[str, ...], url: str, as_json: bool) -> None:
    """Rewrite the job rows of QUEUES (default: every listed queue) that an earlier release
    wrote, to this release's field names (payload, attempts, enqueued_at, fence: p, a, t, f),
    each row atomically; rows already rewritten are left alone, so it is safe to run again.
    Stop the earlier release's workers first; start this release's after."""
    conn = connect(url)
    names = list(queues) or admin.queue_names(conn)
    if not names:
        raise Failure("no queue to migrate: none is listed on this server",
                      "name them: `echomq migrate QUEUE...`; `echomq stats --rescan` searches "
                      "the keyspace for queues")
    done = [migrate_queue(conn, name) for name in names]
    emit(as_json, done, lambda: [f"{d.queue}: rewrote {d.rewritten} of {d.rows} rows"
                                 for d in done])
