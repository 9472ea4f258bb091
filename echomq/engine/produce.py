"""A producer's batch, for ``Queue.enqueue_many`` — no I/O: the calls that admit a list of items,
and the verdict of each item from their replies.

Each run of flat items goes as ``EMQ.ENQUEUE_MANY`` (or its script), at most
``ENQUEUE_MANY_MAX`` jobs a call; an item with a group goes as its own lane enqueue (lanes have
no batch: scripts only), in its place, so the items are admitted in list order whatever their
kind. A command the server refuses (out of memory, say) leaves the others of the batch as they
ran: ``admitted`` then raises ``PartialAdmission``, which tells which items were admitted. The
per-item work is the arguments' checks and four words appended to the call's list:
this runs for every job a producer sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from echomq.engine import transitions as t
from echomq.engine.calls import Arg, Call, Item, QueueCalls, Verdict, checked_arg, payload_bytes
from echomq.engine.errors import KindError
from echomq.engine.native import checked_now, checked_priority, id_gate
from echomq.engine.partial import partial_admission

KIND_ERROR = t.ERRORS["KIND"].text
WIDTH = 4  # the words of one job in an EMQ.ENQUEUE_MANY call, after its first, the time
_VERDICT_OF_REPLY = {verdict.value.encode(): verdict for verdict in Verdict}


def enqueue_many_calls(calls: QueueCalls, items: Iterable[Item], now: int | None,
                       delay_ms: int = 0, most: int = t.ENQUEUE_MANY_MAX) -> list[Call]:
    """The calls admitting ``items`` in order, each due ``delay_ms`` after ``now``: runs of
    flat items, ``most`` (1 to ``ENQUEUE_MANY_MAX``) a call, and each item with a group alone.
    Every item is checked before anything is sent (KindError, LaneError, ArgumentError,
    TypeError)."""
    stamp, most = checked_now(now), min(max(most, 1), t.ENQUEUE_MANY_MAX)
    delay = checked_arg("delay_ms", delay_ms)
    keys = t.keys_for(calls.base, t.ENQUEUE_MANY, events=calls.events)
    out: list[Call] = []
    args: list[Arg] = []
    room = 0
    for item in items:
        lane = item[2] if len(item) > 2 else None
        if lane is not None:
            if args:
                out.append((t.ENQUEUE_MANY, keys, args))
                args, room = [], 0
            out.append(_lane_call(calls, item, lane, now, delay_ms))
            continue
        if room == 0:
            if args:
                out.append((t.ENQUEUE_MANY, keys, args))
            args, room = [stamp], most
        args += _words(item, delay)
        room -= 1
    if args:
        out.append((t.ENQUEUE_MANY, keys, args))
    return out


def _words(item: Item, delay: str) -> tuple[Arg, Arg, Arg, Arg]:
    """A flat item's four words, ``<id> <payload> <delay_ms> <priority>``, checked."""
    job_id, payload = item[0], item[1]
    raw = job_id.encode() if type(job_id) is str else job_id
    if not id_gate(raw, len(raw)):
        raise KindError(KIND_ERROR)
    priority = item[3] if len(item) > 3 else 0
    return (job_id, payload if type(payload) is bytes else payload_bytes(payload), delay,
            "0" if priority == 0 and type(priority) is int else checked_priority(priority))


def _lane_call(calls: QueueCalls, item: Item, lane: str, now: int | None, delay_ms: int) -> Call:
    """A lane item's own lane enqueue (lanes have no batch)."""
    priority = item[3] if len(item) > 3 else 0
    return calls.enqueue(item[0], item[1], lane, now, delay_ms, priority=priority)


def verdicts(replies: Iterable[Any]) -> list[Verdict]:
    """A verdict per reply of a batch (an extend_many's), in order."""
    return [Verdict.of(reply) for reply in replies]


def batch_verdicts(calls: Sequence[Call], replies: Sequence[Any]) -> list[Verdict]:
    """A verdict per item, in order, from the replies to ``enqueue_many_calls``: an array of
    verdicts per batch, one verdict per lane enqueue."""
    out: list[Verdict] = []
    lookup = _VERDICT_OF_REPLY.get
    for call, reply in zip(calls, replies, strict=True):
        if call[0] is t.ENQUEUE_MANY:
            out += [lookup(word) or Verdict.of(word) for word in reply]
        else:
            out.append(Verdict.of(reply))
    return out


def item_verdicts(calls: Sequence[Call], replies: Sequence[Any]) -> list[Verdict | None]:
    """``batch_verdicts`` of replies some of which are errors (``call_each``'s): None for each
    item of a call that was refused."""
    out: list[Verdict | None] = []
    for call, reply in zip(calls, replies, strict=True):
        if not isinstance(reply, BaseException):
            out += batch_verdicts([call], [reply])
        elif call[0] is t.ENQUEUE_MANY:
            out += [None] * ((len(call[2]) - 1) // WIDTH)
        else:
            out.append(None)
    return out


def admitted(items: Sequence[Any], verdicts: Sequence[Verdict | None],
             error: BaseException | None) -> list[Verdict]:
    """The verdicts of a batch whose commands all ran (``error`` None); else raised: ``error``
    itself when no item was admitted (nothing was written), a PartialAdmission when some were
    (``items``: what its ``remaining`` is drawn from, one per verdict)."""
    if error is None:
        return [verdict for verdict in verdicts if verdict is not None]
    if all(verdict is None for verdict in verdicts):
        raise error
    remaining = [item for item, verdict in zip(items, verdicts, strict=True) if verdict is None]
    raise partial_admission(error, verdicts, remaining) from error
