"""What each transition sends and what its reply means, for one queue — no I/O.

``QueueCalls`` turns a method call into a ``Call`` (transition, keys, arguments), checking every
argument with the protocol's own C rules first; the functions below decode replies. The blocking
``echomq.Queue`` and the asyncio ``echomq.aio.Queue`` both send what this module builds, so the
two clients cannot drift apart.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from echomq.engine import transitions as t
from echomq.engine.deadlines import optional_args
from echomq.engine.errors import ArgumentError, StaleLease
from echomq.engine.native import (
    checked_claim_id,
    checked_id,
    checked_int,
    checked_lane,
    checked_now,
)
from echomq.engine.rows import ATTEMPTS, ENQUEUED_AT, OLD_ATTEMPTS, OLD_PAYLOAD, PAYLOAD
from echomq.engine.server_time import time_ms

Arg = str | bytes
Call = tuple[t.Transition, Sequence[str], Sequence[Arg]]
Payload = bytes | bytearray | memoryview | str
# An item of enqueue_many: (id, payload), (id, payload, lane) or (id, payload, lane, priority).
Item = (tuple[str, Payload] | tuple[str, Payload, str | None]
        | tuple[str, Payload, str | None, int])

DEFAULT_LEASE_MS = 30_000
DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_BATCH_LIMIT = 1000
ZSETS = ("pending", "active", "delayed", "dead")
MAX_RESULT_BYTES = t.MAX_RESULT_BYTES
RESULT_ERROR = t.ERRORS["RESULT"].text
MAX_PROGRESS_BYTES = t.MAX_PROGRESS_BYTES
PROGRESS_ERROR = t.ERRORS["PROGRESS"].text


def new_claim_id() -> str:
    """A claim id no other call uses: 96 random bits (a claim record lives for a lease)."""
    return secrets.token_hex(12)


def checked_arg(name: str, value: int) -> str:
    """Integer argument ``name`` as the protocol takes it, checked against its minimum in the
    protocol table (echomq.engine.transitions.ARGUMENTS)."""
    return checked_int(name, value, t.ARGUMENTS[name].min)


class Verdict(enum.Enum):
    """What a transition did, as the server words it."""

    ENQUEUED = "ENQUEUED"
    DUPLICATE = "DUPLICATE"
    ACKED = "ACKED"
    STALE = "STALE"
    RETRYING = "RETRYING"
    DEAD = "DEAD"
    EXTENDED = "EXTENDED"
    RELEASED = "RELEASED"
    RECORDED = "RECORDED"
    KEPT = "KEPT"  # a step recorded already: its first output stands
    # cancel's: cancelled (a flagged lease ended so too), flagged (its heartbeats), done, none
    CANCELLED = "CANCELLED"
    CANCELLING = "CANCELLING"
    DONE = "DONE"
    UNKNOWN = "UNKNOWN"
    # a job with parents (enqueue_after, after): waiting, moved to pending, not waiting, sealed
    WAITING = "WAITING"
    READY = "READY"
    NOTWAITING = "NOTWAITING"
    SEALED = "SEALED"
    # the unique enqueue's: a delayed job of the key pushed back, a throttle's window taken
    DEBOUNCED = "DEBOUNCED"
    THROTTLED = "THROTTLED"

    def __str__(self) -> str:
        """The server's word, as the command line prints it: ``ENQUEUED``."""
        return self.value

    @classmethod
    def of(cls, reply: Any) -> Verdict:
        verdict = _VERDICT_OF_REPLY.get(reply) if type(reply) is bytes else None
        return verdict if verdict is not None else cls(text(reply))


# A verdict by its reply's bytes: a batch reads one per job, and an Enum lookup by value is slow.
_VERDICT_OF_REPLY = {verdict.value.encode(): verdict for verdict in Verdict}


@dataclass(frozen=True)
class Job:
    """A leased job: run it, then ack, retry or extend it by its (id, fence) lease.

    ``attempt`` counts the job's runs (retry compares it with max_attempts); ``fence`` is the
    lease's number, unique within the queue, so a lease outlived by its holder never matches a
    later one — not after the id is admitted again, nor after a dead job is requeued."""

    id: str
    payload: bytes
    attempt: int
    lane: str | None = None
    fence: int = 0

    def __hash__(self) -> int:
        # A consumer keeps its leases in hand keyed by job: the id is enough (equal jobs have
        # equal ids), and a str keeps its hash, so a job is hashed once however often it is
        # looked up (no tuple built, no payload hashed).
        return hash(self.id)


