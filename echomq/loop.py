"""The consumer loop's decisions, with no I/O: what to do next, and how to settle what happened.

``echomq.consumer.Consumer`` (threads, blocking redis-py) and ``echomq.aio.Consumer`` (asyncio)
are two shells around one ``LoopCore``: each shell performs the calls, the core decides them — when
housekeeping (recover + promote) is due, which claims to try, which leases in hand to extend,
which attempt ran past its time limit, how an outcome is settled, how long to park, and how to
back off on an error. Times given to the core are the shell's monotonic seconds; nothing here
reads a clock, a socket or a thread.

The core holds a *set* of leases in hand: the heartbeat extends every one of them, and the time
limit applies to each. A shell takes one job at a time today (``capacity`` 1); one that takes a
batch needs no other logic.
"""

from __future__ import annotations

import enum
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from echomq.calls import Job
from echomq.errors import EchoMQError, FatalServerError, StaleLease

Clock = Callable[[], int]

HOUSEKEEPING_MS = 1_000
PARK_FLOOR_MS = 10
BACKOFF_FIRST_S = 0.1
SETTLE_PAUSE_CAP_S = 1.0
# How far below a client's socket timeout a park stays, so BLPOP always answers before it trips.
PARK_TIMEOUT_MARGIN_S = 1.0
ERROR_TEXT_CAP = 4_096
MESSAGE_CAP = 1_024
TRACE_FRAMES = 8

# Server error codes that heal by themselves: a failover (READONLY, MASTERDOWN), a resharding or a
# cluster still forming (TRYAGAIN, CLUSTERDOWN), a restart loading its data (LOADING), a script
# cache flushed between load and call (NOSCRIPT), a long script (BUSY).
TRANSIENT_CODES = frozenset({"TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "LOADING",
                             "NOSCRIPT", "BUSY"})
TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    redis.exceptions.ReadOnlyError, redis.exceptions.NoScriptError,
    redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError,
)
# A refused login or permission never heals by waiting (redis-py files them under ConnectionError).
FATAL_CONNECTION_TYPES: tuple[type[BaseException], ...] = (
    redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError,
)
CONNECTION_TYPES: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
    redis.exceptions.ClusterError, ConnectionError, TimeoutError,
)
# Raised by a handler, these ask the process to stop: the attempt is failed, then the loop ends.
STOPPING_TYPES: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt)


class Fault(enum.Enum):
    """What an error from the server (or the way to it) means for the loop."""

    TRANSIENT = "transient"  # back off and try again
    FATAL = "fatal"  # stop the loop with FatalServerError


def classify(exc: BaseException) -> Fault | None:
    """TRANSIENT or FATAL for a server or connection error; None for anything else (a lost lease
    or an error that is not the server's, which the loop does not judge)."""
    if isinstance(exc, FATAL_CONNECTION_TYPES):
        return Fault.FATAL
    if isinstance(exc, TRANSIENT_TYPES + CONNECTION_TYPES):
        return Fault.TRANSIENT
    if isinstance(exc, redis.exceptions.ResponseError):
        code = str(exc).split(" ", 1)[0]
        return Fault.TRANSIENT if code in TRANSIENT_CODES else Fault.FATAL
    if isinstance(exc, StaleLease):
        return None
    if isinstance(exc, EchoMQError | redis.exceptions.RedisError):
        return Fault.FATAL
    return None


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


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def park_window(due: int, now: int, floor_ms: int, cap_ms: int) -> int:
    """How long to park (ms): until ``due``, within [floor_ms, cap_ms]."""
    return max(floor_ms, min(cap_ms, due - now + 1))


