"""How the ``echomq`` command shows what it read: aligned tables (rich), ages a person reads,
times on the server's clock, text that cannot break a line."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from echomq.consumer.presence import EXPIRY_MS
from echomq.consumer.roster import WorkerInfo, counts_by_queue, running_by_queue
from echomq.engine.priority import split_score
from echomq.ops import admin

LANES_SHOWN = 10  # the deepest lanes ``stats QUEUE`` lists unless told


def console() -> Console:
    """Rich output on stdout: as wide as the terminal, or 160 columns when piped."""
    return Console(width=None if sys.stdout.isatty() else 160, highlight=False)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(value: Any) -> str:
    """``value`` shown on one terminal line: odd bytes, newlines and control characters
    (terminal escapes among them) escaped, so a stored error cannot break or restyle the output."""
    return _CONTROL.sub(lambda found: _ESCAPES.get(found[0], f"\\x{ord(found[0]):02x}"),
                        admin.shown(value))


_AGE_UNITS = ((86_400, "d", 3600, "h"), (3600, "h", 60, "min"), (60, "min", 1, "s"))


def human_age(ms: int | None) -> str:
    """``ms`` as a person reads an age: ``250 ms``, ``4.2 s``, ``3 min 5 s``, ``2 h 10 min``,
    ``3 d 4 h``; ``-`` for none. Rounded down, so an age never reads older than it is."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms // 100 / 10:.1f} s"
    whole = ms // 1000
    size, unit, sub_size, sub = next(units for units in _AGE_UNITS if whole >= units[0])
    return f"{whole // size} {unit} {(whole % size) // sub_size} {sub}"


def moment(at_ms: int, now_ms: int) -> str:
    """An epoch-ms time as UTC and how long ago (or from now) it is on the server's clock:
    ``2026-12-01 10:02:17.250 UTC (4.2 s ago)``."""
    when = datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    ago = now_ms - at_ms
    relative = f"{human_age(ago)} ago" if ago >= 0 else f"in {human_age(-ago)}"
    return f"{when} UTC ({relative})"


_TEXT_COLUMNS = {"lane", "error", "field", "value", "job", "state", "group", "paused"}


def table(*columns: str, title: str | None = None, clipped: tuple[str, ...] = ()) -> Table:
    """A table of ``columns``: a long value folds onto more lines, but in a ``clipped`` column,
    which keeps to one line and ends in an ellipsis."""
    found = Table(title=title, title_justify="left", header_style="bold")
    for n, column in enumerate(columns):
        found.add_column(column, justify="left" if n == 0 or column in _TEXT_COLUMNS
                         else "right", overflow="ellipsis" if column in clipped else "fold",
                         no_wrap=column in clipped)
    return found


# stats -----------------------------------------------------------------------------------------

def print_stats(found: list[admin.QueueStats], workers: list[WorkerInfo], lanes_shown: int,
                lanes_from: int) -> None:
    """The queues' depths, one row each, then (``lanes_shown`` above 0) each queue's deepest
    lanes from the ``lanes_from``-th on, and how many more there are."""
    out = console()
    if not found:
        out.print("no queues yet")
        return
    serving, running = counts_by_queue(workers), running_by_queue(workers)
    rows = table("queue", "pending", "active", "running", "delayed", "dead", "lanes", "in lanes",
                 "waiting", "oldest pending", "paused", "workers")
    for s in found:
        rows.add_row(Text(s.name), str(s.pending), str(s.active), str(running.get(s.name, 0)),
                     str(s.delayed), str(s.dead), str(len(s.lanes)), str(sum(s.lanes.values())),
                     str(s.waiting), human_age(s.oldest_pending_age_ms), _paused(s),
                     _workers_cell(s, serving.get(s.name, 0)))
    out.print(rows)
    for s in found if lanes_shown else []:
        if s.lanes:
            depths, rest = lane_depths(s, lanes_shown, lanes_from)
            out.print(f"lanes of {s.name}: {len(s.lanes)} holding {sum(s.lanes.values())} jobs; "
                      f"the deepest from #{lanes_from + 1}:")
            out.print(depths)
            if rest > 0:
                out.print(f"{rest} more lanes: --lanes N shows N of them, --lanes-from K starts "
                          "after the K deepest")