@dataclass(frozen=True)
class Ack:
    """An outcome for ``Queue.settle``: complete ``job``'s lease, as ``Queue.ack``; with
    ``result``, the job's tombstone keeps it (at most ``MAX_RESULT_BYTES``) in the same step."""

    job: Job
    result: bytes | None = None


@dataclass(frozen=True)
class Retry:
    """An outcome for ``Queue.settle``: fail ``job``'s lease, as ``Queue.retry`` — run it again
    after ``delay_ms``, or dead when its attempts reach ``max_attempts`` (None: the queue's)."""

    job: Job
    delay_ms: int = 1_000
    error: Payload = ""
    max_attempts: int | None = None


@dataclass(frozen=True)
class Release:
    """An outcome for ``Queue.settle``: hand ``job``'s lease back unrun. The job goes back where
    an expired lease would (pending at its enqueued_at, or its lane's head) at once, and the
    attempt its claim counted is uncounted."""

    job: Job


Outcome = Ack | Retry | Release

# The states a job ends in: a waiter stops there.
ENDED_STATES = ("done", "dead", "cancelled")


@dataclass(frozen=True)
class JobOutcome:
    """Where a job stands, as ``Queue.outcome`` and ``Queue.wait`` read it: ``state`` is
    "pending" (waiting to run, in pending or its lane), "waiting" (for its parents: a workflow's
    job, ``Queue.enqueue_after``), "delayed", "active" (also while its
    lease is flagged by a cancel), "done" (acked; the tombstone keeps ``result`` when the ack
    stored one), "cancelled" (a cancel's tombstone), "dead" or "unknown" (no row: never
    admitted, or its tombstone expired). ``error`` is the last error recorded (a dead job's
    reason), ``attempts`` the runs counted, ``progress`` the last progress a holder of its
    lease recorded (``Queue.set_progress``; kept in the tombstone). ``dropped`` says why a done
    job's result was not kept although its ack carried one: "memory" when the server was over
    maxmemory (docs/PROTOCOL.md, "Results under memory pressure"); None otherwise."""

    state: str
    result: bytes | None
    error: str | None
    attempts: int
    progress: bytes | None = None
    dropped: str | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


