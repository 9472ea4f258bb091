"""A queue's jobs listed by state, a page at a time, filtered and searched within a bound.

States and where their jobs are: ``pending`` (the pending zset in claim order: the highest
priority's band first, each band by admission time; with ``lane``, that group's lane in the
order it serves it), ``delayed`` (due soonest first), ``running`` (the active leases, the lease
ending soonest first), ``waiting`` (on their parents, admitted first), ``dead`` (died first) and
``completed`` (tombstones of done or cancelled jobs, while they are kept: a scan of the rows).
``newest`` reverses a zset's order.

Bounds, whatever the depth: a page holds at most ``PAGE_MAX`` jobs; one request reads at most
``READ_PER_REQUEST`` rows (a filter that matches few jobs answers with the cursor where it
stopped, and the page asks on); a filtered or searched list looks at no more than ``SEARCH_BOUND``
jobs from where it starts (the newest, for a search) and says so when it reaches that bound.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from echomq.engine import rows as jobrow
from echomq.engine.calls import QueueCalls, payload_bytes, text
from echomq.engine.priority import band, split_score
from echomq.engine.server_time import server_ms
from echomq.ops.admin import queue_calls, readable_error, shown, task_of
from echomq.ops.jobs.pages import (
    SEP,
    CursorError,
    Entry,
    LaneKeys,
    Span,
    lane_page,
    lane_position,
    scan_position,
    scan_rows,
    zpage,
    zposition,
)
from echomq.queue.shard_layout import shard_of
from echomq.tasks.envelope import PayloadError, decode_envelope

STATES = ("pending", "delayed", "running", "waiting", "completed", "dead")
ZSET_OF = {"pending": "pending", "delayed": "delayed", "running": "active",
           "waiting": "waiting", "dead": "dead"}
PAGE_MAX = 100
PAGE_DEFAULT = 50
READ_PER_REQUEST = 1000
SEARCH_BOUND = 10_000
CHUNK = 100
TEXT_MAX = 200
ARGS_SHOWN = 160
# The row's fields a list shows, under this layout's names and the earlier one's.
ROW_FIELDS = (jobrow.PAYLOAD, jobrow.OLD_PAYLOAD, jobrow.ATTEMPTS, jobrow.OLD_ATTEMPTS,
              jobrow.ENQUEUED_AT, "enqueued_at", "priority", "lane", "error", "cancelled",
              "result")


class ListError(ValueError):
    """A list asked for with a state, filter, limit or cursor it cannot have."""


@dataclass(frozen=True)
class Filters:
    """What a listed job must match: its task (exactly), lane, priority, an age (enqueued at
    least ``older_than_ms`` ago), a substring of its error or of its arguments (JSON, any
    case), its id's prefix."""

    task: str | None = None
    lane: str | None = None
    priority: int | None = None
    older_than_ms: int | None = None
    error: str | None = None
    args: str | None = None
    id: str | None = None

    def any(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


@dataclass(frozen=True)
class Call:
    """What a payload says of its call: the task, and its arguments when it is an envelope."""

    task: str | None
    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None

    def arguments_text(self) -> str:
        if self.args is None:
            return ""
        return json.dumps({"args": self.args, "kwargs": self.kwargs or {}}, default=repr)


def call_of(payload: bytes | None) -> Call:
    """The call a job's payload carries, decoded by the task layer's own decoder (either
    envelope form, JSON or MessagePack); a Django call's task alone; else nothing."""
    if not payload:
        return Call(None)
    try:
        envelope = decode_envelope(payload)
    except PayloadError:
        return Call(task_of(payload))
    return Call(envelope.task, envelope.args, envelope.kwargs)


def filters_of(params: Mapping[str, str]) -> Filters:
    """The filters of a request's query; ListError for a bad one, before anything is read."""
    found: dict[str, Any] = {}
    for name in ("task", "lane", "error", "args", "id"):
        value = params.get(name) or None
        if value is not None and len(value) > TEXT_MAX:
            raise ListError(f"{name}: at most {TEXT_MAX} characters")
        found[name] = value
    found["priority"] = _int_param(params, "priority", -100, 100)
    found["older_than_ms"] = _int_param(params, "older_than_ms", 0, 10 ** 15)
    return Filters(**found)


def limit_of(params: Mapping[str, str]) -> int:
    return _int_param(params, "limit", 1, PAGE_MAX) or PAGE_DEFAULT


def _int_param(params: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = params.get(name) or None
    if raw is None:
        return None
    if not raw.lstrip("-").isdigit() or not low <= int(raw) <= high:
        raise ListError(f"{name}: an integer from {low} to {high}")
    return int(raw)


@dataclass
class Walk:
    """Where a list's reading stands: the rows looked at so far (over all its pages) and the
    position after the last one (None: at the start)."""

    looked: int
    position: str | None

    def cursor(self) -> str:
        return f"{self.looked}/{self.position or ''}"


def walk_of(cursor: str | None) -> Walk:
    if not cursor:
        return Walk(0, None)
    looked, sep, position = cursor.partition("/")
    if not sep or not looked.isdigit():
        raise ListError(f"not a cursor of this list: {cursor!r}")
    return Walk(int(looked), position or None)


# A source reads the entries after a position: each with the position after it, the position
# after the whole read, and whether the source ends there.
Items = list[tuple[Entry, str]]
Source = Callable[[str | None, int], tuple[Items, str | None, bool]]


def list_jobs(conn: Any, name: str, state: str, filters: Filters, *, cursor: str | None = None,
              limit: int = PAGE_DEFAULT, newest: bool = False) -> dict[str, Any]:
    """A page of queue ``name``'s jobs in ``state`` matching ``filters``, from ``cursor``
    (None: the start): ``{"state", "jobs", "next", "looked", "bound", "server_time_ms"}``,
    ``next`` the cursor of the page after (None: the list ends, or a filtered list reached
    ``bound``, the most jobs it looks at)."""
    if state not in STATES:
        raise ListError(f"state: one of {', '.join(STATES)}")
    if not 1 <= limit <= PAGE_MAX:
        raise ListError(f"limit: an integer from 1 to {PAGE_MAX}")
    walk = walk_of(cursor)
    try:
        _position_of(state, filters, walk.position)
    except CursorError as exc:
        raise ListError(str(exc)) from None
    parts = queue_calls(conn, name)
    now = server_ms(conn)
    # A lane of pending jobs is a list of its own, not a filter of the flat queue's.
    narrowing = replace(filters, lane=None) if state == "pending" else filters
    bound = SEARCH_BOUND if narrowing.any() else None
    match = Matcher(filters, now, tombstones=state == "completed")
    source = _source(conn, parts, state, filters, newest)
    jobs, more = _collect(conn, parts, source, walk, match, limit, bound)
    return {"state": state, "jobs": jobs, "next": walk.cursor() if more else None,
            "looked": walk.looked, "bound": bound, "server_time_ms": now}


def _position_of(state: str, filters: Filters, position: str | None) -> object:
    """``position`` read as the list of ``state`` reads it: CursorError for one it never
    gave, so a bad cursor is refused before anything is read."""
    if position is None:
        return None
    if state == "completed":
        return _scan_at(position)
    if state == "pending" and filters.lane is not None:
        return lane_position(position)
    return zposition(position)


def _collect(conn: Any, parts: list[QueueCalls], source: Source, walk: Walk, match: Matcher,
             limit: int, bound: int | None) -> tuple[list[dict[str, Any]], bool]:
    """The jobs ``match`` keeps from ``source`` after ``walk``'s position, until ``limit`` of
    them, ``READ_PER_REQUEST`` rows read, the source's end or ``bound`` rows looked at in all;
    whether the list goes on (``walk`` is then where it resumes)."""
    found: list[dict[str, Any]] = []
    start = walk.looked
    while (room := _room(walk, start, bound)) > 0:
        items, resume, ended = source(walk.position, min(CHUNK, room))
        if _take(conn, parts, items, walk, match, found, limit):
            return found, True
        walk.position = resume if resume is not None else walk.position
        if ended:
            return found, False
        if len(found) == limit:
            return found, True
        walk.looked += int(not items)  # an empty step of a scan counts, so a request ends
    return found, bound is None or walk.looked < bound


def _room(walk: Walk, start: int, bound: int | None) -> int:
    room = READ_PER_REQUEST - (walk.looked - start)
    return room if bound is None else min(room, bound - walk.looked)


def _take(conn: Any, parts: list[QueueCalls], items: Items, walk: Walk, match: Matcher,
          found: list[dict[str, Any]], limit: int) -> bool:
    """The jobs of ``items`` that ``match`` keeps, added to ``found``: True when it stopped at
    ``limit`` before the last item (``walk`` then at the one it stopped after)."""
    rows = _rows(conn, parts, [entry for entry, _ in items])
    for n, ((entry, after), row) in enumerate(zip(items, rows, strict=True)):
        walk.looked += 1
        walk.position = after
        shown_job = match(entry, row)
        if shown_job is not None:
            found.append(shown_job)
        if len(found) == limit and n < len(items) - 1:
            return True
    return False


def _rows(conn: Any, parts: list[QueueCalls], entries: list[Entry]) -> list[list[Any]]:
    with conn.pipeline(transaction=False) as pipe:
        for entry in entries:
            pipe.hmget(parts[entry.part].key("job", entry.id), *ROW_FIELDS)
        return list(pipe.execute())


def _source(conn: Any, parts: list[QueueCalls], state: str, filters: Filters,
            newest: bool) -> Source:
    if state == "completed":
        return _completed(conn, parts)
    if state == "pending" and filters.lane is not None:
        part = shard_of("", len(parts), filters.lane) if len(parts) > 1 else 0
        calls = parts[part]
        lane = LaneKeys(calls.key("lane", lane=filters.lane), calls.key("prio",
                                                                         lane=filters.lane))
        return _lane(conn, lane, part)
    span = Span(newest=newest)
    if state == "pending" and filters.priority is not None:
        low, high = band(filters.priority)
        span = Span(low, high, newest)
    keys = [calls.key(ZSET_OF[state]) for calls in parts]

    def read(position: str | None, count: int) -> tuple[Items, str | None, bool]:
        after = None if position is None else zposition(position)
        entries = zpage(conn, keys, after, count, span)
        items = [(e, f"{e.score}{SEP}{e.id}") for e in entries]
        return items, items[-1][1] if items else position, len(entries) < count

    return read


def _lane(conn: Any, lane: LaneKeys, part: int) -> Source:
    def read(position: str | None, count: int) -> tuple[Items, str | None, bool]:
        start = lane_position(position)
        entries = lane_page(conn, lane, start, count)
        items = [(Entry(e.id, e.score, part), str(start + n + 1))
                 for n, e in enumerate(entries)]
        return items, str(start + len(items)), len(entries) < count

    return read


def _completed(conn: Any, parts: list[QueueCalls]) -> Source:
    """Every row of the queue, a SCAN step a read (the matcher keeps the tombstones: rows
    without a payload); the position is ``<part>,<scan cursor>,<ids of that step read>``."""

    def read(position: str | None, count: int) -> tuple[Items, str | None, bool]:
        part, scanned, skip = _scan_at(position)
        following, ids = scan_rows(conn, parts[part], scanned)
        items = [(Entry(job_id, None, part), f"{part}{SEP}{scanned}{SEP}{skip + n + 1}")
                 for n, job_id in enumerate(ids[skip:])]
        resume = _next_step(part, following, part == len(parts) - 1)
        return items, resume, resume is None

    return read


def _scan_at(position: str | None) -> tuple[int, int, int]:
    if position is None:
        return 0, 0, 0
    head, _, skip = position.rpartition(SEP)
    part, scanned = scan_position(head)
    if not skip.isdigit():
        raise CursorError(f"not a cursor of this list: {position!r}")
    return part, scanned, int(skip)


def _next_step(part: int, following: int, last_part: bool) -> str | None:
    if following != 0:
        return f"{part}{SEP}{following}{SEP}0"
    return None if last_part else f"{part + 1}{SEP}0{SEP}0"


def _tombstones(conn: Any, calls: QueueCalls, ids: list[str]) -> set[str]:
    with conn.pipeline(transaction=False) as pipe:
        for job_id in ids:
            row = calls.key("job", job_id)
            pipe.hexists(row, jobrow.PAYLOAD)
            pipe.hexists(row, jobrow.OLD_PAYLOAD)
            pipe.zscore(calls.key("dead"), job_id)
        replies = pipe.execute()
    return {job_id for n, job_id in enumerate(ids)
            if not any(replies[3 * n:3 * n + 3])}


class Matcher:
    """A listed job as the page shows it, or None when ``filters`` leave it out."""

    def __init__(self, filters: Filters, now_ms: int, *, tombstones: bool = False) -> None:
        self.filters = filters
        self.now_ms = now_ms
        self.tombstones = tombstones

    def __call__(self, entry: Entry, row: list[Any]) -> dict[str, Any] | None:
        if self.tombstones and (row[0] is not None or row[1] is not None):
            return None  # a row holding its payload is a live (or dead) job's
        job = summary(entry, row)
        return job if self.matches(job) else None

    def matches(self, job: dict[str, Any]) -> bool:
        wanted = self.filters
        checks: Iterator[bool] = iter((
            wanted.task is None or job["task"] == wanted.task,
            wanted.lane is None or job["lane"] == wanted.lane,
            wanted.priority is None or job["priority"] == wanted.priority,
            wanted.id is None or job["id"].startswith(wanted.id),
            wanted.error is None or wanted.error.lower() in (job["error"] or "").lower(),
            wanted.args is None or wanted.args.lower() in job["arguments"].lower(),
            wanted.older_than_ms is None or (job["enqueued_ms"] is not None
                                             and self.now_ms - job["enqueued_ms"]
                                             >= wanted.older_than_ms)))
        return all(checks)


def summary(entry: Entry, row: list[Any]) -> dict[str, Any]:
    """One job of a list: its id, its score's moment (for pending, split from its priority),
    task and arguments (cut short), attempts, priority, lane, enqueue time, error's last
    line."""
    payload, old_payload, a, old_a, t, old_t, priority, lane, error, cancelled, _ = row
    raw = payload if payload is not None else old_payload
    call = call_of(None if raw is None else payload_bytes(raw))
    arguments = call.arguments_text()
    attempts = text(a if a is not None else old_a or b"0")
    enqueued = text(t if t is not None else old_t or b"")
    message = readable_error(shown(error)).partition("\n")[0] if error is not None else None
    return {"id": entry.id, "score": entry.score, "task": call.task,
            "arguments": arguments, "arguments_shown": _cut(arguments),
            "attempts": int(attempts) if attempts.isdigit() else 0,
            "priority": priority_of(priority), "lane": None if lane is None else text(lane),
            "enqueued_ms": int(enqueued) if enqueued.isdigit() else None,
            "error": message, "cancelled": cancelled is not None,
            "at_ms": _moment(entry.score)}


def _moment(score: int | None) -> int | None:
    return None if score is None else split_score(score)[1]


def priority_of(value: Any) -> int:
    shown_value = "" if value is None else text(value)
    digits = shown_value.removeprefix("-")
    return int(shown_value) if digits.isdigit() and len(digits) <= 3 and abs(
        int(shown_value)) <= 100 else 0


def _cut(value: str) -> str:
    return value if len(value) <= ARGS_SHOWN else value[:ARGS_SHOWN - 1] + "…"