def _paused(s: admin.QueueStats) -> Text:
    said = ["queue"] if s.paused else []
    if s.paused_lanes:
        said.append(f"{len(s.paused_lanes)} lane" + ("s" if len(s.paused_lanes) > 1 else ""))
    return Text(", ".join(said) or "-", style="bold yellow" if said else "")


def _workers_cell(s: admin.QueueStats, serving: int) -> Text:
    """How many live workers serve the queue; ``none`` stands out when jobs wait for one."""
    waiting = s.pending + sum(s.lanes.values())
    if serving == 0 and waiting:
        return Text("none", style="bold red")
    return Text(str(serving))


def lane_depths(s: admin.QueueStats, shown: int, start: int) -> tuple[Table, int]:
    """The lanes of ``s``, deepest first (then by name), ``shown`` of them after the ``start``
    deepest; and how many come after them."""
    ordered = sorted(s.lanes.items(), key=lambda item: (-item[1], item[0]))
    page = ordered[start:start + shown]
    rest = len(ordered) - start - len(page)
    found = table("lane", "depth")
    for group, depth in page:
        found.add_row(Text(group), str(depth))
    return found, rest


# workers ---------------------------------------------------------------------------------------

def print_workers(found: list[WorkerInfo], now_ms: int) -> None:
    out = console()
    if not found:
        out.print(f"no live workers (a worker drops out {EXPIRY_MS // 1000} s after its "
                  "last beat, a parked one 3 park caps after it)")
        return
    rows = table("host", "pid", "queue", "wire", "up", "in hand", "job", "had run", "done",
                 "failed", "last beat")
    for w in found:
        rows.add_row(Text(w.host), str(w.pid), Text(", ".join(w.queues) or w.queue), str(w.wire),
                     human_age(max(0, now_ms - w.started_ms)), str(w.running),
                     Text(w.job or ("parked" if w.parked else "idle")), human_age(w.job_ran_ms),
                     str(w.done), str(w.failed), human_age(max(0, now_ms - w.beat_ms)) + " ago")
    out.print(rows)
    out.print("in hand, job and had run: as at each worker's last beat (a parked worker beats "
              "once a park or two, up to a few minutes apart)")


# inspect ---------------------------------------------------------------------------------------

# What a job's score is, by where the job is (its times are epoch ms on the server's clock).
SCORE_MEANS = {"pending": "enqueued", "active": "lease ends", "delayed": "due",
               "dead": "died"}
TIME_FIELDS = {"enqueued_at"}


def score_row(state: str, score: Any, now_ms: int) -> tuple[str, str]:
    """What a job's score means where it is: a pending score is its priority's band and its
    admission time (shown when the priority is not 0), the others a moment."""
    means = SCORE_MEANS.get(state, "score")
    if state != "pending":
        return means, moment(int(score), now_ms)
    priority, at = split_score(float(score))
    return (f"{means} (priority {priority})" if priority else means), moment(at, now_ms)


def print_job(job_id: str, queue: str, found: dict[str, Any], now_ms: int) -> None:
    """``echomq inspect``: where the job is, its times in UTC and relative to now, its row."""
    rows = table("field", "value", title=f"{job_id} in {queue}")
    expires = found["expires_in_ms"]
    rows.add_row("state", Text(one_line(found["state"])))
    if found["score"] is not None:
        rows.add_row(*score_row(found["state"], found["score"], now_ms))
    rows.add_row("expires in", "never" if expires is None else human_age(expires))
    for key, value in found["fields"].items():
        shown = one_line(value)
        if key in TIME_FIELDS and shown.isdigit():
            shown = moment(int(shown), now_ms)
        rows.add_row(Text(one_line(key)), Text(shown))
    console().print(rows)


# lanes -----------------------------------------------------------------------------------------

LANE_COLUMNS = ("group", "concurrency", "rate", "window_ms", "weight", "waiting", "leased",
                "state")


def print_lanes(queue: str, whole: bool, rows: list[dict[str, Any]]) -> None:
    """``echomq lanes``: one aligned row per group."""
    found = table(*LANE_COLUMNS, title=f"lanes of {queue}" + (": paused" if whole else ""))
    for row in rows:
        found.add_row(*(Text("-" if row[c] is None else str(row[c])) for c in LANE_COLUMNS))
    console().print(found)
