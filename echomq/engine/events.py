"""A queue's events as a reader sees them — no I/O.

A Queue made with ``events=True`` declares ``<base>events`` on every call, and each transition
appends one stream entry per change it makes (docs/PROTOCOL.md, "Events"): the fields ``kind``,
``job``, ``attempt``, then ``at`` (the transition's ``now``) where it took one, then ``fence``,
``lane``, ``due`` and ``priority`` where they apply. ``decode_entries`` turns an ``XRANGE`` or
``XREAD`` reply into ``Event`` values, whichever shape the client library gives: redis-py and
valkey-py, RESP2 or RESP3.

A reader never raises on what a newer server may add: an unknown kind is kept as it was sent,
an unknown field is ignored, and a field that does not read as its kind reads as absent.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class EventKind(enum.StrEnum):
    """The kinds of event a transition appends, in the protocol table's order (``EVENT_KINDS``).
    Each is a ``str`` equal to its name as sent: ``EventKind.DONE == "done"``."""

    ENQUEUED = "enqueued"
    CLAIMED = "claimed"
    DONE = "done"
    RETRIED = "retried"
    DEAD = "dead"
    RELEASED = "released"
    RECOVERED = "recovered"
    PROMOTED = "promoted"
    REQUEUED = "requeued"
    PURGED = "purged"
    CANCELLED = "cancelled"
    PROGRESS = "progress"
    WAITING = "waiting"
    READY = "ready"
    DEBOUNCED = "debounced"


_KINDS = {kind.value: kind for kind in EventKind}

# A stream id, '<ms>-<seq>' (or '<ms>', which XRANGE and XREAD read as '<ms>-0').
STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?")
_INTEGER = re.compile(r"-?\d{1,20}")


@dataclass(frozen=True)
class Event:
    """One change of a job, as the transition that made it appended it.

    ``id`` is the stream id, ``'<ms>-<seq>'``: pass it as ``since`` to read what came after.
    ``kind`` is one of ``EventKind`` (a newer server's kind is kept as sent); ``attempt`` the
    job's attempts counted after the change; ``at_ms`` the transition's ``now`` (the id's ms for
    a transition that takes none: ack, purge). ``fence`` is the lease's, ``lane`` the job's
    group, ``due_ms`` when a delayed or retried job falls due, ``priority`` the job's when not
    0."""

    id: str
    kind: str
    job_id: str
    attempt: int
    at_ms: int
    fence: int | None = None
    lane: str | None = None
    due_ms: int | None = None
    priority: int = 0


def decode_entries(reply: Any) -> list[Event]:
    """The events of an ``XRANGE`` reply (a list of entries) or an ``XREAD`` reply of one
    stream: the RESP2 list ``[[key, entries]]`` or the RESP3 map ``{key: entries}`` (redis-py
    and valkey-py wrap those entries in one more list); None or empty for no events."""
    return [event_of(entry_id, fields) for entry_id, fields in _entries(reply)]


def decode_streams(reply: Any) -> dict[str, list[Event]]:
    """The entries of an ``XREAD`` reply of several streams, by stream key: the RESP2 list
    ``[[key, entries], ...]`` or the RESP3 map ``{key: entries}``; None or empty: none."""
    if not reply:
        return {}
    pairs = reply.items() if isinstance(reply, Mapping) else [(key, entries)
                                                               for key, entries in reply]
    return {_text(key): [event_of(entry_id, fields) for entry_id, fields in _entry_list(entries)]
            for key, entries in pairs}


def event_of(entry_id: Any, fields: Any) -> Event:
    """The event of one stream entry: its id and its fields (a mapping, or the flat list
    ``[name, value, ...]`` a raw reply holds)."""
    found = _field_map(fields)
    stream_id = _text(entry_id)
    raw_kind = found.get("kind", "")
    at = _integer(found.get("at"))
    return Event(
        id=stream_id,
        kind=_KINDS.get(raw_kind, raw_kind),
        job_id=found.get("job", ""),
        attempt=_integer(found.get("attempt")) or 0,
        at_ms=at if at is not None else id_ms(stream_id),
        fence=_integer(found.get("fence")),
        lane=found.get("lane"),
        due_ms=_integer(found.get("due")),
        priority=_integer(found.get("priority")) or 0,
    )


def id_ms(stream_id: str) -> int:
    """The ms part of a stream id (0 for one that is not an id)."""
    head = stream_id.partition("-")[0]
    return int(head) if head.isascii() and head.isdigit() else 0


def last_id(events: Sequence[Event], since: str | None) -> str | None:
    """The id to resume after: the last event's, else ``since`` (nothing new came)."""
    return events[-1].id if events else since


def _entries(reply: Any) -> list[tuple[Any, Any]]:
    if not reply:
        return []
    if isinstance(reply, Mapping):  # XREAD, RESP3: {key: entries}
        return [entry for entries in reply.values() for entry in _entry_list(entries)]
    if _is_entry(reply[0]):  # XRANGE: entries
        return _entry_list(reply)
    # XREAD, RESP2: [[key, entries], ...]
    return [entry for _key, entries in reply for entry in _entry_list(entries)]


def _entry_list(entries: Any) -> list[tuple[Any, Any]]:
    """The entries of one stream: ``[(id, fields), ...]``, or that list wrapped in lists, as the
    client libraries' RESP3 XREAD parsers give it."""
    if not entries:
        return []
    if _is_entry(entries[0]):
        return [(entry[0], entry[1]) for entry in entries if entry is not None]
    return [entry for inner in entries for entry in _entry_list(inner)]


def _is_entry(value: Any) -> bool:
    """An entry is ``(id, fields)``: an id, then a mapping or a flat list of names and values
    (a stream's key, in RESP2's ``[key, entries]``, is never an id: it ends in ``events``)."""
    if not isinstance(value, Sequence) or isinstance(value, bytes | str) or len(value) != 2:
        return False
    head, fields = value
    return isinstance(head, bytes | str) and STREAM_ID.fullmatch(_text(head)) is not None \
        and (isinstance(fields, Mapping) or fields is None or _is_flat(fields))


def _is_flat(fields: Any) -> bool:
    return isinstance(fields, Sequence) and all(isinstance(f, bytes | str) for f in fields)


def _field_map(fields: Any) -> dict[str, str]:
    if fields is None:
        return {}
    pairs: Iterable[tuple[Any, Any]]
    if isinstance(fields, Mapping):
        pairs = fields.items()
    else:
        pairs = zip(fields[0::2], fields[1::2], strict=False)
    return {_text(name): _text(value) for name, value in pairs}


def _integer(value: str | None) -> int | None:
    if value is None or _INTEGER.fullmatch(value) is None:
        return None
    return int(value)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
