"""A validated call and its parts: the numbers parsed, the items of a batch (settle's ack, done,
release and retry, extend_many's pairs, enqueue_many's jobs) parsed in order, a job moving back
to be run."""

from __future__ import annotations

from dataclasses import dataclass, field

from echomq.conformance.model.replies import (
    E_KIND,
    E_PRIORITY,
    E_RESULT,
    RESULT_MAX,
    error,
    item_error,
    number_error,
)
from echomq.conformance.model.words import MINIMUM, id_ok, int_arg, priority_arg

SETTLE_ITEM = ("ack <id> <fence>, done <id> <fence> <result>, release <id> <fence> or retry "
               "<id> <fence> <delay_ms> <max_attempts> <error>")
PAIR = "<id> <fence>"


@dataclass
class Move:
    member: bytes
    row: bytes
    score: int
    lane: bytes | None = None
    spent: int = 0  # recover: the attempts of a job that goes dead
    cancelled: bool = False  # recover: a lease a cancel flagged, which ends cancelled
    priority: int = 0  # a lane job: its row's priority (not 0: back into <base>prio:<lane>)
    at: int = 0  # a lane job of priority not 0: the time its score is of


@dataclass
class Item:
    """One element of a batch: a settle item (ack, retry or release) or an extend_many pair."""

    op: bytes
    id: bytes
    fence: int
    delay_ms: int = 0
    max_attempts: int = 0
    error: bytes = b""
    result: bytes | None = None  # done: the result its tombstone keeps


JOB_SHAPE = "<id> <payload> <delay_ms> <priority>"
WIDTH = 4  # the words of one of enqueue_many's jobs
MAX_JOBS = 10_000  # the most jobs one enqueue_many admits


def many_error(verb: str, nmax: int) -> bytes:
    return error(f"EMQARITY EMQ.{verb} takes at most {nmax} items".encode())


@dataclass
class Admission:
    """One job of an enqueue_many: its id, payload, delay and priority."""

    id: bytes
    payload: bytes
    delay_ms: int
    priority: int


def parse_jobs(words: list[bytes]) -> list[Admission] | bytes:
    """enqueue_many's jobs, in order, each checked whole before the next: its width, id,
    delay_ms, priority."""
    jobs: list[Admission] = []
    for i in range(0, len(words), WIDTH):
        if i + WIDTH > len(words):
            return item_error(len(jobs) + 1, JOB_SHAPE)
        job_id, payload, delay, rank = words[i:i + WIDTH]
        if not id_ok(job_id):
            return error(E_KIND)
        delay_ms = int_arg(delay, 0)
        if delay_ms is None:
            return number_error("delay_ms", 0)
        priority = priority_arg(rank)
        if priority is None:
            return error(E_PRIORITY)
        jobs.append(Admission(job_id, payload, delay_ms, priority))
    return jobs


@dataclass
class Call:
    """A validated call: its keys, its arguments, the parsed numbers and items."""

    keys: list[bytes]
    args: list[bytes]
    base: bytes
    numbers: dict[str, int] = field(default_factory=dict)
    items: list[Item] = field(default_factory=list)
    record: bytes | None = None  # the claim record declared after the keys
    events: bytes | None = None  # the events key declared last
    recorded: list[tuple[bytes, int]] | None = None  # its leases, when it was found
    jobs: list[Admission] = field(default_factory=list)  # enqueue_many's jobs


def parse_items(words: list[bytes]) -> list[Item] | bytes:
    """settle's items, in order: op and width, id, fence, delay_ms, max_attempts (retry) or the
    result's size (done)."""
    items: list[Item] = []
    i = 0
    while i < len(words):
        width = {b"ack": 3, b"done": 4, b"release": 3, b"retry": 6}.get(words[i], 0)
        if width == 0 or i + width > len(words):
            return item_error(len(items) + 1, SETTLE_ITEM)
        checked = _item_lease(words[i + 1], words[i + 2])
        if isinstance(checked, bytes):
            return checked
        item = Item(words[i], *checked)
        failure = _item_tail(item, words[i + 3:i + width])
        if failure is not None:
            return failure
        items.append(item)
        i += width
    return items


def _item_tail(item: Item, tail: list[bytes]) -> bytes | None:
    """The words after an item's lease: done's result, retry's delay_ms, max_attempts and
    error. The error reply of the first bad one, or None."""
    if item.op == b"done":
        if len(tail[0]) > RESULT_MAX:
            return error(E_RESULT)
        item.result = tail[0]
    elif item.op == b"retry":
        for name, word in (("delay_ms", tail[0]), ("max_attempts", tail[1])):
            value = int_arg(word, MINIMUM[name])
            if value is None:
                return number_error(name, MINIMUM[name])
            setattr(item, name, value)
        item.error = tail[2]
    return None


def parse_pairs(words: list[bytes]) -> list[Item] | bytes:
    """extend_many's pairs, in order: width, id, fence."""
    items: list[Item] = []
    for i in range(0, len(words), 2):
        if i + 2 > len(words):
            return item_error(len(items) + 1, PAIR)
        checked = _item_lease(words[i], words[i + 1])
        if isinstance(checked, bytes):
            return checked
        items.append(Item(b"extend", *checked))
    return items


def _item_lease(job_id: bytes, fence: bytes) -> tuple[bytes, int] | bytes:
    if not id_ok(job_id):
        return error(E_KIND)
    value = int_arg(fence, 1)
    return number_error("fence", 1) if value is None else (job_id, value)
