"""The asyncio consumer: ``echomq.aio.Consumer``, the same loop as ``echomq.Consumer`` (the
beat's programs in ``echomq.consumer.beat``, the decisions in ``echomq.consumer.loop``) on one
event loop instead of threads: this shell performs the programs' actions with tasks."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any, TypeVar

import echomq.consumer.actions as actions
import echomq.consumer.settings as defaults
from echomq.consumer.actions import Action, Program, Stepper
from echomq.consumer.aio_notices import AsyncNoticeListener
from echomq.consumer.aio_parker import AsyncParker
from echomq.consumer.beat import Beat
from echomq.consumer.presence import announced_async
from echomq.consumer.settle_all import settle_all
from echomq.consumer.shell import LoopShell, judge_layout, layout_reads
from echomq.engine.calls import DEFAULT_LEASE_MS, Job
from echomq.engine.server_time import async_server_ms
from echomq.engine.wire import wire_of
from echomq.queue.aio import Queue
from echomq.queue.bounds import Housekept

log = logging.getLogger("echomq")

AsyncHandler = Callable[[Job], Awaitable[object] | object]
# What a handler came to: the value it returned, or the exception it raised.
Handled = tuple[object, BaseException | None]
T = TypeVar("T")


async def _until(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for ``event`` at most ``timeout_s``."""
    with suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)


