"""``Consumer``: the supervised loop of one worker — housekeeping, claim, run, settle, park.

The loop's decisions live in ``echomq.consumer.loop`` (no I/O: a ``LoopCore`` per queue, and a
``Lineup`` ordering several queues by priority) and their sequencing in ``echomq.consumer.beat``
(programs that yield actions); this module is the blocking shell that performs those actions,
with a keeper thread beside the loop's own, and ``echomq.aio.Consumer`` the asyncio one. A
consumer of several queues parks on all their wake keys at once and runs each one's
housekeeping. Each beat runs recover + promote (when due),
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
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any, TypeVar

import echomq.consumer.actions as actions
import echomq.consumer.settings as defaults
from echomq.consumer.actions import Action, Program, Stepper
from echomq.consumer.beat import Beat
from echomq.consumer.blocking_notices import NoticeListener
from echomq.consumer.blocking_parker import Parker, push_wake_token, push_watch_token
from echomq.consumer.cancelling import Flag
from echomq.consumer.loop import error_text
from echomq.consumer.presence import announced
from echomq.consumer.settings import Clock, park_window
from echomq.consumer.settle_all import settle_all
from echomq.consumer.shell import LoopShell, judge_layout, layout_reads, refuse_unsupported
from echomq.engine.program import Ahead
from echomq.engine.server_time import server_ms
from echomq.engine.wire import wire_of
from echomq.queue.blocking import DEFAULT_LEASE_MS, Job, Queue
from echomq.queue.bounds import Housekept

__all__ = ["Consumer", "Parker", "error_text", "park_window", "push_wake_token",
           "push_watch_token", "refuse_unsupported", "server_ms"]

log = logging.getLogger("echomq")

Handler = Callable[[Job], object]
T = TypeVar("T")


class AwaitableRunner:
    """Runs what a handler returns when it is awaitable (an ``async def`` handler) to the end,
    on an event loop of this consumer's own; ``cancel`` ends it from another thread."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: tuple[Job, asyncio.Future[object]] | None = None

    def call(self, handler: Handler, job: Job, cancelled: Flag) -> object:
        """What ``handler(job)`` returned (awaited to the end when awaitable; its task cancelled
        at once if ``cancelled`` is set by then)."""
        result = handler(job)
        if result is None or not inspect.isawaitable(result):
            return result
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        task = asyncio.ensure_future(_awaited(result), loop=self._loop)
        self._running = (job, task)
        if cancelled.is_set():  # asked before ``_running`` named it: ``cancel`` missed it
            task.cancel()
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



class KeeperClosed(BaseException):
    """The consumer closed while its keeper idled: the keeper's program ends."""


