"""A consumer's knobs and constants (``Settings``), the texts a failed attempt records, and the
small values its core trades in: how a job is settled (``Ack``, ``Retry``), a lease in hand, a
round of one settle call, the back-off after errors. No I/O."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass

from echomq.engine import calls
from echomq.engine.calls import Job, Outcome
from echomq.engine.errors import FatalServerError

Clock = Callable[[], int]

HOUSEKEEPING_MS = 1_000
PARK_FLOOR_MS = 10
# The longest park when nothing can fall due: an idle consumer's one re-read and BLPOP every
# 75 s, its record's rewrite every other park with them (a lane consumer included: under 0.1
# commands/s).
PARK_CAP_MS = 75_000
# The most time between two tries after transient errors (the park cap may be far longer).
BACKOFF_CAP_S = 5.0
PREFETCH = 128
# The largest prefetch: a batch is one settle call and every lease in hand goes into one heartbeat,
# each of which blocks the server for as long as it takes (tens of microseconds a job).
MAX_PREFETCH = 1_000
# How stale the consumer's knowledge that its queue is not paused may be when it starts a
# prefetched job: older, it asks first (a prefetched job starts at most this long after ``pause``).
PAUSE_CHECK_MS = 100
SETTLE_DELAY_MS = 5
BACKOFF_FIRST_S = 0.1
SETTLE_PAUSE_CAP_S = 1.0
# How much longer than the longest park the parking connection of a consumer waits for a reply.
PARK_SOCKET_MARGIN_S = 5.0
ERROR_TEXT_CAP = 4_096
MESSAGE_CAP = 1_024
TRACE_FRAMES = 8
# The largest result a ``Done`` may keep with its tombstone (the server's cap on an ack's result).
MAX_RESULT_BYTES = calls.MAX_RESULT_BYTES

# Raised by a handler, these ask the process to stop: the attempt is failed, then the loop ends.
STOPPING_TYPES: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt)


def safe_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot carry (a lone surrogate) written as an escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_text(exc: BaseException) -> str:
    """What a failed attempt records in the job row: ``Type: message`` on the first line, then
    the last frames of its traceback; safe to send (escaped) and at most ERROR_TEXT_CAP chars."""
    message = safe_text(str(exc))
    if len(message) > MESSAGE_CAP:
        message = message[:MESSAGE_CAP] + "…"
    head = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)[-TRACE_FRAMES:]
    if not frames:
        return head
    trace = safe_text("".join(traceback.format_list(frames)).rstrip("\n"))
    room = ERROR_TEXT_CAP - len(head) - 1
    if len(trace) > room:
        trace = trace[len(trace) - room:]
    return f"{head}\n{trace}" if room > 0 else head[:ERROR_TEXT_CAP]


class ResultTooLarge(ValueError):
    """A handler's ``Done(result)`` was over MAX_RESULT_BYTES; its attempt fails."""


def directive_error(error: object) -> str:
    """A ``RetryIn``/``Reject`` error as recorded: text, escaped, at most ERROR_TEXT_CAP."""
    return safe_text(str(error))[:ERROR_TEXT_CAP]


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def park_window(due: int, now: int, floor_ms: int, cap_ms: int) -> int:
    """How long to park (ms): until ``due``, within [floor_ms, cap_ms]."""
    return max(floor_ms, min(cap_ms, due - now + 1))



def park_socket_timeout(socket_timeout_s: float | None, cap_ms: int) -> float | None:
    """The read timeout of a consumer's own parking connection: the client's, raised to the park
    cap plus a margin so a long park never trips it (None: the client has none)."""
    if socket_timeout_s is None or socket_timeout_s <= 0:
        return None
    return max(socket_timeout_s, cap_ms / 1000 + PARK_SOCKET_MARGIN_S)