UNKNOWN = JobOutcome("unknown", None, None, 0)
# The reads behind an outcome, in this order, each after the job id's keys are named: the row's
# type and fields, whether it still holds its payload (an ack removes it), then the zsets.
_PLACES = ("dead", "active", "delayed", "pending")


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def payload_bytes(value: Payload) -> bytes:
    """A payload or an error text as the bytes sent: str as UTF-8, bytes-like as its bytes.
    TypeError for anything else, so a dict or None is refused rather than sent as its repr."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"a payload must be str or bytes-like, not {type(value).__name__}")


def checked_result(result: Payload) -> bytes:
    """A result to keep, as its bytes: at most MAX_RESULT_BYTES (ArgumentError with the server's
    words otherwise, before anything is sent)."""
    raw = payload_bytes(result)
    if len(raw) > MAX_RESULT_BYTES:
        raise ArgumentError(RESULT_ERROR)
    return raw


def checked_progress(data: Payload) -> bytes:
    """A progress to record, as its bytes: at most MAX_PROGRESS_BYTES (ArgumentError with the
    server's words otherwise, before anything is sent)."""
    raw = payload_bytes(data)
    if len(raw) > MAX_PROGRESS_BYTES:
        raise ArgumentError(PROGRESS_ERROR)
    return raw


def outcome_of(replies: Sequence[Any]) -> JobOutcome:
    """The JobOutcome of the replies to ``QueueCalls.outcome_reads``. A row that is not a hash
    is no job's (unknown); dead wins over everything (a dead job keeps its payload); a row
    without its payload was acked (done) or cancelled (its cancel mark kept); else the zset
    that holds the id, or waiting (its row counts the parents it waits for, ``waits``), or
    pending (a lane job waiting in its lane is in no zset). A row that expires is a tombstone
    (only an ack and a cancel set an expiry); a row of the earlier layout is read by its old
    names where the new are absent (docs/PROTOCOL.md, "The job row")."""
    kind, fields, has_p, has_old_payload, expiry, *scores = replies
    if text(kind) != "hash":
        return UNKNOWN
    a, result, error, progress, cancelled, waits, dropped, old_attempts = fields
    attempts = old_attempts if a is None else a
    has_payload = (bool(has_p) or bool(has_old_payload)) and int(expiry) == -1
    places = [place for place, score in zip(_PLACES, scores, strict=True) if score is not None]
    if "dead" in places:
        state = "dead"
    elif not has_payload:
        state = "done" if cancelled is None else "cancelled"
    else:  # a row counting the parents it waits for is in waiting (and in no zset above)
        state = places[0] if places else "pending" if waits is None else "waiting"
    count = int(attempts) if attempts is not None and text(attempts).isdigit() else 0
    return JobOutcome(state, None if result is None else payload_bytes(result),
                      None if error is None else payload_bytes(error).decode(errors="replace"),
                      count, None if progress is None else payload_bytes(progress),
                      None if dropped is None or state != "done" else text(dropped))


def job_of(reply: Any) -> Job | None:
    """The Job a claim or lane claim replied with (``[id, payload, attempt, fence[, group]]``)."""
    if reply is None:
        return None
    lane = text(reply[4]) if len(reply) > 4 else None
    return Job(text(reply[0]), payload_bytes(reply[1]), int(reply[2]), lane, int(reply[3]))


def settled(reply: Any) -> tuple[list[Verdict], list[Job]]:
    """A settle's ``[verdicts, jobs]``: a verdict per outcome, in order (STALE included, not
    raised: the other outcomes of the call stand), and the jobs leased, oldest first."""
    verdicts, jobs = reply
    return [Verdict.of(verdict) for verdict in verdicts], [leased(job) for job in jobs]


def leased(reply: Any) -> Job:
    """One job of a settle's reply, ``[id, payload, attempt, fence]``; a batch reads one per
    job, so the usual RESP types are read directly."""
    job_id, payload, attempt, fence = reply
    if type(job_id) is bytes and type(payload) is bytes and type(attempt) is int \
            and type(fence) is int:
        return Job(job_id.decode(), payload, attempt, None, fence)
    return Job(text(job_id), payload_bytes(payload), int(attempt), None, int(fence))


def fenced(job: Job, reply: Any) -> Verdict:
    """The verdict of an ack, retry, extend or progress; StaleLease when the lease was not
    current."""
    verdict = Verdict.of(reply)
    if verdict is Verdict.STALE:
        raise StaleLease(job.id, job.attempt)
    return verdict


def admission_reads(call: Call) -> list[tuple[str, ...]]:
    """Read after an admission whose reply was lost: the row's p and t, then ``TIME``."""
    return [("HMGET", call[1][0], PAYLOAD, ENQUEUED_AT), ("TIME",)]


def lost_admission(call: Call, replies: Sequence[Any], elapsed_s: float) -> Verdict | None:
    """What an admission whose reply was lost did, from ``admission_reads`` sent
    ``elapsed_s`` after it was: ENQUEUED when the row holds its payload and was admitted within
    the call — enqueued_at the call's ``now``, or (``now`` ``*``) no earlier than the server's
    clock less the time the call took; DUPLICATE for any other row; None when there is no row
    (nothing was admitted: the call may be sent again)."""
    (payload, enqueued_at), clock = replies
    if payload is None:
        return None
    transition, _keys, args = call
    stamp = text(args[transition.args.index("now")])
    sent = payload_bytes(args[transition.args.index("payload")])
    at = int(enqueued_at) if enqueued_at is not None and text(enqueued_at).isdigit() else -1
    if stamp == "*":
        clock_ms = time_ms(clock)
        within = at >= clock_ms - int(elapsed_s * 1000) - 1
    else:
        within = at == int(stamp)
    return Verdict.ENQUEUED if within and payload_bytes(payload) == sent else Verdict.DUPLICATE


def earliest(heads: Sequence[Any]) -> int | None:
    """The lowest score among ``ZRANGE key 0 0 WITHSCORES`` replies, as ms."""
    times = [int(float(head_score(head))) for head in heads if head]
    return min(times) if times else None


def head_score(head: Sequence[Any]) -> Any:
    """The score of a non-empty ``ZRANGE key 0 0 WITHSCORES`` reply: a client's pairs
    (``[(member, score)]``), or the server's own, flat on RESP2 or pairs on RESP3."""
    first = head[0]
    return first[1] if isinstance(first, list | tuple) else head[1]


class QueueCalls:
    """The calls of queue ``name``: keys built from its base, arguments checked and encoded.
    With ``events``, every call of a transition that reports its changes declares the queue's
    events key, so each change it makes is appended to ``<base>events``."""

    def __init__(self, name: str, *, retention_ms: int = DEFAULT_RETENTION_MS,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, events: bool = False) -> None:
        self.name = name
        self.base = t.queue_base(name)
        self.retention_ms = retention_ms
        self.max_attempts = max_attempts
        self.events = events

    def key(self, role: str, job_id: str | None = None, lane: str | None = None) -> str:
        return t.key_of(self.base, role, job_id, lane)

    def _call(self, transition: t.Transition, args: Sequence[Arg], job_id: str | None = None,
              lane: str | None = None, claim_id: str | None = None) -> Call:
        if claim_id is not None:
            checked_claim_id(claim_id)
        keys = t.keys_for(self.base, transition, job_id, lane, claim_id, events=self.events)
        return transition, keys, args

    def enqueue(self, job_id: str, payload: Payload, lane: str | None,
                now: int | None, delay_ms: int = 0, at_ms: int | None = None,
                priority: int = 0, deadline: int | None = None) -> Call:
        """An admission: to run at once, or (a delay or an absolute due time given) to run at
        the later of now + ``delay_ms`` and ``at_ms``; at ``priority`` (higher claimed first);
        with a ``deadline`` (a flat job only, echomq.engine.deadlines)."""
        if deadline is not None and lane is not None:
            raise ArgumentError("expires_in and expires_at take a flat job, not a lane's")
        if delay_ms == 0 and at_ms is None:
            return self._admission(job_id, payload, lane, checked_now(now), priority, deadline)
        return self._delayed_admission(job_id, payload, lane, checked_now(now), delay_ms, at_ms,
                                       priority, deadline)

    def _delayed_admission(self, job_id: str, payload: Payload, lane: str | None, stamp: str,
                           delay_ms: int, at_ms: int | None, priority: int = 0,
                           deadline: int | None = None) -> Call:
        checked_id(job_id)
        body = payload_bytes(payload)
        due = [checked_arg("delay_ms", delay_ms), checked_arg("at_ms", at_ms or 0)]
        rank = optional_args(priority, deadline)
        if lane is None:
            return self._call(t.ENQUEUE_DELAYED, (job_id, body, stamp, *due, *rank), job_id)
        args: tuple[Arg, ...] = (job_id, body, checked_lane(lane), stamp, *due, *rank)
        return self._call(t.LANE_ENQUEUE_DELAYED, args, job_id)

    def _admission(self, job_id: str, payload: Payload, lane: str | None,
                   stamp: str, priority: int = 0, deadline: int | None = None) -> Call:
        checked_id(job_id)
        rank = optional_args(priority, deadline)
        if lane is None:
            return self._call(t.ENQUEUE, (job_id, payload_bytes(payload), stamp, *rank), job_id)
        args: tuple[Arg, ...] = (job_id, payload_bytes(payload), checked_lane(lane), stamp, *rank)
        return self._call(t.LANE_ENQUEUE, args, job_id, lane)

    def claim(self, lease_ms: int, now: int | None, claim_id: str | None = None) -> Call:
        """A claim; with ``claim_id``, one whose leases are recorded under it, so the same call
        sent again after a lost reply answers them rather than lease more (docs/PROTOCOL.md,
        "Claim records")."""
        return self._call(t.CLAIM, (checked_arg("lease_ms", lease_ms), checked_now(now)),
                          claim_id=claim_id)

    def claim_lane(self, lease_ms: int, now: int | None, claim_id: str | None = None) -> Call:
        return self._call(t.LANE_CLAIM, (checked_arg("lease_ms", lease_ms), checked_now(now)),
                          claim_id=claim_id)

    def ack(self, job: Job, retention_ms: int | None, result: Payload | None = None) -> Call:
        keep = self.retention_ms if retention_ms is None else retention_ms
        args = (checked_id(job.id), checked_arg("fence", job.fence),
                checked_arg("retention_ms", keep))
        if result is None:
            return self._call(t.ACK, args, job.id)
        return self._call(t.ACK_RESULT, (*args, checked_result(result)), job.id)

    def retry(self, job: Job, delay_ms: int, error: Payload, max_attempts: int | None,
              now: int | None) -> Call:
        limit = self.max_attempts if max_attempts is None else max_attempts
        args = (checked_id(job.id), checked_arg("fence", job.fence),
                checked_arg("delay_ms", delay_ms), checked_arg("max_attempts", limit),
                payload_bytes(error), checked_now(now))
        return self._call(t.RETRY, args, job.id)

    def extend(self, job: Job, lease_ms: int, now: int | None) -> Call:
        args = (checked_id(job.id), checked_arg("fence", job.fence),
                checked_arg("lease_ms", lease_ms), checked_now(now))
        return self._call(t.EXTEND, args, job.id)

    def progress(self, job: Job, data: Payload) -> Call:
        args = (checked_id(job.id), checked_arg("fence", job.fence), checked_progress(data))
        return self._call(t.PROGRESS, args, job.id)

    def settle(self, outcomes: Iterable[Outcome], claim: int, lease_ms: int,
               retention_ms: int | None, now: int | None, *, leased: bool = False,
               claim_id: str | None = None) -> Call:
        """One call that settles every outcome in order, then leases up to ``claim`` jobs.
        ``leased``: every outcome is ``echomq.consumer.loop``'s own, of a job this queue's claim
        returned (its id and fence are the server's), so only the outcome's own fields are
        checked — this runs for every job a consumer settles. ``claim_id``: the claim's record
        (see ``claim``)."""
        keep = self.retention_ms if retention_ms is None else retention_ms
        args: list[Arg] = [checked_now(now), checked_arg("retention_ms", keep),
                           checked_arg("lease_ms", lease_ms), checked_arg("count", claim)]
        item = self._leased_item if leased else self._item
        for outcome in outcomes:
            args += item(outcome)
        return self._call(t.SETTLE, args, claim_id=claim_id)

    def _leased_item(self, outcome: Outcome) -> list[Arg]:
        job = outcome.job
        if type(outcome) is Ack:
            if outcome.result is not None:
                return ["done", job.id, str(job.fence), checked_result(outcome.result)]
            return ["ack", job.id, str(job.fence)]
        if type(outcome) is Release:
            return ["release", job.id, str(job.fence)]
        return self._item(outcome)

    def claim_many(self, count: int, lease_ms: int, now: int | None,
                   claim_id: str | None = None) -> Call:
        """A settle with no outcomes: lease up to ``count`` (>= 1) jobs."""
        checked_int("count", count, 1)
        return self.settle((), count, lease_ms, None, now, claim_id=claim_id)

    def _item(self, outcome: Outcome) -> list[Arg]:
        if not isinstance(outcome, Ack | Retry | Release):
            raise TypeError(f"an outcome is Ack, Retry or Release, not {type(outcome).__name__}")
        job = outcome.job
        lease: list[Arg] = [checked_id(job.id), checked_arg("fence", job.fence)]
        if isinstance(outcome, Ack):
            if outcome.result is not None:
                return ["done", *lease, checked_result(outcome.result)]
            return ["ack", *lease]
        if isinstance(outcome, Release):
            return ["release", *lease]
        limit = self.max_attempts if outcome.max_attempts is None else outcome.max_attempts
        return ["retry", *lease, checked_arg("delay_ms", outcome.delay_ms),
                checked_arg("max_attempts", limit), payload_bytes(outcome.error)]

    def extend_many(self, jobs: Iterable[Job], lease_ms: int, now: int | None) -> Call:
        args: list[Arg] = [checked_arg("lease_ms", lease_ms), checked_now(now)]
        for job in jobs:
            args += [checked_id(job.id), checked_arg("fence", job.fence)]
        return self._call(t.EXTEND_MANY, args)

    def recover(self, now: int | None, limit: int, max_attempts: int | None) -> Call:
        spent = self.max_attempts if max_attempts is None else max_attempts
        return self._call(t.RECOVER, (checked_now(now), checked_arg("limit", limit),
                                      checked_arg("max_attempts", spent)))

    def promote(self, now: int | None, limit: int) -> Call:
        return self._call(t.PROMOTE, (checked_now(now), checked_arg("limit", limit)))

    def cancel(self, job_id: str, retention_ms: int | None, now: int | None) -> Call:
        """A cancel of ``job_id``; its tombstone (or a flagged lease's, once it ends) stays for
        ``retention_ms`` (None: the queue's retention)."""
        keep = self.retention_ms if retention_ms is None else retention_ms
        args = (checked_id(job_id), checked_now(now), checked_arg("retention_ms", keep))
        return self._call(t.CANCEL, args, job_id)

    def outcome_reads(self, job_id: str) -> list[tuple[str, ...]]:
        """The read-only commands behind ``outcome_of``, to send in one pipeline."""
        row = self.key("job", checked_id(job_id))
        return [("TYPE", row),
                ("HMGET", row, ATTEMPTS, "result", "error", "progress", "cancelled", "waits",
                 "result_dropped", OLD_ATTEMPTS),
                ("HEXISTS", row, PAYLOAD), ("HEXISTS", row, OLD_PAYLOAD), ("PTTL", row),
                *(("ZSCORE", self.key(place), job_id) for place in _PLACES)]

    def requeue(self, job_id: str, now: int | None) -> Call:
        return self._call(t.REQUEUE, (checked_id(job_id), checked_now(now)), job_id)

    def purge(self, limit: int) -> Call:
        return self._call(t.PURGE, (checked_arg("limit", limit),))

    def trim_dead(self, now: int | None, limit: int) -> Call:
        return self._call(t.TRIM_DEAD, (checked_now(now), checked_arg("limit", limit)))
