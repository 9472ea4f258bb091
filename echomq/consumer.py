"""``Consumer``: the supervised loop of one worker — recover → promote → drain → park.

Each beat returns expired leases and due retries, then claims and runs jobs until none is left
(or a stop is asked for), then parks on the queue's wake key with ``BLPOP`` — never polls. The park
lasts until a wake token arrives (an enqueue, a recover or a promote leaves one per job) or until
the next lease deadline or retry falls due, capped by ``park_cap_ms``.

A handler that raises makes the job retry after ``retry_delay_ms`` (dead after ``max_attempts``,
its last error kept); the loop itself carries on. A handler that runs long keeps its lease: a
heartbeat thread extends it every ``lease_ms / 3`` until the handler returns.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import redis

from echomq.errors import StaleLease, Wire6Unsupported
from echomq.queue import DEFAULT_LEASE_MS, Job, Queue, Verdict
from echomq.transitions import LANE_CLAIM

log = logging.getLogger("echomq")

Handler = Callable[[Job], object]
Clock = Callable[[], int]

WAKE_CAP = 64
PARK_FLOOR_MS = 10
UNBLOCK_PATIENCE_S = 0.5
CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)


def refuse_unsupported(wire: int, lanes: bool) -> None:
    """Raise Wire6Unsupported("gclaim2") when a lane consumer is asked of a ``wire=6`` queue:
    the lane claim has no native twin, so such a loop would have no way to drain."""
    if lanes and wire == 6 and LANE_CLAIM.native is None:
        raise Wire6Unsupported(LANE_CLAIM.public_name)


def error_text(exc: BaseException) -> str:
    """What a failed attempt records in the job row: the exception's type and message."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def push_wake_token(queue: Queue) -> None:
    """Leave one wake token, keeping the wake list within its cap (one atomic MULTI)."""
    with queue.conn.pipeline(transaction=True) as pipe:
        pipe.rpush(queue.key("wake"), 1)
        pipe.ltrim(queue.key("wake"), 0, WAKE_CAP - 1)
        pipe.execute()


def server_ms(conn: Any) -> int:
    """The server's clock in ms (``TIME``), the clock ``now=None`` transitions run on."""
    reply = conn.time()
    if isinstance(reply, dict):  # a cluster client answers per node
        reply = next(iter(reply.values()))
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def park_window(due: int, now: int, floor_ms: int, cap_ms: int) -> int:
    """How long to park (ms): until ``due``, within [floor_ms, cap_ms]."""
    return max(floor_ms, min(cap_ms, due - now + 1))


def log_failure(job: Job, verdict: Verdict, exc: Exception, retry_delay_ms: int) -> None:
    """Say what became of a failed attempt: dead, or retrying after ``retry_delay_ms``."""
    if verdict is Verdict.DEAD:
        log.error("job %s dead after attempt %d: %s", job.id, job.attempt, error_text(exc),
                  exc_info=exc)
    else:
        log.warning("job %s failed (attempt %d) and will retry in %d ms: %s", job.id,
                    job.attempt, retry_delay_ms, error_text(exc))