def park_cap_for(socket_timeout_s: float | None, cap_ms: int) -> int:
    """``cap_ms``, lowered so a BLPOP answers before a socket timeout of ``socket_timeout_s``
    trips (its timeout less a margin of up to 1 s, at least half of it)."""
    if socket_timeout_s is None or socket_timeout_s <= 0:
        return cap_ms
    margin = min(PARK_TIMEOUT_MARGIN_S, socket_timeout_s / 2)
    return max(1, min(cap_ms, int((socket_timeout_s - margin) * 1000)))


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
    capacity: int = 1

    def __post_init__(self) -> None:
        positive = (self.lease_ms, self.park_cap_ms, self.housekeeping_ms, self.capacity)
        if min(positive) < 1 or self.retry_delay_ms < 0 or self.park_floor_ms < 0:
            raise ValueError("lease_ms, park_cap_ms, housekeeping_ms must be positive, "
                             "retry_delay_ms and park_floor_ms non-negative")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be positive (or None: the queue's)")
        if self.time_limit_ms is not None and self.time_limit_ms < 1:
            raise ValueError("time_limit_ms must be positive (or None: no limit)")

    @property
    def extend_every_s(self) -> float:
        return max(self.lease_ms / 3, 1) / 1000


@dataclass(frozen=True)
class Ack:
    """Settle by ack (a tombstone kept ``retention_ms``; None: the queue's)."""

    retention_ms: int | None


@dataclass(frozen=True)
class Retry:
    """Settle by retry after ``delay_ms`` (dead after ``max_attempts``; None: the queue's)."""

    delay_ms: int
    error: str
    max_attempts: int | None


Settlement = Ack | Retry


@dataclass
class Lease:
    """A job in hand: since when (monotonic s), and when its next extend is due."""

    job: Job
    started: float
    extend_at: float


@dataclass
class Backoff:
    """The pause after consecutive transient errors: 0.1 s, doubling, up to ``cap_s``."""

    cap_s: float
    pause_s: float = 0.0

    def failed(self) -> float:
        self.pause_s = min(max(self.pause_s * 2, BACKOFF_FIRST_S), self.cap_s)
        return self.pause_s

    def succeeded(self) -> None:
        self.pause_s = 0.0


@dataclass
class LoopCore:
    """The state of one consumer loop: leases in hand and when housekeeping is next due."""

    settings: Settings
    leases: dict[Job, Lease] = field(default_factory=dict)
    running: set[Job] = field(default_factory=set)
    housekeeping_at: float = 0.0  # due at once
    backoff: Backoff = field(init=False)

    def __post_init__(self) -> None:
        self.backoff = Backoff(max(self.settings.park_cap_ms / 1000, BACKOFF_FIRST_S))

    # housekeeping ---------------------------------------------------------------------------

    def take_housekeeping(self, now: float, *, force: bool = False) -> bool:
        """Whether recover + promote are due at ``now`` (or ``force``d); if so they count as
        run from now, so two callers never both run one round."""
        if not force and now < self.housekeeping_at:
            return False
        self.housekeeping_at = now + self.settings.housekeeping_ms / 1000
        return True

    # claims ---------------------------------------------------------------------------------

    def claim_kinds(self) -> tuple[str, ...]:
        """What to try to claim, in order: the lanes in turn, then flat jobs (so a queue that
        mixes both is drained whole)."""
        return ("lane", "flat") if self.settings.lanes else ("flat",)

    def room(self) -> int:
        """How many more jobs the shell may take into hand."""
        return max(0, self.settings.capacity - len(self.leases))

    def took(self, job: Job, now: float) -> None:
        """``job`` was claimed at ``now`` and its handler starts: its lease is in hand."""
        self.leases[job] = Lease(job, now, now + self.settings.extend_every_s)
        self.running.add(job)

    def finished(self, job: Job) -> bool:
        """``job``'s handler returned: let go of its lease; True if it was still in hand, so the
        caller settles the outcome (False: its time limit or a lost lease settled it)."""
        self.running.discard(job)
        return self.release(job)

    @property
    def busy(self) -> bool:
        """A handler is running (its lease in hand, or given up at its time limit while the
        handler goes on): the keeper stays awake for housekeeping."""
        return bool(self.running)

    def release(self, job: Job) -> bool:
        """Let go of ``job``'s lease; False if it was no longer in hand (lost, or settled by its
        time limit): then nobody else settles it."""
        return self.leases.pop(job, None) is not None

    def holds(self, job: Job) -> bool:
        return job in self.leases

    # while jobs run -------------------------------------------------------------------------

    def extends_due(self, now: float) -> list[Job]:
        """Leases in hand whose heartbeat is due (none without a heartbeat)."""
        if not self.settings.heartbeat:
            return []
        return [lease.job for lease in self.leases.values() if now >= lease.extend_at]

    def extended(self, job: Job, now: float, *, ok: bool) -> None:
        """An extend of ``job`` returned (``ok``) or failed; schedule the next one — sooner
        after a failure, so a passing error does not cost the lease."""
        lease = self.leases.get(job)
        if lease is not None:
            every = self.settings.extend_every_s
            lease.extend_at = now + (every if ok else max(every / 4, 0.01))

    def overruns(self, now: float) -> list[Job]:
        """Leases in hand whose attempt has run past the time limit."""
        limit = self.settings.time_limit_ms
        if limit is None:
            return []
        return [lease.job for lease in self.leases.values()
                if now - lease.started >= limit / 1000]

    def take_overruns(self, now: float) -> list[Job]:
        """Release and return the leases that ran past the time limit: the caller settles them
        (and nobody else will)."""
        over = self.overruns(now)
        for job in over:
            self.release(job)
        return over

    def next_tick(self, now: float) -> float:
        """Seconds until the keeper (heartbeat, housekeeping, time limit) has work to do."""
        due = [self.housekeeping_at]
        if self.settings.heartbeat:
            due.extend(lease.extend_at for lease in self.leases.values())
        if self.settings.time_limit_ms is not None:
            due.extend(lease.started + self.settings.time_limit_ms / 1000
                       for lease in self.leases.values())
        return max(0.0, min(due) - now)

    # settling -------------------------------------------------------------------------------

    def settlement(self, failure: BaseException | None) -> Settlement:
        """How to settle an attempt that returned (``failure`` None) or raised ``failure``."""
        if failure is None:
            return Ack(self.settings.retention_ms)
        return Retry(self.settings.retry_delay_ms, error_text(failure), self.settings.max_attempts)

    def overrun_settlement(self) -> Retry:
        """How to settle an attempt that ran past its time limit."""
        error = f"TimeLimitExceeded: time limit of {self.settings.time_limit_ms} ms exceeded"
        return Retry(self.settings.retry_delay_ms, error, self.settings.max_attempts)

    def settle_pause(self, failures: int, elapsed_s: float) -> float | None:
        """After ``failures`` transient errors sending a settlement (``elapsed_s`` since the
        first try): how long to wait before sending it again; None to give up, once a lease's
        length has passed (recover then runs the job again)."""
        if elapsed_s >= self.settings.lease_ms / 1000:
            return None
        return float(min(BACKOFF_FIRST_S * 2.0 ** max(failures - 1, 0), SETTLE_PAUSE_CAP_S))

    @staticmethod
    def stops_loop(failure: BaseException | None) -> bool:
        """A handler that raised SystemExit or KeyboardInterrupt asks the loop to stop (after its
        attempt is settled as failed)."""
        return isinstance(failure, STOPPING_TYPES)

    # parking --------------------------------------------------------------------------------

    def park_cap_ms(self, socket_timeout_s: float | None) -> int:
        """The longest park: ``park_cap_ms``, no longer than the housekeeping interval (a parked
        consumer is the one left to recover a dead worker's lease), and below the socket
        timeout of the parking connection."""
        cap = min(self.settings.park_cap_ms, self.settings.housekeeping_ms)
        return park_cap_for(socket_timeout_s, cap)

    def park_ms(self, due: int | None, now: int | None, socket_timeout_s: float | None) -> int:
        """How long to park: until ``due`` (a retry or lease deadline, server ms) from ``now``,
        within [park_floor_ms, the park cap]."""
        cap = self.park_cap_ms(socket_timeout_s)
        if due is None or now is None:
            return cap
        return park_window(due, now, min(self.settings.park_floor_ms, cap), cap)