class Keeper:
    """One thread that, while anything is in hand, runs the keeper's program (``Beat.keep``):
    it extends the leases in hand when due, sends outcomes that waited ``settle_delay_ms``, runs
    housekeeping when due, and fails any attempt past its time limit (then goes on with
    housekeeping while that handler still runs). It idles while nothing is in hand."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        # The lock of the condition: held while the beat's programs step (every change of the
        # lineup), released while their actions do I/O.
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

    def idle(self, wait_s: float) -> None:
        """Nothing to do for ``wait_s`` unless woken (called with ``lock`` held)."""
        if self._closed:
            raise KeeperClosed
        self._cond.wait(wait_s)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        consumer = self._consumer
        while True:
            with self._cond:
                while not self._closed and not consumer.lineup.in_hand:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                consumer.drive(consumer.program.keep())
            except KeeperClosed:
                return


class Consumer(LoopShell):
    """The supervised loop of one worker on ``queue`` — or on a list of queues in strict
    priority order — running ``handler(job)`` per job.

    Several queues: a job of an earlier queue always runs before a later one's when both are
    ready (``echomq.consumer.loop.Lineup`` states the rule for batches), the consumer parks on every
    queue's wake key at once, runs housekeeping for each, and (``lanes``) claims each one's
    lanes before its flat jobs. The handler may return a directive (``echomq.Done``,
    ``RetryIn``, ``Reject``) to say how its job is settled.

    ``prefetch``: the most jobs in hand at once (at most ``MAX_PREFETCH``, 1,000) — claimed in
    batches, run one at a time in claim order, their outcomes sent with the next claim in one
    ``settle`` call. With one queue, batches grow to half the prefetch and, while the queue is
    busy, the next round goes out as a batch starts (its reply read when the batch has run).
    An outcome waits at most ``settle_delay_ms`` for that call (the keeper sends it otherwise).
    1 claims, runs and settles one job at a time. A prefetched job whose lease is within a
    third of its end by this consumer's clock is released, never started;
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

    ``spread``: the queues listed are served as one queue over its shards rather than in
    priority order (``echomq.consumer.loop``): each round asks every shard at once for its
    share of the batch, in one round trip on one server, and a ready shard is asked within N
    rounds. A sharded queue (``shards`` > 1) is served so on its own: ``Consumer(q, ...)``
    serves ``q.shard_queues``, spread.
    """

    concurrency = 1  # one handler at a time

    def __init__(self, queue: Queue | Sequence[Queue], handler: Handler, *,
                 lanes: bool = False,
                 lease_ms: int = DEFAULT_LEASE_MS, retry_delay_ms: int = 1_000,
                 max_attempts: int | None = None, park_cap_ms: int = defaults.PARK_CAP_MS,
                 heartbeat: bool = True, retention_ms: int | None = None,
                 on_ack: Callable[[Job], object] | None = None, clock: Clock | None = None,
                 park_floor_ms: int = defaults.PARK_FLOOR_MS,
                 housekeeping_ms: int = defaults.HOUSEKEEPING_MS,
                 time_limit_ms: int | None = None,
                 on_overrun: Callable[[Job], object] | None = None,
                 prefetch: int = defaults.PREFETCH,
                 settle_delay_ms: int = defaults.SETTLE_DELAY_MS,
                 pause_check_ms: int = defaults.PAUSE_CHECK_MS, announce: bool = True,
                 spread: bool = False) -> None:
        self._serve(queue, handler, lanes, spread=spread, capacity=prefetch, lease_ms=lease_ms,
                    retry_delay_ms=retry_delay_ms, max_attempts=max_attempts,
                    park_cap_ms=park_cap_ms, park_floor_ms=park_floor_ms,
                    housekeeping_ms=housekeeping_ms, time_limit_ms=time_limit_ms,
                    retention_ms=retention_ms, heartbeat=heartbeat,
                    settle_delay_ms=settle_delay_ms, pause_check_ms=pause_check_ms)
        self.on_ack, self.on_overrun = on_ack, on_overrun
        self.clock = clock
        self.announce = announce
        self._stopping = threading.Event()
        self._running = False  # inside ``run``
        self._keeper = Keeper(self)
        self._parker = Parker(self.queues, park_cap_ms)
        self._runner = AwaitableRunner()
        self.program = Beat(self)
        self._listener = NoticeListener(
            self.queues, park_cap_ms, self._keeper.lock, lambda: self.lineup.in_hand,
            lambda notices: self.drive(self.program.noticed(notices)), self.heals)
        # How this shell performs the actions that are not calls on a queue (``_queue_call``)
        # nor notices (``_notice``): its threads' and its parking's.
        self._io: dict[type[Action], Callable[[Any], Any]] = {
            actions.Run: lambda action: self._run_handler(action.index, action.job),
            actions.CancelAsked: self._tell_cancelled,
            actions.Nudge: self._nudge,
            actions.Idle: lambda action: self._keeper.idle(action.wait_s),
            actions.Read: self._read,
            actions.ServerTime: lambda action: self._parker.server_ms(),
            actions.Block: lambda action: self._parker.park(action.timeout_s, self._stopping),
            actions.Housekeep: self._housekeep,
            actions.Watch: lambda action: push_watch_token(self.queues[action.index]),
            actions.PauseAfter: self._pause,
            actions.Overran: self._cancel_overrun,
            actions.KeeperDone: self._keeper_done,
            actions.SendAhead: self._send_ahead,
            actions.Collect: lambda action: (self._ahead[action.index] if action.peek
                                             else self._ahead.pop(action.index)).result(),
            actions.SettleAll: lambda action: self.queue._drive(settle_all(
                self.queues, action.calls, self.lease_ms, self.settings.retention_ms,
                self._now())),
        }
        # The rounds sent ahead whose replies are not read yet, by queue.
        self._ahead: dict[int, Ahead[Any]] = {}

    @property
    def park_cap_ms(self) -> int:
        return self.settings.park_cap_ms

    @property
    def parking_timeout_s(self) -> float | None:
        return self._parker.socket_timeout_s

    # control ------------------------------------------------------------------------------

    def run(self) -> None:
        """Beat until ``stop()``, listed in the registry of live workers meanwhile (unless
        ``announce`` is False). Transient server errors are retried with a growing pause; one
        that cannot heal raises FatalServerError. At the end the jobs not started go back, the
        outcomes waiting go out, and a consumer that knew when something falls due leaves a
        watch token, so a consumer still parked reads the heads again and watches in its
        place."""
        self.check_layout()
        with announced(self, self.announce):
            log.info("consumer started: queue %s, wire %s, %s, lease %d ms", self.names,
                     wire_of(self.queue.wire).label, "lanes" if self.lanes else "flat",
                     self.lease_ms)
            self._running = True
            try:
                self.drive(self.program.run())
            finally:
                self._running = False
                self.close()
                log.info("consumer stopped: queue %s", self.names)
        self.raise_refused()

    def check_layout(self) -> None:
        """Read each queue's row layout before the first claim (``judge_layout``); a server
        that cannot answer it now, or answers with an error, is not waited for here (the
        transitions read both layouts)."""
        for name, read in layout_reads(self.queues):
            if self.stopping:  # a stop right after the start waits for no read
                return
            try:
                layout = read()
            except Exception as exc:
                if not self.from_server(exc):
                    raise
                continue  # a fatal one (WRONGTYPE, NOPERM) stops the loop at its first call
            judge_layout(name, layout)

    def stop(self) -> None:
        """Stop claiming; a parked consumer returns at once, a running job finishes first,
        prefetched jobs not started are handed back. Safe from any thread."""
        self._stopping.set()
        self._parker.interrupt()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def close(self) -> None:
        """Release the keeper thread, the reader of cancel notices, the parking connection and
        the handlers' event loop."""
        self._keeper.close()
        self._listener.close()
        for ahead in self._ahead.values():
            ahead.close()
        self._ahead.clear()
        self._parker.close()
        self._runner.close()

    # the beat (``echomq.consumer.beat``) --------------------------------------------------

    def beat(self, *, park: bool = True) -> int:
        """One round: recover, promote, drain, then park (unless ``park`` is False or a stop
        was asked for). Returns how many jobs were run."""
        return self.drive(self.program.beat(force=True, park=park))

    def drain(self) -> int:
        """Claim and run jobs until none is left or a stop is asked for; how many ran. Every
        outcome is sent before it returns (and, on a stop, the jobs not started are handed
        back). Housekeeping runs in between whenever it is due, so a busy queue never starves
        it."""
        return self.drive(self.program.drain())

    def park(self) -> bool:
        """Block on the wake keys until a token or a stop (``Beat.park``). True when woken for
        work."""
        return self.drive(self.program.park())

    def park_timeout_ms(self) -> int:
        """How long to park: until the earliest lease deadline, retry or rate window falls due
        (no sooner than this consumer's next turn to housekeep), within [park_floor_ms, the
        park cap]; the cap stays below the parking connection's socket timeout."""
        return self.drive(self.program.park_timeout())

    def process(self, index: int, job: Job) -> None:
        """Run the handler on ``job`` of queue ``index`` (its lease in hand), then queue its
        settlement for the next round."""
        self.drive(self.program.process(index, job))

    def drive(self, program: Program[T]) -> T:
        """Walk ``program``: its steps (every change of the lineup) under the keeper's lock, its
        actions' I/O outside it; the keeper's own actions (``Action.local``) under it."""
        steps = Stepper(program)
        while True:
            with self._keeper.mutex:
                action = steps.step()
                while action is not None and action.local:
                    self._perform(steps, action)
                    action = steps.step()
            if action is None:
                return steps.result
            self._perform(steps, action)

    def _perform(self, steps: Stepper[Any], action: Action) -> None:
        """Perform ``action``, its reply (or what it raised) for ``steps``."""
        try:
            if (perform := self._io.get(type(action))) is not None:
                steps.reply(perform(action))
            elif (call := self._queue_call(action)) is not None:
                steps.reply(self._answer(action, call()))
            else:
                self._notice(action)
                steps.reply()
        except BaseException as exc:  # thrown into the program where it asked
            steps.reply(error=exc)

    # the actions' I/O ---------------------------------------------------------------------

    def _run_handler(self, index: int, job: Job) -> tuple[object, BaseException | None]:
        """What the handler returned, or what it raised (its job's cancel flag the one
        ``cancel_requested()`` reads meanwhile)."""
        try:
            with self.flags.running(job, self._cancel_asked(index)) as flag:
                return self._runner.call(self.handler, job, flag), None
        except BaseException as exc:  # the loop survives every handler outcome
            return None, exc

    def _tell_cancelled(self, action: actions.CancelAsked) -> None:
        """Set the flag of each job found cancelled; an ``async def`` handler's task is
        cancelled too (a plain one reads ``cancel_requested()``)."""
        for job in self.flags.request(action.jobs):
            self._runner.cancel(job)

    def _nudge(self, action: actions.Nudge) -> None:
        """Something in hand changed (under the keeper's lock): the keeper looks again, and
        the reader of cancel notices reads while anything is in hand."""
        self._keeper.wake()
        self._listener.wake()

    def _keeper_done(self, action: actions.KeeperDone) -> None:
        """Nothing in hand: the keeper idles by itself; outside ``run`` (a drain or a beat
        called alone) the read of cancel notices ends, so none is left blocked behind it."""
        if not self._running:
            self._listener.close()

    def _send_ahead(self, action: actions.SendAhead) -> None:
        """Write the round's settle call now; ``Collect`` reads its reply (on a client that
        cannot split the two, the call is made whole now)."""
        self._ahead[action.index] = Ahead(self._settle_program(action))

    def _read(self, action: actions.Read) -> list[Any]:
        announcer = self.announcer if action.before_park else None
        return self._parker.read(ready=action.ready, lanes=self.lanes, announcer=announcer)

    def _housekeep(self, action: actions.Housekeep) -> Housekept:
        """Recover, then promote, in steps of at most HOUSEKEEPING_STEP jobs each, until a step
        leaves nothing due; then, when asked, trim the dead jobs to their bounds."""
        done: Housekept = self.queues[action.index].recover_due(
            now=self._now(), max_attempts=self.max_attempts, trim=action.trim)
        return done

    def _pause(self, action: actions.PauseAfter) -> None:
        """The wait after a failed beat, which a stop ends (raised: an error that cannot heal)."""
        self._stopping.wait(self._pause_after(action.error))

    def _cancel_overrun(self, action: actions.Overran) -> None:
        self._overran(action.job)
        self._runner.cancel(action.job)