class Consumer(LoopShell):
    """The consumer loop for asyncio code; see ``echomq.Consumer``: the same parameters, the
    same decisions (``echomq.consumer.loop.Lineup`` over a ``LoopCore`` per queue), driven by
    coroutines — one queue, or a list of them in strict priority order. ``handler`` may be a
    coroutine function (awaited, and cancelled past ``time_limit_ms``) or a plain function (run
    in a worker thread, which cannot be cancelled), and may return a directive (``Done``,
    ``RetryIn``, ``Reject``).

    ``concurrency``: how many handlers run at once (each its own task; prefetched jobs start in
    claim order as places free up). The hand holds at most ``max(prefetch, concurrency)`` jobs,
    running ones included. A job claimed before (a retry, or a lease that ran out) runs alone:
    it starts once the handlers in flight have finished, with the jobs prefetched handed back,
    and nothing else starts until it ends.

    ``spread``, and a sharded queue: as ``echomq.Consumer``'s (its shards served as one).

    While anything is in hand, a keeper task extends the leases in hand, sends outcomes that
    waited ``settle_delay_ms``, runs due housekeeping and enforces the time limit. ``stop()``
    must be called from the loop's own thread; the handlers in flight finish, the jobs
    prefetched and not started are handed back. ``announce``: as ``echomq.Consumer``'s, the
    record rewritten by a task of the loop."""

    def __init__(self, queue: Queue | Sequence[Queue], handler: AsyncHandler, *,
                 lanes: bool = False, lease_ms: int = DEFAULT_LEASE_MS,
                 retry_delay_ms: int = 1_000, max_attempts: int | None = None,
                 park_cap_ms: int = defaults.PARK_CAP_MS,
                 park_floor_ms: int = defaults.PARK_FLOOR_MS,
                 heartbeat: bool = True, retention_ms: int | None = None,
                 clock: Callable[[], int] | None = None,
                 on_ack: Callable[[Job], object] | None = None,
                 housekeeping_ms: int = defaults.HOUSEKEEPING_MS,
                 time_limit_ms: int | None = None,
                 on_overrun: Callable[[Job], object] | None = None,
                 prefetch: int = defaults.PREFETCH,
                 settle_delay_ms: int = defaults.SETTLE_DELAY_MS, concurrency: int = 1,
                 pause_check_ms: int = defaults.PAUSE_CHECK_MS, announce: bool = True,
                 spread: bool = False) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive int, got {concurrency!r}")
        # The hand holds the jobs running too: at least one a handler.
        self._serve(queue, handler, lanes, spread=spread, capacity=max(prefetch, concurrency),
                    lease_ms=lease_ms, retry_delay_ms=retry_delay_ms,
                    max_attempts=max_attempts, park_cap_ms=park_cap_ms,
                    park_floor_ms=park_floor_ms, housekeeping_ms=housekeeping_ms,
                    time_limit_ms=time_limit_ms, retention_ms=retention_ms,
                    heartbeat=heartbeat, settle_delay_ms=settle_delay_ms,
                    pause_check_ms=pause_check_ms)
        self.concurrency = concurrency
        self.on_ack, self.on_overrun, self.clock = on_ack, on_overrun, clock
        self.announce = announce
        self._parker = AsyncParker(self.queues, park_cap_ms)
        self._running = False  # inside ``run``
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()
        self._handling: dict[Job, asyncio.Future[Handled]] = {}
        self._threaded: set[Job] = set()  # jobs whose plain handler runs in a thread now
        self._in_flight: set[asyncio.Task[None]] = set()
        self._keeper: asyncio.Task[None] | None = None
        self.program = Beat(self)
        self._listener = AsyncNoticeListener(
            self.queues, park_cap_ms, lambda: self.lineup.in_hand,
            lambda notices: self.drive(self.program.noticed(notices)), self.heals)
        # How this shell performs the actions that are not calls on a queue (``_queue_call``)
        # nor notices (``_notice``): awaited, and done at once.
        self._io: dict[type[Action], Callable[[Any], Awaitable[Any]]] = {
            actions.Run: lambda action: self._handled(action.index, action.job),
            actions.Read: self._read,
            actions.ServerTime: lambda action: async_server_ms(self.queue.conn),
            actions.Block: lambda action: self._parker.park(self._blpop(action.timeout_s),
                                                    self._stopping),
            actions.Housekeep: lambda action: self._recover_and_promote(action.index, action.trim),
            actions.Watch: lambda action: self._parker.watch(action.index),
            actions.PauseAfter: self._pause,
            actions.Idle: self._idle,
            actions.WaitOne: lambda action: self._one_finished(wake=action.wake),
            actions.SettleInFlight: lambda action: self._settle_in_flight(),
            actions.KeeperDone: lambda action: self._keeper_done(),
            actions.Collect: lambda action: (asyncio.shield(self._ahead[action.index])
                                             if action.peek else self._ahead.pop(action.index)),
            actions.SettleAll: lambda action: self.queue._adrive(settle_all(
                self.queues, action.calls, self.lease_ms, self.settings.retention_ms,
                self._now())),
        }
        # The rounds sent ahead (``SendAhead``) whose replies are not read yet, by queue.
        self._ahead: dict[int, asyncio.Future[Any]] = {}
        self._now_io: dict[type[Action], Callable[[Any], None]] = {
            actions.Nudge: lambda action: self._nudge(),
            actions.Spawn: self._spawn,
            actions.SendAhead: self._send_ahead,
            actions.Overran: self._cancel_overrun,
            actions.CancelAsked: self._tell_cancelled,
        }

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def in_flight(self) -> int:
        """How many handlers are running now (one past its time limit until it returns)."""
        return sum(len(core.running) for core in self.lineup.cores)

    @property
    def parking_timeout_s(self) -> float | None:
        return self._parker.timeout_s

    async def run(self) -> None:
        """Beat until ``stop()``, listed in the registry of live workers meanwhile unless
        ``announce`` is False (the record beats from a task of this loop while busy, and rides
        in the parks' flushes while parked). Transient server errors are retried with a
        growing pause; one that cannot heal raises FatalServerError."""
        await self.check_layout()
        async with announced_async(self, self.announce):
            log.info("async consumer started: queue %s, wire %s, %s, lease %d ms, "
                     "concurrency %d", self.names, wire_of(self.queue.wire).label,
                     "lanes" if self.lanes else "flat", self.lease_ms, self.concurrency)
            self._running = True
            try:
                await self.drive(self.program.run())
            finally:
                self._running = False
                await self._listener.close()
                await self._parker.close()
                log.info("async consumer stopped: queue %s", self.names)
        self.raise_refused()

    async def check_layout(self) -> None:
        """Read each queue's row layout before the first claim (``judge_layout``); a server
        that cannot answer it now, or answers with an error, is not waited for here (the
        transitions read both layouts)."""
        for name, read in layout_reads(self.queues):
            try:
                layout = await read()
            except Exception as exc:
                if not self.from_server(exc):
                    raise
                continue  # a fatal one (WRONGTYPE, NOPERM) stops the loop at its first call
            judge_layout(name, layout)

    def stop(self) -> None:
        """Stop claiming; a parked consumer returns at once, running jobs finish first,
        prefetched jobs not started are handed back."""
        self._stopping.set()
        self._parker.interrupt()

    async def beat(self, *, park: bool = True) -> int:
        """One round: recover, promote, drain, then park; how many jobs were run."""
        try:
            return await self.drive(self.program.beat(force=True, park=park))
        finally:
            await self._close_parking_unless_running()

    async def drain(self) -> int:
        """Claim and run jobs, up to ``concurrency`` at once, until none is left and none runs,
        or a stop is asked for, with housekeeping in between whenever it is due; every outcome
        is sent (and, on a stop, the jobs not started handed back) before it returns."""
        return await self.drive(self.program.drain())

    async def park(self) -> bool:
        """As ``echomq.Consumer.park``: on every queue's wake and watch keys until a wake
        token or ``stop()``, returning False for a beat when what it read has fallen due at
        this consumer's turn to housekeep. True when woken for work."""
        return await self.drive(self.program.park())

    async def park_timeout_ms(self) -> int:
        """As ``echomq.Consumer.park_timeout_ms``."""
        try:
            return await self.drive(self.program.park_timeout())
        finally:
            await self._close_parking_unless_running()

    async def process(self, index: int, job: Job) -> None:
        """Run the handler on ``job`` of queue ``index`` (its lease in hand), then queue its
        settlement for the next round."""
        await self.drive(self.program.process(index, job))

    async def _close_parking_unless_running(self) -> None:
        """A call from outside ``run`` leaves no parking connection open behind it."""
        if not self._running:
            await self._parker.close()

    async def drive(self, program: Program[T]) -> T:
        """Walk ``program``, awaiting each action it asks for."""
        steps = Stepper(program)
        while (action := steps.step()) is not None:
            try:
                steps.reply(await self._perform(action))
            except BaseException as exc:  # thrown into the program where it asked
                steps.reply(error=exc)
        return steps.result

    async def _perform(self, action: Action) -> Any:
        call = self._queue_call(action)
        if call is not None:
            return self._answer(action, await call())
        perform = self._io.get(type(action))
        if perform is not None:
            return await perform(action)
        (self._now_io.get(type(action)) or self._notice)(action)
        return None

    # the actions' I/O and tasks -----------------------------------------------------------

    async def _blpop(self, timeout_s: float) -> str | None:
        """"wake", "watch" (which token it popped), or None (the timeout)."""
        return await self._parker.blpop(timeout_s)

    async def _read(self, action: actions.Read) -> list[Any]:
        announcer = self.announcer if action.before_park else None
        return await self._parker.read(ready=action.ready, lanes=self.lanes,
                                       announcer=announcer)

    def _nudge(self) -> None:
        """The keeper looks again: started when it is not running; the reader of cancel notices
        reads while anything is in hand."""
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.ensure_future(self.drive(self.program.keep()))
        else:
            self._changed.set()
        self._listener.wake()

    async def _idle(self, action: actions.Idle) -> None:
        self._changed.clear()
        await _until(self._changed, action.wait_s)

    async def _keeper_done(self) -> None:
        """Let the keeper see that nothing is in hand, and wait for it to end."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            self._changed.set()
            await asyncio.gather(keeper, return_exceptions=True)
        if not self._running:  # a drain or a beat called from outside ``run`` leaves no read
            await self._listener.close()

    def _send_ahead(self, action: actions.SendAhead) -> None:
        """The round's settle call, sent from a task of its own; ``Collect`` awaits its reply."""
        self._ahead[action.index] = asyncio.ensure_future(
            self.queues[action.index]._adrive(self._settle_program(action)))

    def _spawn(self, action: actions.Spawn) -> None:
        """Run ``action.job``'s handler as a task of its own."""
        task = asyncio.ensure_future(self.drive(self.program.spawned_process(action.index,
                                                                             action.job)))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _one_finished(self, *, wake: bool = False) -> None:
        """Wait until a handler in flight finishes or a stop is asked for (``wake``: or a wake
        token arrives on any of the queues, as a job to fill a free place may have)."""
        stopped = asyncio.ensure_future(self._stopping.wait())
        waiters: list[asyncio.Future[Any]] = [stopped]
        if wake:
            waiters.append(asyncio.ensure_future(self._parker.wait_wake(self.lineup.cores[0])))
        try:
            await asyncio.wait({*self._in_flight, *waiters}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _settle_in_flight(self) -> None:
        """Let every handler in flight finish."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _pause(self, action: actions.PauseAfter) -> None:
        """The wait after a failed beat, which a stop ends (raised: an error that cannot heal)."""
        await _until(self._stopping, self._pause_after(action.error))

    def _cancel_overrun(self, action: actions.Overran) -> None:
        """The handler past its time limit is cancelled; the others in flight go on: their own
        time limits stand."""
        self._overran(action.job)
        handling = self._handling.get(action.job)
        if handling is not None:
            handling.cancel()

    async def _recover_and_promote(self, index: int = 0, trim: bool = True) -> Housekept:
        """As ``echomq.Consumer``'s: recover, then promote, in steps until none is due; then,
        when asked, trim the dead jobs to their bounds."""
        done: Housekept = await self.queues[index].recover_due(
            now=self._now(), max_attempts=self.max_attempts, trim=trim)
        return done

    # one handler ----------------------------------------------------------------------------

    async def _handled(self, index: int, job: Job) -> Handled:
        """What the handler returned on ``job``, or its failure. It runs as a task of its own,
        so the keeper can cancel it (its time limit, or its job cancelled), with its job's
        cancel flag the one ``cancel_requested()`` reads."""
        with self.flags.running(job, self._cancel_asked(index)) as flag:
            handling = asyncio.ensure_future(self._call_handler(job))
            self._handling[job] = handling
            if self.settings.time_limit_ms is not None:
                self._changed.set()  # its time limit is a new deadline
            if flag.is_set():
                self._cancel_handler(job)
            try:
                return await self._outcome(handling)
            finally:
                self._handling.pop(job, None)

    def _tell_cancelled(self, action: actions.CancelAsked) -> None:
        """Set the flag of each job found cancelled and cancel its handler's task (not a plain
        handler's thread, which reads ``cancel_requested()``)."""
        for job in self.flags.request(action.jobs):
            self._cancel_handler(job)

    def _cancel_handler(self, job: Job) -> None:
        handling = self._handling.get(job)
        if handling is not None and job not in self._threaded:
            handling.cancel()

    async def _call_handler(self, job: Job) -> Handled:
        result: object
        try:
            if inspect.iscoroutinefunction(self.handler):
                result = self.handler(job)
            else:
                self._threaded.add(job)
                try:
                    result = await asyncio.to_thread(self.handler, job)
                finally:
                    self._threaded.discard(job)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the loop survives every handler outcome
            return None, exc
        return result, None

    @staticmethod
    async def _outcome(handling: asyncio.Future[Handled]) -> Handled:
        """What the handler returned, or its failure; a cancel of this task itself goes on."""
        try:
            return await handling
        except asyncio.CancelledError as exc:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return None, exc  # the handler was cancelled (its time limit) or cancelled itself
