"""The events stream in the model: the entry a change appends to ``<base>events`` when the call
declared it, with the fields in the order both executors write them (kind, job, attempt, at when
the call takes now, then fence, lane, due and priority where the event has them). The model keeps
each entry's fields only: ids carry the server's clock and are compared by order (the harness),
and it does not trim (MAXLEN ~ trims whole nodes): the scenarios it checks stay below
EVENTS_MAXLEN entries."""

from __future__ import annotations

from dataclasses import dataclass

from echomq.conformance.model.words import dec


def event_fields(kind: str, job_id: bytes, attempt: int, at: int | None = None,
                 fence: int | None = None, lane: bytes | None = None, due: int | None = None,
                 priority: int = 0) -> tuple[bytes, ...]:
    """The fields of one entry, in the executors' order."""
    fields = [b"kind", kind.encode(), b"job", job_id, b"attempt", dec(attempt)]
    if at is not None:
        fields += [b"at", dec(at)]
    if fence is not None:
        fields += [b"fence", dec(fence)]
    if lane is not None:
        fields += [b"lane", lane]
    if due is not None:
        fields += [b"due", dec(due)]
    if priority != 0:
        fields += [b"priority", dec(priority)]
    return tuple(fields)


@dataclass(frozen=True)
class EventSink:
    """Where a call's entries go: its events key (None: the call declared none, nothing is
    appended) and its now (None: the call takes none, the entries have no ``at``)."""

    key: bytes | None = None
    at: int | None = None

    def entry(self, kind: str, job_id: bytes, attempt: int, fence: int | None = None,
              lane: bytes | None = None, due: int | None = None,
              priority: int = 0) -> tuple[bytes, ...] | None:
        if self.key is None:
            return None
        return event_fields(kind, job_id, attempt, self.at, fence, lane, due, priority)