class Heartbeat:
    """One thread that extends the lease of the job in hand every ``interval_s`` until it is
    released. An extend never overlaps the release: the ack or retry that follows sees it done."""

    def __init__(self, queue: Queue, lease_ms: int, clock: Clock | None) -> None:
        self._queue = queue
        self._lease_ms = lease_ms
        self._clock = clock
        self.interval_s = max(lease_ms / 3, 1) / 1000
        self._cond = threading.Condition()
        self._job: Job | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    @contextmanager
    def holding(self, job: Job) -> Iterator[None]:
        """Keep ``job``'s lease alive while the body runs."""
        self._ensure_thread()
        with self._cond:
            self._job = job
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._job = None
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._closed = False
            self._thread = threading.Thread(target=self._run, name="echomq-heartbeat",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                job = self._job
                if job is None:
                    self._cond.wait()
                elif self._wait_interval(job):
                    self._extend(job)

    def _wait_interval(self, job: Job) -> bool:
        """Wait one interval while ``job`` stays in hand; True if it still is after it."""
        deadline = time.monotonic() + self.interval_s
        while self._job is job and not self._closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            self._cond.wait(remaining)
        return False

    def _extend(self, job: Job) -> None:
        now = self._clock() if self._clock is not None else None
        try:
            self._queue.extend(job, lease_ms=self._lease_ms, now=now)
        except StaleLease:
            log.warning("stale lease: %s attempt %d was lost before its heartbeat", job.id,
                        job.attempt)
            self._job = None
        except Exception:
            log.exception("heartbeat of %s attempt %d failed", job.id, job.attempt)


class Parker:
    """Parks on the wake key through a connection of its own, so that ``interrupt`` can
    ``CLIENT UNBLOCK`` exactly this consumer (a wake token could wake another one instead).

    No lock: ``park`` marks itself parked before it reads the stop flag and ``stop`` sets the
    flag before it reads the mark, so one of the two always sees the other (and a stop from a
    signal handler cannot deadlock on a lock its own thread holds)."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        self._parked_in: int | None = None  # the parking thread, while it parks
        self._own: Queue | None = None
        self._client_id: int | None = None

    def park(self, timeout_s: float, stopping: threading.Event) -> bool:
        own = self._bind()
        self._parked_in = threading.get_ident()
        try:
            if stopping.is_set():
                return False
            woken = own.park(timeout_s)
        except CONNECTION_ERRORS:
            self.close()
            raise
        finally:
            self._parked_in = None
        if woken and stopping.is_set():
            push_wake_token(self._queue)  # a stopping consumer hands its token on
        return woken

    def interrupt(self) -> None:
        """Make a park in progress return now (called after the stop flag is set)."""
        deadline = time.monotonic() + UNBLOCK_PATIENCE_S
        while (parker := self._parked_in) is not None:
            unblocked = self._unblock()
            if unblocked:
                return
            if unblocked is None or parker == threading.get_ident() \
                    or time.monotonic() > deadline:
                # No CLIENT UNBLOCK here (a cluster client, or denied), or we are the parked
                # thread itself, in a signal handler: a wake token is the way left.
                push_wake_token(self._queue)
                return
            time.sleep(0.002)  # the BLPOP is on its way to the server

    def close(self) -> None:
        own, self._own, self._client_id = self._own, None, None
        if own is not None and own is not self._queue:
            with suppress(Exception):
                own.conn.close()

    def _unblock(self) -> bool | None:
        """CLIENT UNBLOCK the parking connection: whether it was blocked; None if impossible."""
        client_id = self._client_id
        if client_id is None:
            return None
        try:
            return bool(self._queue.conn.client_unblock(client_id))
        except redis.ResponseError:
            return None
        except redis.RedisError:
            return False

    def _bind(self) -> Queue:
        if self._own is not None:
            return self._own
        conn = self._queue.conn
        if isinstance(conn, redis.Redis):
            private = redis.Redis(connection_pool=conn.connection_pool,
                                  single_connection_client=True)
            self._client_id = int(private.client_id())
            self._own = copy.copy(self._queue)  # the same queue, parked through ``private``
            self._own.conn = private
        else:  # a cluster client: stop() falls back to a wake token
            self._own = self._queue
        return self._own


class Consumer:
    """The supervised loop of one worker on ``queue``, running ``handler(job)`` per job.

    ``lanes``: claim through the lanes in turn, then flat jobs (scripts only: a ``wire=6``
    queue raises Wire6Unsupported("gclaim2") here). ``heartbeat``: extend a running job's lease
    every ``lease_ms / 3``. ``on_ack``: called with each job whose ack returned ACKED.
    ``clock``: the ms clock for every transition (None: the server's).
    """

    def __init__(self, queue: Queue, handler: Handler, *, lanes: bool = False,
                 lease_ms: int = DEFAULT_LEASE_MS, retry_delay_ms: int = 1_000,
                 max_attempts: int = 5, park_cap_ms: int = 5_000, heartbeat: bool = True,
                 retention_ms: int | None = None, on_ack: Callable[[Job], object] | None = None,
                 clock: Clock | None = None, park_floor_ms: int = PARK_FLOOR_MS) -> None:
        refuse_unsupported(queue.wire, lanes)
        if lease_ms < 1 or park_cap_ms < 1 or max_attempts < 1 or retry_delay_ms < 0:
            raise ValueError("lease_ms, park_cap_ms and max_attempts must be positive, "
                             "retry_delay_ms non-negative")
        self.queue = queue
        self.handler = handler
        self.lanes = lanes
        self.lease_ms = lease_ms
        self.retry_delay_ms = retry_delay_ms
        self.max_attempts = max_attempts
        self.park_cap_ms = park_cap_ms
        self.park_floor_ms = min(park_floor_ms, park_cap_ms)
        self.retention_ms = retention_ms
        self.on_ack = on_ack
        self.clock = clock
        self._stopping = threading.Event()
        self._heartbeat = Heartbeat(queue, lease_ms, clock) if heartbeat else None
        self._parker = Parker(queue)

    # control ------------------------------------------------------------------------------

    def run(self) -> None:
        """Beat until ``stop()``; a lost connection is retried with a growing pause."""
        log.info("consumer started: queue %s, wire %d, %s, lease %d ms", self.queue.name,
                 self.queue.wire, "lanes" if self.lanes else "flat", self.lease_ms)
        pause = 0.0
        try:
            while not self._stopping.is_set():
                pause = self._guarded_beat(pause)
        finally:
            self.close()
            log.info("consumer stopped: queue %s", self.queue.name)

    def stop(self) -> None:
        """Stop claiming; a parked consumer returns at once, a running job finishes first.
        Safe from any thread."""
        self._stopping.set()
        self._parker.interrupt()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def close(self) -> None:
        """Release the heartbeat thread and the parking connection."""
        if self._heartbeat is not None:
            self._heartbeat.close()
        self._parker.close()

    # the beat -----------------------------------------------------------------------------

    def beat(self, *, park: bool = True) -> int:
        """One round: recover, promote, drain, then park (unless ``park`` is False or a stop
        was asked for). Returns how many jobs were run."""
        self.queue.recover(now=self._now())
        self.queue.promote(now=self._now())
        handled = self.drain()
        if park and not self._stopping.is_set():
            self.park()
        return handled

    def drain(self) -> int:
        """Claim and run jobs until none is left or a stop is asked for; how many ran."""
        handled = 0
        while not self._stopping.is_set():
            job = self._claim()
            if job is None:
                break
            self.process(job)
            handled += 1
        return handled

    def park(self) -> bool:
        """Block on the wake key until a token, the next due time, or the cap; True if woken."""
        return self._parker.park(self.park_timeout_ms() / 1000, self._stopping)

    def park_timeout_ms(self) -> int:
        """How long to park: until the next retry or lease deadline falls due, within
        [park_floor_ms, park_cap_ms]."""
        due = self.queue.next_due()
        if due is None:
            return self.park_cap_ms
        now = self.clock() if self.clock is not None else server_ms(self.queue.conn)
        return park_window(due, now, self.park_floor_ms, self.park_cap_ms)

    # one job ------------------------------------------------------------------------------

    def process(self, job: Job) -> None:
        """Run the handler on ``job`` under its lease, then ack it, or retry it on failure."""
        failure = self._run_handler(job)
        if failure is None:
            self._ack(job)
        else:
            self._fail(job, failure)

    def _run_handler(self, job: Job) -> Exception | None:
        keeper = self._heartbeat.holding(job) if self._heartbeat is not None else _nothing()
        with keeper:
            try:
                self.handler(job)
            except Exception as exc:
                return exc
        return None

    def _ack(self, job: Job) -> None:
        try:
            verdict = self.queue.ack(job, retention_ms=self.retention_ms)
        except StaleLease:
            log.warning("stale lease: %s attempt %d finished after its lease was lost; "
                        "the ack was refused", job.id, job.attempt)
            return
        if verdict is Verdict.ACKED and self.on_ack is not None:
            try:
                self.on_ack(job)
            except Exception:
                log.exception("on_ack hook failed for %s attempt %d", job.id, job.attempt)

    def _fail(self, job: Job, exc: Exception) -> None:
        text = error_text(exc)
        try:
            verdict = self.queue.retry(job, delay_ms=self.retry_delay_ms, error=text,
                                       max_attempts=self.max_attempts, now=self._now())
        except StaleLease:
            log.warning("stale lease: %s attempt %d failed after its lease was lost (%s)",
                        job.id, job.attempt, text)
            return
        log_failure(job, verdict, exc, self.retry_delay_ms)

    # helpers ------------------------------------------------------------------------------

    def _claim(self) -> Job | None:
        """The next job: a lane consumer serves the lanes in turn, then any flat job, so a
        queue that mixes both is drained whole."""
        if self.lanes:
            job = self.queue.claim_lane(self.lease_ms, now=self._now())
            if job is not None:
                return job
        return self.queue.claim(self.lease_ms, now=self._now())

    def _now(self) -> int | None:
        return self.clock() if self.clock is not None else None

    def _guarded_beat(self, pause: float) -> float:
        """A beat; on a lost connection, wait (stop-aware) and return the next pause."""
        try:
            self.beat()
        except CONNECTION_ERRORS as exc:
            pause = min(max(pause * 2, 0.1), self.park_cap_ms / 1000)
            log.warning("connection to the server failed (%s); retrying in %.1f s", exc, pause)
            self._stopping.wait(pause)
            return pause
        return 0.0


@contextmanager
def _nothing() -> Iterator[None]:
    yield