def fatal_error(queue_name: str, exc: BaseException) -> FatalServerError:
    """The one clear message a loop stops with when the server refuses what it cannot heal."""
    return FatalServerError(f"queue {queue_name}: the server refused a call and waiting will "
                            f"not help, so the consumer stops: {type(exc).__name__}: {exc}")


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class Settings:
    """The knobs of one consumer; the shells validate them once, here."""

    lease_ms: int
    retry_delay_ms: int
    max_attempts: int | None
    park_cap_ms: int
    park_floor_ms: int
    housekeeping_ms: int
    time_limit_ms: int | None
    retention_ms: int | None
    heartbeat: bool
    lanes: bool
    capacity: int = 1  # the consumer's prefetch: most jobs in hand at once
    settle_delay_ms: int = SETTLE_DELAY_MS
    pause_check_ms: int = PAUSE_CHECK_MS

    def __post_init__(self) -> None:
        positive = (self.lease_ms, self.park_cap_ms, self.housekeeping_ms, self.capacity)
        if min(positive) < 1 or self.retry_delay_ms < 0 or self.park_floor_ms < 0 \
                or self.settle_delay_ms < 0:
            raise ValueError("lease_ms, park_cap_ms, housekeeping_ms, prefetch must be positive, "
                             "retry_delay_ms, park_floor_ms, settle_delay_ms non-negative")
        if self.capacity > MAX_PREFETCH:
            raise ValueError(f"prefetch (and an async consumer's concurrency) must be at most "
                             f"{MAX_PREFETCH}, got {self.capacity}")
        if self.pause_check_ms < 0:
            raise ValueError("pause_check_ms must be non-negative")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be positive (or None: the queue's)")
        if self.time_limit_ms is not None and self.time_limit_ms < 1:
            raise ValueError("time_limit_ms must be positive (or None: no limit)")

    @property
    def extend_every_s(self) -> float:
        return max(self.lease_ms / 3, 1) / 1000

    @property
    def lease_s(self) -> float:
        return self.lease_ms / 1000

    @property
    def lapse_margin_s(self) -> float:
        """How long before its lease runs out (by the consumer's clock) a prefetched job is no
        longer started: a third of the lease, the heartbeat's interval, so a job that starts
        has that long for its first extend to get through."""
        return self.lease_s / 3

    @property
    def batch_cap(self) -> int:
        """The largest batch a claim takes: ``capacity``, but one job when this consumer gives
        each job a single attempt (``max_attempts=1``): a job that kills its worker would take
        the only attempt of every job prefetched with it."""
        return 1 if self.max_attempts == 1 else self.capacity

    @property
    def batch_claims(self) -> bool:
        """Whether claims take batches: a lane consumer takes one job at a time, lanes first,
        so every lane gets its turn."""
        return not self.lanes


@dataclass(frozen=True)
class Ack:
    """Settle by ack (a tombstone kept ``retention_ms``; None: the queue's), keeping ``result``
    with it when there is one."""

    retention_ms: int | None
    result: bytes | None = None


@dataclass(frozen=True)
class Retry:
    """Settle by retry after ``delay_ms`` (dead after ``max_attempts``; None: the queue's)."""

    delay_ms: int
    error: str
    max_attempts: int | None

    def outcome(self, job: Job) -> calls.Retry:
        """The retry of ``job`` a round sends."""
        return calls.Retry(job, self.delay_ms, self.error, self.max_attempts)


Settlement = Ack | Retry


@dataclass
class Lease:
    """A job in hand: since when (monotonic s), when its next extend is due, and when it runs
    out at the earliest by this consumer's clock (the lease counted from when the call that
    granted or last extended it was sent)."""

    job: Job
    started: float
    extend_at: float
    expires: float = float("inf")


@dataclass(frozen=True)
class Round:
    """One settle call: the outcomes to send, in order, and how many jobs to claim with them
    (under ``claim_id``: ``LoopCore.next_claim_id``)."""

    outcomes: list[Outcome]
    claim: int
    claim_id: str | None = None


@dataclass
class Backoff:
    """The pause after consecutive transient errors: 0.1 s, doubling, up to ``cap_s`` (the
    park cap, and at most half a lease: ``LoopCore.pause_cap_s``)."""

    cap_s: float
    pause_s: float = 0.0

    def failed(self) -> float:
        self.pause_s = min(max(self.pause_s * 2, BACKOFF_FIRST_S), self.cap_s)
        return self.pause_s

    def succeeded(self) -> None:
        self.pause_s = 0.0
