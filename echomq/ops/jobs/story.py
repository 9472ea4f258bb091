"""One job's story, as its page tells it: the call it carries (decoded by the task layer's own
decoder), its attempts, result, error, progress, priority, lane and dedupe key, why it waits
where the data says (delayed until, its parents not done, its lane or queue paused or at a
limit, the jobs ahead of it), and its timeline from the queue's events stream.

The stream has no index by job: the timeline is the job's entries among the newest
``TIMELINE_LOOK`` of the stream (read newest first, ``TIMELINE_STEP`` a read), so one page
never reads more than that many entries; an older job's early events may have been trimmed
anyway (the stream keeps about 10,000).
"""

from __future__ import annotations

import datetime
from dataclasses import asdict
from typing import Any

import msgspec

from echomq.engine.calls import QueueCalls, payload_bytes, text
from echomq.engine.events import Event, decode_entries
from echomq.engine.server_time import server_ms
from echomq.engine.transitions import EVENTS_ROLE
from echomq.ops import admin
from echomq.ops.jobs.lists import call_of, priority_of
from echomq.tasks.envelope import PayloadError, decode_result

TIMELINE_LOOK = 10_000
TIMELINE_STEP = 1000
# The bits of ``<base>parked`` (docs/PROTOCOL.md, keys): why a group with jobs is out of the ring.
AT_CONCURRENCY, OVER_RATE, LANE_PAUSED = 1, 2, 4
# Where ``admin.inspect`` finds a job, by the names of the lists (a lane's job is pending).
SHOWN_STATES = {"active": "running"}


def utc(ms: int) -> str:
    """An epoch-ms moment as the pages write it: ``2026-12-07 20:30:00.250 UTC``."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def story_of(conn: Any, name: str, job_id: str) -> dict[str, Any] | None:
    """The story of ``job_id`` on queue ``name`` (None: no row, never admitted or its
    tombstone gone)."""
    found = admin.located(conn, name, job_id)
    if found is None:
        return None
    calls, seen = found
    fields = seen["fields"]
    call = call_of(fields.get("payload"))
    now = server_ms(conn)
    where = seen["state"]
    return {"id": job_id, "queue": name,
            "state": "pending" if where.startswith("lane:") else SHOWN_STATES.get(where, where),
            "where": where, "task": call.task,
            "args": msgspec.to_builtins(call.args), "kwargs": msgspec.to_builtins(call.kwargs),
            "attempts": _int(fields.get("attempts")) or 0,
            "priority": priority_of(fields.get("priority")),
            "lane": fields.get("lane"),
            "dedupe": _dedupe(fields.get("dedupe")),
            "result": _result(conn, calls, job_id, fields),
            "enqueued_ms": _int(fields.get("enqueued_at")),
            "server_time_ms": now,
            "why": reasons(conn, calls, seen, now),
            "timeline": timeline(conn, calls, job_id)}


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _dedupe(value: str | None) -> str | None:
    return None if value is None else value.removeprefix("dedupe:")


def _result(conn: Any, calls: QueueCalls, job_id: str, fields: dict[str, Any]) -> Any:
    """The kept result, decoded as a task's (its value), else as text; None when none is kept.
    The row's fields are shown as text: the result is read again as bytes to decode."""
    if "result" not in fields:
        return None
    raw = conn.hget(calls.key("job", job_id), "result")
    if raw is None:
        return fields["result"]  # "dropped (memory)"
    value = payload_bytes(raw)
    try:
        return {"value": msgspec.to_builtins(decode_result(value).value)}
    except PayloadError:
        return {"text": admin.shown(value)} if value else None


def reasons(conn: Any, calls: QueueCalls, seen: dict[str, Any], now: int) -> list[str]:
    """Why the job is where it is, in words, as far as the data says."""
    state, fields, score = seen["state"], seen["fields"], seen["score"]
    said: list[str] = []
    if conn.exists(calls.key("paused")) and state not in ("completed", "dead", "active"):
        said.append("the queue is paused: no claim leases a job until it is resumed")
    if state == "delayed" and score is not None:
        retry = int(fields.get("attempts", "0") or 0) > 0 and "error" in fields
        said.append(f"delayed until {utc(score)}"
                    + (" (a retry after a failed attempt)" if retry else "")
                    + ("; due now: the next promote takes it" if score <= now else ""))
    elif state == "waiting":
        said.append(_waits(fields))
    elif state == "active" and score is not None:
        said.append(f"running: attempt {fields.get('attempts', '?')}, its lease ends at "
                    f"{utc(score)}")
    elif state == "pending" and score is not None:
        said.append(_ahead(conn, calls, score, seen["id"]))
    elif state.startswith("lane:"):
        said += _lane_reasons(conn, calls, state.removeprefix("lane:"))
    return said


