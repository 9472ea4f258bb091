"""``echomq dead``: the dead jobs of a queue listed, run again with fresh attempts, or forgotten;
the bounds they are kept within shown and set."""

from __future__ import annotations

import re
from typing import Any

import click
from rich.text import Text

from echomq.cli.args import COUNT, QUEUE, DeadFilter, requeue_targets
from echomq.cli.common import connect, emit, json_option, print_json, url_option
from echomq.cli.errors import Failure
from echomq.cli.views import console, human_age, one_line, table
from echomq.engine.server_time import server_ms
from echomq.ops import admin
from echomq.queue.blocking import recorded_queue
from echomq.queue.dead import Bound, DeadBounds


@click.group()
def dead() -> None:
    """Dead jobs: list them, run them again, or forget them."""


@dead.command("list")
@click.argument("queue", type=QUEUE)
@click.option("--limit", default=100, show_default=True, type=COUNT)
@url_option
@json_option
def dead_list(queue: str, limit: int, url: str, as_json: bool) -> None:
    """The LIMIT dead jobs of QUEUE that died last, newest first, a line each: the job, its
    task, attempts, lane, how long ago it died and its error's line (``Type: message``).
    --json: each with its whole error, traceback included."""
    conn = connect(url)
    jobs = admin.dead_jobs(conn, queue, limit, newest_first=True)
    if as_json:
        print_json(jobs)
        return
    kept = kept_text(recorded_queue(conn, queue, check_policy=False).dead_bounds())
    if not jobs:
        console().print(f"no dead jobs in {queue} ({kept})")
        return
    console().print(kept)
    now = server_ms(conn)
    shown = table("job", "task", "attempts", "lane", "died", "error", clipped=("error",))
    for j in jobs:
        shown.add_row(Text(j.id), Text(j.task or "-"), str(j.attempts), Text(j.lane or "-"),
                      f"{human_age(max(0, now - j.died_at_ms))} ago",
                      Text(one_line(error_line(j.error))))
    console().print(shown)
    console().print(f"newest first; each error's first line (`echomq inspect {queue} ID` or "
                    "--json: whole)")


def error_line(error: str) -> str:
    """An error as ``readable_error`` gives it, on its first line: ``Type: message``."""
    return error.partition("\n")[0]


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


DURATION = re.compile(r"(\d{1,15})(ms|s|m|h|d)?")
UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
DAY_MS = UNIT_MS["d"]


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """An age bound: ``30d``, ``12h``, ``90m``, ``45s``, ``500ms`` (a bare number: ms), ``0``
    for none, or ``default``."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | None:
        if value == "default":
            return None
        found = DURATION.fullmatch(value) if isinstance(value, str) else None
        if found is None:
            self.fail(f"{value!r} is not a duration: a number and one of ms, s, m, h, d "
                      "(30d), 0 for no age bound, or default", param, ctx)
        return int(found[1]) * UNIT_MS[found[2] or "ms"]


class BoundCount(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """A count bound: an integer from 0 (0: no count bound), or ``default``."""

    name = "count"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | None:
        if value == "default":
            return None
        if not (isinstance(value, str) and value.isascii() and value.isdigit()
                and len(value) <= 15):
            self.fail(f"{value!r} is not a count: an integer from 0 (0 for no count bound), "
                      "or default", param, ctx)
        return int(value)


def kept_text(bounds: DeadBounds) -> str:
    """``kept: at most 10,000 for 180 days`` (either bound 0: no bound of that kind)."""
    count = f"at most {bounds.max_count:,}" if bounds.max_count else "any number"
    age = bounds.max_age_ms
    if not age:
        span = "for ever"
    elif age % DAY_MS == 0:
        span = f"for {age // DAY_MS:,} day{'s' if age != DAY_MS else ''}"
    else:
        span = f"for {human_age(age)}"
    return f"kept: {count} {span}"


@dead.command("bounds")
@click.argument("queue", type=QUEUE)
@click.option("--max-count", type=BoundCount(), default=None,
              help="keep at most this many dead jobs (0: no count bound; default: 10,000)")
@click.option("--max-age", type=Duration(), default=None,
              help="keep none dead this long: 30d, 12h, 90m, 45s, 500ms (0: no age bound; "
                   "default: 180d)")
@url_option
@json_option
def dead_bounds(queue: str, max_count: int | None, max_age: int | None, url: str,
                as_json: bool) -> None:
    """Show the bounds QUEUE's dead jobs are kept within, or set them: the workers'
    housekeeping forgets the oldest dead jobs beyond them."""
    ctx = click.get_current_context()
    given = {name: value for name, value in (("max_count", max_count),
                                             ("max_age_ms", max_age))
             if ctx.get_parameter_source(name.removesuffix("_ms")) ==
             click.core.ParameterSource.COMMANDLINE}
    changes: dict[str, Bound] = {"max_count": ..., "max_age_ms": ..., **given}
    bounds = recorded_queue(connect(url), queue, check_policy=False).set_dead_bounds(**changes)
    emit(as_json, {"max_count": bounds.max_count, "max_age_ms": bounds.max_age_ms},
         lambda: [kept_text(bounds)])
