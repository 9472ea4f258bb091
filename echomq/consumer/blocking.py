"""``Consumer``: the supervised loop of one worker — housekeeping, claim, run, settle, park.

The loop's decisions live in ``echomq.consumer.loop`` (no I/O: a ``LoopCore`` per queue, and a
``Lineup``
ordering several queues by priority); this module is its blocking shell, and
``echomq.aio.Consumer`` its asyncio one. A consumer of several queues parks on all their wake
keys at once and runs each one's housekeeping. Each beat runs recover + promote (when due),
then claims and runs jobs until none is left (or a stop is asked for), then parks on the queue's
wake key with ``BLPOP`` — never polls — until the earliest thing read due, at most the park cap
(``echomq.queue.parking``). Jobs are claimed in batches of up to ``prefetch`` and run one at a time;
their outcomes go out with the next claim, in one ``settle`` call per batch. Recover + promote
also run every ``housekeeping_ms`` while the queue stays busy, between jobs and, from the keeper
thread, while a handler runs, each round taken only with the queue's housekeeping token (one
consumer an interval runs it): an expired lease or a due retry is back in play within
``housekeeping_ms`` of falling due, whatever the queue's depth.

The keeper thread also extends every lease in hand every ``lease_ms / 3`` (the heartbeat, one
``extend_many``), sends outcomes that waited ``settle_delay_ms`` and fails an attempt that runs
past ``time_limit_ms``. A handler that raises makes the job retry after ``retry_delay_ms`` (dead
after max_attempts, its error and last frames kept); the loop carries on. Transient server errors
are retried with back-off; errors that cannot heal raise ``FatalServerError`` out of ``run()``.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any

import redis

from echomq.consumer.loop import (
    HOUSEKEEPING_MS,
    PARK_CAP_MS,
    PARK_FLOOR_MS,
    PAUSE_CHECK_MS,
    PREFETCH,
    SETTLE_DELAY_MS,
    Clock,
    Lineup,
    Round,
    Settings,
    describe,
    error_text,
    park_socket_timeout,
    park_window,
)
from echomq.consumer.presence import Announcer, announced
from echomq.consumer.shell import (
    LoopShell,
    consumer_name,
    log_guarded,
    log_overrun,
    park_keys,
    queue_list,
    refuse_unsupported,
    report_settled,
    warn_lost,
    warn_not_handed_back,
)
from echomq.engine.calls import text
from echomq.engine.clients import private_twin, twins
from echomq.engine.server_time import server_ms
from echomq.queue.blocking import DEFAULT_LEASE_MS, Job, Queue, recover_due
from echomq.queue.connection import socket_timeout_of
from echomq.queue.parking import (
    TOKEN_ROLE,
    WATCH_ROLE,
    WATCH_TOKENS,
    is_watch,
    queue_reads,
    queue_watch,
    sighting_of,
    split_beat,
    take_token,
    token_taken,
)

__all__ = ["Consumer", "error_text", "park_window", "refuse_unsupported", "server_ms"]

log = logging.getLogger("echomq")

Handler = Callable[[Job], object]

WAKE_CAP = 64
UNBLOCK_PATIENCE_S = 0.5
CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)


def push_wake_token(queue: Queue, key: str | None = None) -> None:
    """Leave one wake token on ``key`` (None: the queue's wake key), keeping the wake list
    within its cap (one atomic MULTI)."""
    wake = queue.key("wake") if key is None else key
    with queue.conn.pipeline(transaction=True) as pipe:
        pipe.rpush(wake, 1)
        pipe.ltrim(wake, 0, WAKE_CAP - 1)
        pipe.execute()


def push_watch_token(queue: Queue, key: str | None = None, tokens: int = WATCH_TOKENS) -> None:
    """Leave ``tokens`` on ``key`` (None: the queue's watch key): as many parked consumers of
    the queue read its heads again (see ``echomq.queue.parking``)."""
    with queue.conn.pipeline(transaction=False) as pipe:
        queue_watch(pipe, queue.key(WATCH_ROLE) if key is None else key, tokens)
        pipe.execute()


class AwaitableRunner:
    """Runs what a handler returns when it is awaitable (an ``async def`` handler) to the end,
    on an event loop of this consumer's own; ``cancel`` ends it from another thread."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: tuple[Job, asyncio.Future[object]] | None = None

    def call(self, handler: Handler, job: Job) -> object:
        """What ``handler(job)`` returned (awaited to the end when awaitable)."""
        result = handler(job)
        if result is None or not inspect.isawaitable(result):
            return result
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        task = asyncio.ensure_future(_awaited(result), loop=self._loop)
        self._running = (job, task)
        try:
            return self._loop.run_until_complete(task)
        finally:
            self._running = None

    def cancel(self, job: Job) -> None:
        """Cancel ``job``'s awaitable if it is the one running (not a later job's)."""
        running, loop = self._running, self._loop
        if running is not None and running[0] == job and loop is not None:
            with suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(running[1].cancel)

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.close()


async def _awaited(result: Awaitable[object]) -> object:
    return await result


class Keeper:
    """One thread that, while anything is in hand, extends the leases in hand when due, sends
    outcomes that waited ``settle_delay_ms``, runs housekeeping when due, and fails any attempt
    past its time limit (then goes on with housekeeping while that handler still runs). It
    idles while nothing is in hand."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        # The lock of the condition, held directly where every job passes (cheaper than the
        # condition's own enter and exit, which wrap it).
        self.mutex = threading.RLock()
        self._cond = threading.Condition(self.mutex)
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def lock(self) -> threading.Condition:
        return self._cond

    def wake(self) -> None:
        """Something in hand changed: look again (called with ``lock`` held)."""
        if self._thread is None:
            self._closed = False
            self._thread = threading.Thread(target=self._run, name="echomq-keeper", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        lineup = self._consumer.lineup
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                wait = lineup.next_tick(now) if lineup.in_hand else None
                if wait is None or wait > 0:
                    self._cond.wait(wait)
                    continue
                work = [(index, core.heartbeat(now), core.take_overruns(now),
                         core.take_round() if core.outbox_due(now) else None,
                         core.take_housekeeping(now))
                        for index, core in enumerate(lineup.cores)]
                self._cond.release()
                try:
                    for index, extends, overruns, due, housekeep in work:
                        self._consumer.keep(index, extends, overruns, due, housekeep)
                finally:
                    self._cond.acquire()


class Parker:
    """Parks on the wake key through a connection of its own, so that ``interrupt`` can
    ``CLIENT UNBLOCK`` exactly this consumer (a wake token could wake another one instead).

    No lock: ``park`` marks itself parked before it reads the stop flag and ``stop`` sets the
    flag before it reads the mark, so one of the two always sees the other (and a stop from a
    signal handler cannot deadlock on a lock its own thread holds)."""

    def __init__(self, queues: Sequence[Queue], cap_ms: int) -> None:
        self._queue = queues[0]
        self._queues = list(queues)
        self._keys = park_keys(queues)
        self._cap_ms = cap_ms
        self._parked_in: int | None = None  # the parking thread, while it parks
        self._own: Queue | None = None
        self._client_id: int | None = None
        self.socket_timeout_s: float | None = None

    def bind(self) -> Queue:
        """The queue as seen through the parking connection (made on first use)."""
        if self._own is not None:
            return self._own
        conn = self._queue.conn
        self.socket_timeout_s = socket_timeout_of(conn)
        # A pool of its own, whose read timeout outlasts the longest park.
        private = private_twin(conn, park_socket_timeout(self.socket_timeout_s, self._cap_ms))
        if private is not None:
            self.socket_timeout_s = private.connection_pool.connection_kwargs["socket_timeout"]
            self._client_id = int(private.client_id())
            self._own = copy.copy(self._queue)  # the same queue, parked through ``private``
            self._own.conn = private
        else:  # a cluster client: stop() falls back to a wake token
            self._own = self._queue
        return self._own

    def read(self, *, ready: bool, lanes: bool,
             announcer: Announcer | None = None) -> list[Any]:
        """A Sighting of each queue, read through the parking connection in one flush (it was
        used last by a BLPOP, so no health check goes before it); ``announcer``: the read goes
        before a park, and the record rides in the flush when due."""
        own = self.bind()
        with own.conn.pipeline(transaction=False) as pipe:
            for queue in self._queues:
                queue_reads(pipe, queue.key, ready=ready, lanes=lanes)
            beat = 0 if announcer is None else announcer.queue_parked(pipe, self._cap_ms)
            replies, written = split_beat(pipe.execute(raise_on_error=not beat), beat)
        if announcer is not None and beat and announcer.parked_written(written):
            announcer.relist()
        per_queue = len(replies) // len(self._queues)
        return [sighting_of(replies[n * per_queue:(n + 1) * per_queue])
                for n in range(len(self._queues))]

    def server_ms(self) -> int:
        return server_ms(self.bind().conn)

    def park(self, timeout_s: float, stopping: threading.Event) -> str | None:
        """Block until a token on any of the wake or watch keys, ``timeout_s``, or
        ``interrupt``: "wake", "watch" (which token), or None."""
        own = self.bind()
        self._parked_in = threading.get_ident()
        try:
            if stopping.is_set():
                return None
            popped = own.conn.blpop(self._keys, timeout=timeout_s)
        except twins(*CONNECTION_ERRORS):
            self.close()
            raise
        finally:
            self._parked_in = None
        if popped is None:
            return None
        watch = is_watch(popped[0])
        if stopping.is_set():
            # A stopping consumer hands its token on, to the key it came from.
            if watch:
                push_watch_token(self._queue, text(popped[0]), tokens=1)
            else:
                push_wake_token(self._queue, text(popped[0]))
        return "watch" if watch else "wake"

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
                own.conn.connection_pool.disconnect()

    def _unblock(self) -> bool | None:
        """CLIENT UNBLOCK the parking connection: whether it was blocked; None if impossible."""
        client_id = self._client_id
        if client_id is None:
            return None
        try:
            return bool(self._queue.conn.client_unblock(client_id))
        except twins(redis.ResponseError):
            return None
        except twins(redis.RedisError):
            return False


class Consumer(LoopShell):
    """The supervised loop of one worker on ``queue`` — or on a list of queues in strict
    priority order — running ``handler(job)`` per job.

    Several queues: a job of an earlier queue always runs before a later one's when both are
    ready (``echomq.consumer.loop.Lineup`` states the rule for batches), the consumer parks on every
    queue's wake key at once, runs housekeeping for each, and (``lanes``) claims each one's
    lanes before its flat jobs. The handler may return a directive (``echomq.Done``,
    ``RetryIn``, ``Reject``) to say how its job is settled.

    ``prefetch``: the most jobs in hand at once (at most ``MAX_PREFETCH``, 1,000) — claimed in
    one batch, run one at a time in claim order, their outcomes sent with the next claim in one
    ``settle`` call. An outcome waits at most ``settle_delay_ms`` for that call (the keeper
    sends it otherwise). 1 claims, runs and settles one job at a time. A prefetched job whose
    lease is within a third of its end by this consumer's clock is released, never started;
    so are the prefetched jobs of a queue found paused, which the consumer asks before it
    starts one once its last word on it is ``pause_check_ms`` old (0: before every start).

    ``lanes``: claim through the lanes in turn, then flat jobs, one job at a time (scripts
    only: a ``wire=6`` queue raises Wire6Unsupported("lane_claim") here); outcomes still go out in
    batches. ``heartbeat``: extend a running job's lease
    every ``lease_ms / 3``. ``max_attempts``: None means the queue's own. ``housekeeping_ms``:
    the most time between two rounds of recover + promote while the loop runs (one consumer of the
    queue runs each round). ``park_cap_ms``: the longest park when nothing can fall due sooner
    (75 s). ``time_limit_ms``: fail an attempt that runs longer (retried or dead) and call
    ``on_overrun(job)`` (on the keeper thread: to end the process, use a signal or ``os._exit``);
    an ``async def`` handler is cancelled, a plain one cannot be and keeps running —
    ``on_overrun`` is where a worker process exits so it is replaced. ``on_ack``:
    called with each job whose ack returned ACKED (on the loop's thread, or on the keeper's when
    it sends outcomes a running handler would otherwise hold back). ``clock``: the ms clock for
    every transition (None: the server's). ``announce``: keep a record in the registry of live
    workers while ``run()`` runs (``echomq workers``: the queues, the jobs in hand; the
    default), rewritten every 2 s by a thread while the consumer is busy and by its parks while
    it parks (every other park, in the flush of the park's read: an idle consumer stays within
    0.1 commands/s); False for none (an ``echomq worker`` process keeps its own).

    A handler may be ``async def`` (or return an awaitable): it runs to the end on this
    consumer's own event loop. A handler that raises SystemExit or KeyboardInterrupt fails its
    attempt like any other exception, then the loop stops as ``stop()`` would (``run()``
    returns); any other BaseException only fails the attempt.

    A stop hands the prefetched jobs not started back at once (pending again, their attempt
    uncounted) and sends every outcome waiting before ``run()`` returns. A job claimed before
    (``job.attempt > 1``) runs alone: the jobs prefetched behind it are handed back the same way
    and the outcomes waiting sent before its handler starts, so a job that kills its worker
    costs the others one attempt at most. ``max_attempts=1`` claims one job at a time.
    """

    def __init__(self, queue: Queue | Sequence[Queue], handler: Handler, *,
                 lanes: bool = False,
                 lease_ms: int = DEFAULT_LEASE_MS, retry_delay_ms: int = 1_000,
                 max_attempts: int | None = None, park_cap_ms: int = PARK_CAP_MS,
                 heartbeat: bool = True, retention_ms: int | None = None,
                 on_ack: Callable[[Job], object] | None = None, clock: Clock | None = None,
                 park_floor_ms: int = PARK_FLOOR_MS, housekeeping_ms: int = HOUSEKEEPING_MS,
                 time_limit_ms: int | None = None,
                 on_overrun: Callable[[Job], object] | None = None, prefetch: int = PREFETCH,
                 settle_delay_ms: int = SETTLE_DELAY_MS,
                 pause_check_ms: int = PAUSE_CHECK_MS, announce: bool = True) -> None:
        self.queues: list[Queue] = queue_list(queue)
        refuse_unsupported(self.queues[0].wire, lanes)
        self.lineup = Lineup.of(Settings(
            lease_ms=lease_ms, retry_delay_ms=retry_delay_ms, max_attempts=max_attempts,
            park_cap_ms=park_cap_ms, park_floor_ms=park_floor_ms,
            housekeeping_ms=housekeeping_ms, time_limit_ms=time_limit_ms,
            retention_ms=retention_ms, heartbeat=heartbeat, lanes=lanes, capacity=prefetch,
            settle_delay_ms=settle_delay_ms, pause_check_ms=pause_check_ms), len(self.queues))
        self.queue = self.queues[0]
        self.handler = handler
        self.on_ack = on_ack
        self.on_overrun = on_overrun
        self.clock = clock
        self.announce = announce
        self._stopping = threading.Event()
        self._keeper = Keeper(self)
        self._parker = Parker(self.queues, park_cap_ms)
        self._runner = AwaitableRunner()
        self._name = consumer_name()

    @property
    def park_cap_ms(self) -> int:
        return self.settings.park_cap_ms

    # control ------------------------------------------------------------------------------

    def run(self) -> None:
        """Beat until ``stop()``, listed in the registry of live workers meanwhile (unless
        ``announce`` is False). Transient server errors are retried with a growing pause; one
        that cannot heal raises FatalServerError."""
        with announced(self, self.announce):
            self._run()

    def _run(self) -> None:
        log.info("consumer started: queue %s, wire %d, %s, lease %d ms", self.names,
                 self.queue.wire, "lanes" if self.lanes else "flat", self.lease_ms)
        try:
            while not self._stopping.is_set():
                self._guarded_beat()
        finally:
            self._hand_back_quietly()
            self._hand_on_watch()
            self.close()
            log.info("consumer stopped: queue %s", self.names)

    def _hand_on_watch(self) -> None:
        """A consumer that stops knowing when something falls due leaves a watch token, so a
        consumer still parked reads the heads again and watches in its place."""
        for index, core in enumerate(self.lineup.cores):
            if core.due_at is not None:
                self._guarded(push_watch_token, self.queues[index])

    def stop(self) -> None:
        """Stop claiming; a parked consumer returns at once, a running job finishes first,
        prefetched jobs not started are handed back. Safe from any thread."""
        self._stopping.set()
        self._parker.interrupt()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def close(self) -> None:
        """Release the keeper thread, the parking connection and the handlers' event loop."""
        self._keeper.close()
        self._parker.close()
        self._runner.close()

    # the beat -----------------------------------------------------------------------------

    def beat(self, *, park: bool = True) -> int:
        """One round: recover, promote, drain, then park (unless ``park`` is False or a stop
        was asked for). Returns how many jobs were run."""
        return self._beat(force=True, park=park)

    def _beat(self, *, force: bool, park: bool = True) -> int:
        """A beat of ``run``: housekeeping only at this consumer's turn and with the queue's
        token (``force``: at once, without the token, as ``beat`` does)."""
        with self._keeper.lock:
            self.lineup.rested()
        self._housekeep(force=force)
        handled = self.drain()
        if park and not self._stopping.is_set():
            self.park()
        return handled

    def drain(self) -> int:
        """Claim and run jobs until none is left or a stop is asked for; how many ran. Every
        outcome is sent before it returns (and, on a stop, the jobs not started are handed
        back). Housekeeping runs in between whenever it is due, so a busy queue never starves
        it."""
        handled = 0
        while not self._stopping.is_set():
            self._housekeep()
            picked = self._next_job()
            if picked is None:
                break
            self.process(*picked)
            handled += 1
        self._wind_down()
        return handled

    def park(self) -> bool:
        """Block on the wake keys until a token or a stop. Before each park the heads are read
        (``echomq.queue.parking``): when what they show has fallen due and it is this consumer's
        turn to housekeep, it returns False (the next beat housekeeps); else it parks until
        then. A watch token or the end of a park reads again and parks on (the read after a
        park's end also counts the jobs waiting: True when there are some). True when woken
        for work."""
        try:
            return self._park()
        finally:
            if self.announcer is not None:
                self.announcer.unparked()

    def _park(self) -> bool:
        ready = False
        while not self._stopping.is_set():
            sightings = self._parker.read(ready=ready, lanes=self.lanes,
                                          announcer=self.announcer)
            if any(sighting.ready for sighting in sightings):
                self._woke(time.monotonic())
                return True
            timeout_ms = self._plan(sightings)
            now = time.monotonic()
            if any(core.housekeeping_wanted(now) for core in self.lineup.cores):
                self._woke(now)
                return False
            popped = self._parker.park(timeout_ms / 1000, self._stopping)
            if popped == "wake":
                self._woke(time.monotonic())
                return True
            ready = popped is None
        return False

    def park_timeout_ms(self) -> int:
        """How long to park: until the earliest lease deadline, retry or rate window falls due
        (no sooner than this consumer's next turn to housekeep), within [park_floor_ms, the
        park cap]; the cap stays below the parking connection's socket timeout."""
        return self._plan(self._parker.read(ready=False, lanes=self.lanes))

    def _plan(self, sightings: Sequence[Any]) -> int:
        """The park for what each queue's read saw (each core learns its due time)."""
        due = min((s.due for s in sightings if s.due is not None), default=None)
        now = None
        if due is not None:
            now = self.clock() if self.clock is not None else self._parker.server_ms()
        mono = time.monotonic()
        timeout_s = self._parker.socket_timeout_s
        with self._keeper.lock:
            for core, sighting in zip(self.lineup.cores, sightings, strict=True):
                core.learned_due(sighting.due, now, mono)
            return min(core.park_ms(sighting.due, now, timeout_s, mono)
                       for core, sighting in zip(self.lineup.cores, sightings, strict=True))

    def _woke(self, now: float) -> None:
        with self._keeper.lock:
            for core in self.lineup.cores:
                core.woke(now)

    # one job ------------------------------------------------------------------------------

    def process(self, index: int, job: Job) -> None:
        """Run the handler on ``job`` of queue ``index`` (started by ``_next_job``, its lease
        in hand), then queue its settlement for the next round."""
        returned, failure = self._run_handler(job)
        core = self.lineup.cores[index]
        with self._keeper.mutex:
            mine = core.finished(job)
            settlement = core.settlement(failure, returned, job.attempt)
            if mine and core.record(job, settlement, time.monotonic()):
                self._keeper.wake()  # the first outcome waiting: a new deadline
        if failure is None and mine:
            return
        if not mine:
            log.warning("job %s attempt %d returned after its lease was given up (time limit "
                        "or lost lease); its outcome is dropped", job.id, job.attempt)
        if core.stops_loop(failure):
            log.warning("handler raised %s on %s: the consumer stops", describe(failure or
                        BaseException()), job.id)
            self.stop()

    def _run_handler(self, job: Job) -> tuple[object, BaseException | None]:
        """What the handler returned, or what it raised."""
        try:
            return self._runner.call(self.handler, job), None
        except BaseException as exc:  # the loop survives every handler outcome
            return None, exc

    # rounds -------------------------------------------------------------------------------

    def _next_job(self) -> tuple[int, Job] | None:
        """The next job to run with its queue's index, its lease in hand: a prefetched one,
        else one of the batch the next round claims (sending the outcomes waiting with it)."""
        self._check_pauses()
        with self._keeper.mutex:
            picked = self.lineup.next_job(time.monotonic())
        if picked is None:
            self._claim_round()
            with self._keeper.mutex:
                picked = self.lineup.next_job(time.monotonic())
        if self.lineup.isolating:
            self._isolate()
        if picked is not None and self.settings.time_limit_ms is not None:
            with self._keeper.lock:
                self._keeper.wake()  # its time limit is a new deadline
        return picked

    def _check_pauses(self) -> None:
        """Ask each queue whose prefetched jobs may start next and whose last word on a pause
        is too old whether it is paused; a paused one's prefetched jobs go back."""
        with self._keeper.mutex:
            due = self.lineup.pause_checks_due(time.monotonic())
        for index in due:
            sent_at = time.monotonic()
            paused = self.queues[index].is_paused()
            with self._keeper.mutex:
                self.lineup.cores[index].pause_checked(paused, sent_at)

    def _isolate(self) -> None:
        """Send the rounds that leave the job about to start alone in hand (the lineup's
        ``next_job``). If one fails, the job runs all the same: its outcomes wait again, and
        the jobs it handed back come back when their leases run out."""
        with self._keeper.mutex:
            rounds = self.lineup.take_isolations()
        for index, round_ in rounds:
            self._guarded(self._send, index, round_)

    def _claim_round(self) -> None:
        """One settle call per queue, in priority order: each sends that queue's outcomes
        waiting and claims what the queues before it left of the round (the lineup's rule).
        A lane consumer takes one job: a queue's lanes, then its flat jobs, then the next
        queue's."""
        with self._keeper.lock:
            wanted = self.lineup.round_size()
        taken = 0
        for index, queue in enumerate(self.queues):
            asked = self.lineup.ask(wanted, taken)
            if asked and self.lanes:
                sent_at = time.monotonic()
                core = self.lineup.cores[index]
                with self._keeper.lock:
                    watch = core.watches(Round([], 1))
                    claim_id = core.next_claim_id(sent_at)
                job = queue.claim_lane(self.lease_ms, now=self._now(), watch=watch,
                                       claim_id=claim_id)
                with self._keeper.lock:
                    sent_at = core.claim_answered(claim_id, sent_at)
                if job is not None:
                    self._took(index, [job], sent_at)
                    taken += 1
                    continue
            with self._keeper.lock:
                round_ = self.lineup.cores[index].take_round(asked, now=time.monotonic())
            taken += len(self._send(index, round_))
        with self._keeper.lock:
            self.lineup.round_claimed(wanted, taken)

    def _wind_down(self) -> None:
        """Send the outcomes waiting; on a stop, hand back the jobs not started with them."""
        self._send_all(hand_back=self._stopping.is_set())

    def _send_all(self, *, hand_back: bool) -> None:
        """Send every queue's outcomes waiting (with ``hand_back``, its jobs not started); a
        failure is raised after every queue had its try."""
        failure: Exception | None = None
        for index, core in enumerate(self.lineup.cores):
            with self._keeper.lock:
                round_ = core.take_round(hand_back=hand_back)
            try:
                self._send(index, round_)
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def _hand_back_quietly(self) -> None:
        """The last round of a loop that ends: what it cannot send is logged; those leases run
        out and recover puts their jobs back."""
        try:
            self._wind_down()
        except Exception as exc:
            warn_not_handed_back(exc)

    def _send(self, index: int, round_: Round) -> list[Job]:
        """One settle call for ``round_`` on queue ``index``; what it claimed goes into hand
        (and is returned). If it fails, its outcomes wait for the next round."""
        if not round_.outcomes and not round_.claim:
            return []
        sent_at = time.monotonic()
        with self._keeper.lock:
            watch = self.lineup.cores[index].watches(round_)
        try:
            verdicts, jobs = self.queues[index].settle_leased(
                round_.outcomes, round_.claim, self.lease_ms, self.settings.retention_ms,
                self._now(), watch=watch, claim_id=round_.claim_id)
        except Exception:
            with self._keeper.lock:
                self.lineup.cores[index].unsent(round_, time.monotonic())
            raise
        with self._keeper.lock:
            sent_at = self.lineup.cores[index].claim_answered(round_.claim_id, sent_at)
        self._took(index, jobs, sent_at)
        report_settled(round_.outcomes, verdicts, self.on_ack)
        return jobs

    def _took(self, index: int, jobs: list[Job], sent_at: float) -> None:
        """``jobs`` of queue ``index``, claimed by a call sent at ``sent_at``, are in hand (a
        claim with nothing of that queue in hand sent its watch tokens in its own flush, so a
        consumer parked on them learns their deadline)."""
        core = self.lineup.cores[index]
        with self._keeper.lock:
            core.sent()
            idle = not self.lineup.in_hand
            core.claimed(jobs, time.monotonic(), sent_at)
            if idle and jobs:
                self._keeper.wake()

    # the keeper's work (on its thread) ------------------------------------------------------

    def keep(self, index: int, extends: list[Job], overruns: list[Job], due: Round | None,
             housekeep: bool) -> None:
        """For queue ``index``: extend the leases in hand, fail overrun attempts, send the
        outcomes that waited long enough, run due housekeeping; errors are logged (the loop
        itself meets them on its next call)."""
        if extends:
            self._guarded(self._heartbeat, index, extends)
        for job in overruns:
            self._guarded(self._overrun, index, job)
        if due is not None:
            self._guarded(self._send, index, due)
        if housekeep:
            self._guarded(self._housekeep_queue, index)

    def _guarded(self, action: Callable[..., object], *args: Any) -> None:
        try:
            action(*args)
        except Exception as exc:
            log_guarded(action, exc)

    def _heartbeat(self, index: int, jobs: list[Job]) -> None:
        """Extend every lease in hand of queue ``index`` in one call; a lease found lost is let
        go of."""
        verdicts = None
        sent_at = time.monotonic()
        try:
            verdicts = self.queues[index].extend_many(jobs, lease_ms=self.lease_ms,
                                                      now=self._now())
        finally:
            with self._keeper.lock:
                lost = self.lineup.cores[index].heartbeat_done(jobs, verdicts,
                                                               time.monotonic(), sent_at)
        warn_lost(lost)

    def _overrun(self, index: int, job: Job) -> None:
        """Fail an attempt past its time limit, and hand back the jobs prefetched behind it
        in every queue (its handler may never return), with its queue's round first; then tell
        ``on_overrun``."""
        log_overrun(job, self.settings.time_limit_ms)
        self._runner.cancel(job)
        core = self.lineup.cores[index]
        with self._keeper.lock:
            round_ = core.take_round(hand_back=True)
        round_.outcomes.insert(0, core.overrun_settlement().outcome(job))
        try:
            self._send(index, round_)
            self._send_all(hand_back=True)
        finally:
            self._tell_overrun(job)

    # internals ----------------------------------------------------------------------------

    def _housekeep(self, *, force: bool = False) -> None:
        """Recover + promote each queue at this consumer's turn, when it takes the queue's
        housekeeping token (``force``: every queue now, without the token)."""
        now = time.monotonic()
        for index, core in enumerate(self.lineup.cores):
            if not force and now < core.housekeeping_at:
                continue  # not due: checked without the lock first, as between every two jobs
            with self._keeper.lock:
                due = core.take_housekeeping(time.monotonic(), force=force)
            if force:
                self._recover_and_promote(index)
            elif due:
                self._housekeep_queue(index)

    def _housekeep_queue(self, index: int) -> None:
        """Recover + promote queue ``index`` if this consumer takes its housekeeping token."""
        queue, core = self.queues[index], self.lineup.cores[index]
        try:
            reply = take_token(queue.conn, queue.key(TOKEN_ROLE), self._name,
                               self.settings.housekeeping_ms)
        finally:
            with self._keeper.lock:
                core.token_answered(time.monotonic())
        if token_taken(reply, self._name):
            self._recover_and_promote(index)

    def _recover_and_promote(self, index: int = 0) -> None:
        """Recover, then promote, in steps of at most HOUSEKEEPING_STEP jobs each, until a step
        leaves nothing due."""
        recover_due(self.queues[index], now=self._now(), max_attempts=self.max_attempts)

    def _guarded_beat(self) -> None:
        """A beat; a transient error waits (stop-aware) with back-off, a fatal one raises."""
        try:
            self._beat(force=False)
        except Exception as exc:
            self._stopping.wait(self._pause_after(exc))
            return
        self.core.backoff.succeeded()