def _waits(fields: dict[str, Any]) -> str:
    raw = str(fields.get("waits", "0"))
    waits = int(raw) if raw.isdigit() else 0
    open_for_more = "hold" in fields
    parents = waits - int(open_for_more)
    said = f"waiting for its parents: {parents} not done yet"
    return said + ("; still open for more parents" if open_for_more else "")


def _ahead(conn: Any, calls: QueueCalls, score: int, job_id: str) -> str:
    rank = conn.zrank(calls.key("pending"), job_id)
    if rank is None:
        return "pending"
    return f"pending: {int(rank)} job(s) of this part of the queue are ahead of it in claim order"


def _lane_reasons(conn: Any, calls: QueueCalls, group: str) -> list[str]:
    with conn.pipeline(transaction=False) as pipe:
        pipe.hget(calls.key("parked"), group)
        pipe.zscore(calls.key("throttled"), group)
        pipe.hget(calls.key("leased"), group)
        bits, opens, leased = pipe.execute()
    flags = int(bits) if bits is not None and text(bits).isdigit() else 0
    said = [f"waiting in lane {group}, served in turn with the other lanes"]
    if flags & LANE_PAUSED:
        said.append(f"lane {group} is paused: none of its jobs is claimed until it is resumed")
    if flags & AT_CONCURRENCY:
        held = 0 if leased is None else int(text(leased))
        said.append(f"lane {group} is at its concurrency limit ({held} leases held)")
    if flags & OVER_RATE and opens is not None:
        said.append(f"lane {group} is over its rate until {utc(int(opens))}")
    return said


def timeline(conn: Any, calls: QueueCalls, job_id: str) -> dict[str, Any]:
    """The job's events among the newest ``TIMELINE_LOOK`` of the stream, oldest first, each
    with its words: ``{"enabled", "events", "looked", "complete"}`` (complete: the whole stream
    was looked at)."""
    key = calls.key(EVENTS_ROLE)
    if not conn.exists(key):
        return {"enabled": False, "events": [], "looked": 0, "complete": True}
    found: list[Event] = []
    looked, end = 0, "+"
    while looked < TIMELINE_LOOK:
        step = decode_entries(conn.xrevrange(key, end, "-", count=TIMELINE_STEP))
        looked += len(step)
        found += [event for event in step if event.job_id == job_id]
        if len(step) < TIMELINE_STEP:
            return {"enabled": True, "events": _told(found), "looked": looked, "complete": True}
        end = "(" + step[-1].id
    return {"enabled": True, "events": _told(found), "looked": looked, "complete": False}


def _told(events: list[Event]) -> list[dict[str, Any]]:
    return [{**asdict(event), "said": said_of(event)} for event in reversed(events)]


def said_of(event: Event) -> str:
    """What an event means, in words."""
    due = "" if event.due_ms is None else f" until {utc(event.due_ms)}"
    lane = "" if event.lane is None else f" in lane {event.lane}"
    words = {
        "enqueued": f"enqueued{lane}" + (f", delayed{due}" if due else ""),
        "claimed": f"claimed: attempt {event.attempt} started{lane}",
        "done": f"done after {event.attempt} attempt(s)",
        "retried": f"attempt {event.attempt} failed: to run again, delayed{due}",
        "dead": f"dead after {event.attempt} attempt(s)",
        "released": "released: put back without spending an attempt",
        "recovered": "its worker was lost: the lease expired and the job went back to wait",
        "promoted": "due: moved from delayed to wait for a worker",
        "requeued": "requeued by an operator with fresh attempts",
        "purged": "purged: its row deleted",
        "cancelled": "cancelled",
        "progress": "reported progress",
        "waiting": "waiting for its parents",
        "ready": "its parents are done: admitted to run",
        "debounced": f"pushed back by a later call of the same debounce key{due}",
    }
    return words.get(event.kind, event.kind)
