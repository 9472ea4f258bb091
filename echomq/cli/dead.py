"""``echomq dead``: the dead jobs of a queue listed, run again with fresh attempts, or forgotten."""

from __future__ import annotations

import click
from rich.text import Text

from echomq.cli.args import COUNT, QUEUE, DeadFilter, requeue_targets
from echomq.cli.common import connect, emit, json_option, print_json, url_option
from echomq.cli.errors import Failure
from echomq.cli.views import console, human_age, one_line, table
from echomq.engine.server_time import server_ms
from echomq.ops import admin


@click.group()
def dead() -> None:
    """Dead jobs: list them, run them again, or forget them."""


@dead.command("list")
@click.argument("queue", type=QUEUE)
@click.option("--limit", default=100, show_default=True, type=COUNT)
@url_option
@json_option
def dead_list(queue: str, limit: int, url: str, as_json: bool) -> None:
    """The dead jobs of QUEUE, oldest death first, with their last errors."""
    conn = connect(url)
    jobs = admin.dead_jobs(conn, queue, limit)
    if as_json:
        print_json(jobs)
        return
    if not jobs:
        console().print(f"no dead jobs in {queue}")
        return
    now = server_ms(conn)
    shown = table("job", "task", "attempts", "lane", "died", "error")
    for j in jobs:
        shown.add_row(Text(j.id), Text(j.task or "-"), str(j.attempts), Text(j.lane or "-"),
                      f"{human_age(max(0, now - j.died_at_ms))} ago", Text(one_line(j.error)))
    console().print(shown)


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
    conn = connect(url)
    job_ids = requeue_targets(conn, queue, job_ids, every,
                              DeadFilter(error_has=error_has, lane=lane, task=task))
    done = {job_id: admin.requeue(conn, queue, job_id) for job_id in job_ids}
    emit(as_json, done, lambda: [f"{'REQUEUED' if ok else 'NOT_DEAD'} {job_id}"
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
    purged = admin.purge(connect(url), queue, limit=limit)
    emit(as_json, {"purged": purged}, lambda: [f"purged {purged}"])
