"""The asyncio consumer: ``echomq.aio.Consumer``, the same loop as ``echomq.Consumer`` (the
decisions in ``echomq.consumer.loop``) on one event loop instead of threads."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any

from echomq.consumer.loop import (
    HOUSEKEEPING_MS,
    PARK_CAP_MS,
    PARK_FLOOR_MS,
    PAUSE_CHECK_MS,
    PREFETCH,
    SETTLE_DELAY_MS,
    Lineup,
    LoopCore,
    Round,
    Settings,
    describe,
    park_socket_timeout,
)
from echomq.consumer.presence import Announcer, announced_async
from echomq.consumer.shell import (
    LoopShell,
    consumer_name,
    log_guarded,
    log_overrun,
    park_keys,
    queue_list,
    refuse_unsupported,
    report_settled,
    wake_keys,
    warn_lost,
    warn_not_handed_back,
)
from echomq.engine.calls import (
    DEFAULT_LEASE_MS,
    Job,
)
from echomq.engine.clients import private_twin
from echomq.engine.server_time import async_server_ms
from echomq.queue.aio import Queue
from echomq.queue.bounds import HOUSEKEEPING_STEP, more_due
from echomq.queue.connection import socket_timeout_of
from echomq.queue.parking import (
    TOKEN_ROLE,
    WATCH_ROLE,
    Sighting,
    is_watch,
    queue_reads,
    queue_watch,
    sighting_of,
    split_beat,
    take_token,
    token_taken,
)

log = logging.getLogger("echomq")


AsyncHandler = Callable[[Job], Awaitable[object] | object]
# What a handler came to: the value it returned, or the exception it raised.
Handled = tuple[object, BaseException | None]


async def _until(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for ``event`` at most ``timeout_s``."""
    with suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)


def _closing(client: Any) -> Callable[[asyncio.Future[Any]], None]:
    """A done callback for an abandoned park: its outcome is consumed, and the parking
    ``client`` it ran on is closed once it has unwound."""
    def close(future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            future.exception()
        if client is not None:
            with suppress(RuntimeError):  # no running loop left: the client goes with it
                asyncio.get_running_loop().create_task(client.aclose())

    return close


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

    While anything is in hand, a keeper task extends the leases in hand, sends outcomes that
    waited ``settle_delay_ms``, runs due housekeeping and enforces the time limit. ``stop()``
    must be called from the loop's own thread; the handlers in flight finish, the jobs
    prefetched and not started are handed back. ``announce``: as ``echomq.Consumer``'s, the
    record rewritten by a task of the loop."""

    def __init__(self, queue: Queue | Sequence[Queue], handler: AsyncHandler, *,
                 lanes: bool = False, lease_ms: int = DEFAULT_LEASE_MS,
                 retry_delay_ms: int = 1_000, max_attempts: int | None = None,
                 park_cap_ms: int = PARK_CAP_MS, park_floor_ms: int = PARK_FLOOR_MS,
                 heartbeat: bool = True, retention_ms: int | None = None,
                 clock: Callable[[], int] | None = None,
                 on_ack: Callable[[Job], object] | None = None,
                 housekeeping_ms: int = HOUSEKEEPING_MS, time_limit_ms: int | None = None,
                 on_overrun: Callable[[Job], object] | None = None, prefetch: int = PREFETCH,
                 settle_delay_ms: int = SETTLE_DELAY_MS, concurrency: int = 1,
                 pause_check_ms: int = PAUSE_CHECK_MS, announce: bool = True) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive int, got {concurrency!r}")
        self.queues: list[Queue] = queue_list(queue)
        refuse_unsupported(self.queues[0].wire, lanes)
        self.lineup = Lineup.of(Settings(
            lease_ms=lease_ms, retry_delay_ms=retry_delay_ms, max_attempts=max_attempts,
            park_cap_ms=park_cap_ms, park_floor_ms=park_floor_ms,
            housekeeping_ms=housekeeping_ms, time_limit_ms=time_limit_ms,
            retention_ms=retention_ms, heartbeat=heartbeat, lanes=lanes,
            capacity=max(prefetch, concurrency), settle_delay_ms=settle_delay_ms,
            pause_check_ms=pause_check_ms), len(self.queues))
        self.queue = self.queues[0]
        self.handler = handler
        self.concurrency = concurrency
        self.on_ack = on_ack
        self.on_overrun = on_overrun
        self.clock = clock
        self.announce = announce
        self._socket_timeout_s = socket_timeout_of(self.queue.conn)
        self._parking_conn: Any = None  # made on the first park: see ``_parking_client``
        self._running = False  # inside ``run``
        self._parking_timeout_s = self._socket_timeout_s
        self._name = consumer_name()
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()
        self._parking: asyncio.Task[str | None] | None = None
        self._handling: dict[Job, asyncio.Future[Handled]] = {}
        self._in_flight: set[asyncio.Task[None]] = set()
        self._keeper: asyncio.Task[None] | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def in_flight(self) -> int:
        """How many handlers are running now (one past its time limit until it returns)."""
        return sum(len(core.running) for core in self.lineup.cores)

    async def run(self) -> None:
        """Beat until ``stop()``, listed in the registry of live workers meanwhile unless
        ``announce`` is False (the record beats from a task of this loop while busy, and rides
        in the parks' flushes while parked). Transient server errors are retried with a
        growing pause; one that cannot heal raises FatalServerError."""
        async with announced_async(self, self.announce):
            await self._run()

    async def _run(self) -> None:
        log.info("async consumer started: queue %s, wire %d, %s, lease %d ms, concurrency %d",
                 self.names, self.queue.wire, "lanes" if self.lanes else "flat", self.lease_ms,
                 self.concurrency)
        self._running = True
        try:
            while not self._stopping.is_set():
                await self._guarded_beat()
        finally:
            self._running = False
            await self._settle_in_flight()
            await self._hand_back_quietly()
            await self._keeper_done()
            for index, core in enumerate(self.lineup.cores):
                if core.due_at is not None:  # as ``echomq.Consumer._hand_on_watch``
                    await self._guarded(self._watch, index)
            await self._close_parking()
            log.info("async consumer stopped: queue %s", self.names)

    def stop(self) -> None:
        """Stop claiming; a parked consumer returns at once, running jobs finish first,
        prefetched jobs not started are handed back."""
        self._stopping.set()
        if self._parking is not None:
            self._parking.cancel()

    async def beat(self, *, park: bool = True) -> int:
        """One round: recover, promote, drain, then park; how many jobs were run."""
        try:
            return await self._beat(force=True, park=park)
        finally:
            await self._close_parking_unless_running()

    async def _close_parking_unless_running(self) -> None:
        """A call from outside ``run`` leaves no parking connection open behind it."""
        if not self._running:
            await self._close_parking()

    async def _beat(self, *, force: bool, park: bool = True) -> int:
        """As ``echomq.Consumer._beat``: housekeeping at this consumer's turn and with the
        queue's token (``force``: at once, without it)."""
        self.lineup.rested()
        await self._housekeep(force=force)
        handled = await self.drain()
        if park and not self._stopping.is_set():
            await self.park()
        return handled

    async def drain(self) -> int:
        """Claim and run jobs, up to ``concurrency`` at once, until none is left and none runs,
        or a stop is asked for, with housekeeping in between whenever it is due; every outcome
        is sent (and, on a stop, the jobs not started handed back) before it returns."""
        handled = 0
        try:
            while not self._stopping.is_set():
                await self._housekeep()
                if len(self._in_flight) >= self.concurrency:
                    await self._one_finished()
                    continue
                picked = await self._next_job()
                if picked is None:
                    if not self._in_flight:
                        break
                    await self._one_finished(wake=True)
                    continue
                await self._start(*picked)
                handled += 1
        finally:
            await self._settle_in_flight()
        await self._wind_down()
        await self._keeper_done()
        return handled

    async def _start(self, index: int, job: Job) -> None:
        """Start ``job``'s handler as a task of its own; a job claimed before waits for the
        handlers in flight to finish, then runs alone to its end."""
        if job.attempt > 1 and self.concurrency > 1:
            self.lineup.cores[index].held_back(job)
            await self._settle_in_flight()
            self.lineup.cores[index].restarted(job, time.monotonic())
            await self.process(index, job)
            return
        if self.concurrency == 1:
            await self.process(index, job)
            return
        task = asyncio.ensure_future(self.process(index, job))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _one_finished(self, *, wake: bool = False) -> None:
        """Wait until a handler in flight finishes or a stop is asked for (``wake``: or a wake
        token arrives on any of the queues, as a job to fill a free place may have)."""
        stopped = asyncio.ensure_future(self._stopping.wait())
        waiters: list[asyncio.Future[Any]] = [stopped]
        if wake:
            waiters.append(asyncio.ensure_future(self._park_briefly()))
        try:
            await asyncio.wait({*self._in_flight, *waiters}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _park_briefly(self) -> None:
        """Block on the wake keys at most the park cap (a handler finishing cancels it)."""
        await self.queue.conn.blpop(wake_keys(self.queues),
                                    timeout=self.lineup.cores[0].park_cap_ms(
                                        self._socket_timeout_s) / 1000)

    async def _settle_in_flight(self) -> None:
        """Let every handler in flight finish."""
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def park(self) -> bool:
        """As ``echomq.Consumer.park``: on every queue's wake and watch keys until a wake
        token or ``stop()``, returning False for a beat when what it read has fallen due at
        this consumer's turn to housekeep. True when woken for work."""
        try:
            return await self._park()
        finally:
            if self.announcer is not None:
                self.announcer.unparked()

    async def _park(self) -> bool:
        ready = False
        while not self._stopping.is_set():
            sightings = await self._read(ready=ready, announcer=self.announcer)
            if any(sighting.ready for sighting in sightings):
                self._woke(time.monotonic())
                return True
            timeout_s = await self._plan(sightings) / 1000
            now = time.monotonic()
            if any(core.housekeeping_wanted(now) for core in self.lineup.cores):
                self._woke(now)
                return False
            if self._stopping.is_set():  # asked while the heads were read: stop() saw no park
                return False
            popped = await self._park_for(timeout_s)
            if popped == "wake":
                self._woke(time.monotonic())
                return True
            ready = popped is None
        return False

    async def _park_for(self, timeout_s: float) -> str | None:
        """One BLPOP that ``stop()`` ends: what it popped, or None. A stop does not wait for
        the cancelled BLPOP to unwind (a cancel that meets the client's own read timeout can be
        swallowed, and the call then blocks to its end): its parking client is dropped instead,
        and the next park, if any, opens another."""
        parking = self._parking = asyncio.ensure_future(self._blpop(timeout_s))
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({parking, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._parking = None
            stopped.cancel()
        if parking.done():
            if parking.cancelled():
                if not self._stopping.is_set():
                    raise asyncio.CancelledError
                return None
            return parking.result()
        parking.cancel()
        abandoned, self._parking_conn = self._parking_conn, None
        parking.add_done_callback(_closing(None if abandoned is self.queue.conn else abandoned))
        return None

    async def _blpop(self, timeout_s: float) -> str | None:
        """"wake", "watch" (which token it popped), or None (the timeout)."""
        popped = await (await self._parking_client()).blpop(park_keys(self.queues),
                                                            timeout=timeout_s)
        if popped is None:
            return None
        return "watch" if is_watch(popped[0]) else "wake"

    async def _parking_client(self) -> Any:
        """The client the consumer parks and reads through: a pool of its own whose read
        timeout outlasts the longest park (a cluster client: the queue's own)."""
        if self._parking_conn is None:
            timeout_s = park_socket_timeout(self._socket_timeout_s, self.settings.park_cap_ms)
            private = private_twin(self.queue.conn, timeout_s, single=False)
            if private is not None:
                self._parking_timeout_s = timeout_s
            self._parking_conn = self.queue.conn if private is None else private
        return self._parking_conn

    async def _close_parking(self) -> None:
        conn, self._parking_conn = self._parking_conn, None
        if conn is not None and conn is not self.queue.conn:
            with suppress(Exception):
                await conn.aclose()
                await conn.connection_pool.disconnect()

    async def _read(self, *, ready: bool, announcer: Announcer | None = None) -> list[Sighting]:
        """Each queue's Sighting, read in one flush through the parking client (``announcer``:
        before a park, as ``echomq.consumer.blocking.Parker.read``)."""
        client = await self._parking_client()
        async with client.pipeline(transaction=False) as pipe:
            for queue in self.queues:
                queue_reads(pipe, queue.key, ready=ready, lanes=self.lanes)
            beat = 0 if announcer is None else await announcer.aqueue_parked(
                pipe, self.settings.park_cap_ms)
            replies, written = split_beat(await pipe.execute(raise_on_error=not beat), beat)
        if announcer is not None and beat and announcer.parked_written(written):
            await announcer.arelist()
        per_queue = len(replies) // len(self.queues)
        return [sighting_of(replies[n * per_queue:(n + 1) * per_queue])
                for n in range(len(self.queues))]

    async def park_timeout_ms(self) -> int:
        """As ``echomq.Consumer.park_timeout_ms``."""
        try:
            return await self._plan(await self._read(ready=False))
        finally:
            await self._close_parking_unless_running()

    async def _plan(self, sightings: Sequence[Sighting]) -> int:
        due = min((s.due for s in sightings if s.due is not None), default=None)
        now = None
        if due is not None:
            now = self.clock() if self.clock is not None else await self._server_ms()
        mono = time.monotonic()
        pairs = list(zip(self.lineup.cores, sightings, strict=True))
        for core, sighting in pairs:
            core.learned_due(sighting.due, now, mono)
        return min(core.park_ms(sighting.due, now, self._parking_timeout_s, mono)
                   for core, sighting in pairs)

    def _woke(self, now: float) -> None:
        for core in self.lineup.cores:
            core.woke(now)

    # one job ------------------------------------------------------------------------------

    async def process(self, index: int, job: Job) -> None:
        """Run the handler on ``job`` of queue ``index`` (started by ``_next_job``, its lease
        in hand), then queue its settlement for the next round."""
        core = self.lineup.cores[index]
        try:
            returned, failure = await self._handled(job)
        finally:
            mine = core.finished(job)
        settlement = core.settlement(failure, returned, job.attempt)
        if mine and core.record(job, settlement, time.monotonic()):
            self._changed.set()  # the first outcome waiting: a new deadline for the keeper
        if not mine:
            log.warning("job %s attempt %d returned after its lease was given up (time limit "
                        "or lost lease); its outcome is dropped", job.id, job.attempt)
        if core.stops_loop(failure):
            log.warning("handler raised %s on %s: the consumer stops",
                        describe(failure or BaseException()), job.id)
            self.stop()

    async def _handled(self, job: Job) -> Handled:
        """What the handler returned on ``job``, or its failure. Under a time limit it runs as
        a task of its own, so the keeper can cancel it."""
        if self.settings.time_limit_ms is None:
            return await self._call_handler(job)
        handling = asyncio.ensure_future(self._call_handler(job))
        self._handling[job] = handling
        self._changed.set()  # its time limit is a new deadline
        try:
            return await self._outcome(handling)
        finally:
            self._handling.pop(job, None)

    async def _call_handler(self, job: Job) -> Handled:
        result: object
        try:
            if inspect.iscoroutinefunction(self.handler):
                result = self.handler(job)
            else:
                result = await asyncio.to_thread(self.handler, job)
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

    # rounds -------------------------------------------------------------------------------

    async def _next_job(self) -> tuple[int, Job] | None:
        """As ``echomq.Consumer._next_job``: a prefetched job, else one of the next batch."""
        await self._check_pauses()
        picked = self.lineup.next_job(time.monotonic())
        if picked is None:
            await self._claim_round()
            picked = self.lineup.next_job(time.monotonic())
        for index, round_ in self.lineup.take_isolations():
            await self._guarded(self._send, index, round_)
        return picked

    async def _check_pauses(self) -> None:
        """As ``echomq.Consumer._check_pauses``."""
        for index in self.lineup.pause_checks_due(time.monotonic()):
            sent_at = time.monotonic()
            paused = await self.queues[index].is_paused()
            self.lineup.cores[index].pause_checked(paused, sent_at)

    async def _claim_round(self) -> None:
        """As ``echomq.Consumer._claim_round``: the queues in priority order, each asked for
        what the ones before it left of the round."""
        wanted = self.lineup.round_size()
        taken = 0
        for index, queue in enumerate(self.queues):
            asked = self.lineup.ask(wanted, taken)
            core = self.lineup.cores[index]
            if asked and self.lanes:
                sent_at = time.monotonic()
                watch, claim_id = core.watches(Round([], 1)), core.next_claim_id(sent_at)
                job = await queue.claim_lane(self.lease_ms, now=self._now(), watch=watch,
                                             claim_id=claim_id)
                sent_at = core.claim_answered(claim_id, sent_at)
                if job is not None:
                    self._took(index, [job], sent_at)
                    taken += 1
                    continue
            round_ = core.take_round(asked, now=time.monotonic())
            taken += len(await self._send(index, round_))
        self.lineup.round_claimed(wanted, taken)

    async def _wind_down(self) -> None:
        await self._send_all(hand_back=self._stopping.is_set())

    async def _send_all(self, *, hand_back: bool) -> None:
        """Send every queue's outcomes waiting (with ``hand_back``, its jobs not started); a
        failure is raised after every queue had its try."""
        failure: Exception | None = None
        for index, core in enumerate(self.lineup.cores):
            try:
                await self._send(index, core.take_round(hand_back=hand_back))
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    async def _hand_back_quietly(self) -> None:
        try:
            await self._wind_down()
        except Exception as exc:
            warn_not_handed_back(exc)

    async def _send(self, index: int, round_: Round) -> list[Job]:
        """As ``echomq.Consumer._send``: one settle call for ``round_`` on queue ``index``."""
        if not round_.outcomes and not round_.claim:
            return []
        sent_at = time.monotonic()
        watch = self.lineup.cores[index].watches(round_)
        try:
            verdicts, jobs = await self.queues[index].settle_leased(
                round_.outcomes, round_.claim, self.lease_ms, self.settings.retention_ms,
                self._now(), watch=watch, claim_id=round_.claim_id)
        except Exception:
            self.lineup.cores[index].unsent(round_, time.monotonic())
            raise
        sent_at = self.lineup.cores[index].claim_answered(round_.claim_id, sent_at)
        self._took(index, jobs, sent_at)
        report_settled(round_.outcomes, verdicts, self.on_ack)
        return jobs

    def _took(self, index: int, jobs: list[Job], sent_at: float) -> None:
        """``jobs``, claimed by a call sent at ``sent_at``, are in hand (as
        ``echomq.Consumer._took``; the watch tokens went out with the claim)."""
        core = self.lineup.cores[index]
        core.sent()
        core.claimed(jobs, time.monotonic(), sent_at)
        if jobs and (self._keeper is None or self._keeper.done()):
            self._keeper = asyncio.ensure_future(self._keep())

    async def _watch(self, index: int) -> None:
        queue = self.queues[index]
        async with queue.conn.pipeline(transaction=False) as pipe:
            queue_watch(pipe, queue.key(WATCH_ROLE))
            await pipe.execute()

    # the keeper ---------------------------------------------------------------------------

    async def _keep(self) -> None:
        """While anything is in hand: extend the leases in hand, fail overrun attempts, send
        the outcomes that waited long enough, run due housekeeping; ends when nothing is in
        hand."""
        while self.lineup.in_hand:
            now = time.monotonic()
            wait = self.lineup.next_tick(now)
            if wait > 0:
                self._changed.clear()
                await _until(self._changed, wait)
                continue
            for index, core in enumerate(self.lineup.cores):
                await self._keep_queue(index, core, now)

    async def _keep_queue(self, index: int, core: LoopCore, now: float) -> None:
        """The keeper's work for queue ``index`` due at ``now``."""
        extends = core.heartbeat(now)
        overruns = core.take_overruns(now)
        due = core.take_round() if core.outbox_due(now) else None
        housekeep = core.take_housekeeping(now)
        if extends:
            await self._guarded(self._heartbeat, index, extends)
        for job in overruns:
            await self._guarded(self._overrun, index, job)
        if due is not None:
            await self._guarded(self._send, index, due)
        if housekeep:
            await self._guarded(self._housekeep_queue, index)

    async def _keeper_done(self) -> None:
        """Let the keeper see that nothing is in hand, and wait for it to end."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            self._changed.set()
            await asyncio.gather(keeper, return_exceptions=True)

    async def _guarded(self, action: Callable[..., Awaitable[object]], *args: Any) -> None:
        try:
            await action(*args)
        except Exception as exc:
            log_guarded(action, exc)

    async def _heartbeat(self, index: int, jobs: list[Job]) -> None:
        verdicts = None
        sent_at = time.monotonic()
        try:
            verdicts = await self.queues[index].extend_many(jobs, lease_ms=self.lease_ms,
                                                            now=self._now())
        finally:
            lost = self.lineup.cores[index].heartbeat_done(jobs, verdicts, time.monotonic(),
                                                           sent_at)
        warn_lost(lost)

    async def _overrun(self, index: int, job: Job) -> None:
        """As ``echomq.Consumer._overrun``; the handler is cancelled. The others in flight go
        on: their own time limits stand."""
        log_overrun(job, self.settings.time_limit_ms)
        handling = self._handling.get(job)
        if handling is not None:
            handling.cancel()
        core = self.lineup.cores[index]
        round_ = core.take_round(hand_back=self.concurrency == 1)
        round_.outcomes.insert(0, core.overrun_settlement().outcome(job))
        try:
            await self._send(index, round_)
            if self.concurrency == 1:
                await self._send_all(hand_back=True)
        finally:
            self._tell_overrun(job)

    # internals ----------------------------------------------------------------------------

    async def _housekeep(self, *, force: bool = False) -> None:
        """As ``echomq.Consumer._housekeep``."""
        for index, core in enumerate(self.lineup.cores):
            if not core.take_housekeeping(time.monotonic(), force=force):
                continue
            if force:
                await self._recover_and_promote(index)
            else:
                await self._housekeep_queue(index)

    async def _housekeep_queue(self, index: int) -> None:
        """Recover + promote queue ``index`` if this consumer takes its housekeeping token."""
        queue, core = self.queues[index], self.lineup.cores[index]
        try:
            reply = await take_token(queue.conn, queue.key(TOKEN_ROLE), self._name,
                                     self.settings.housekeeping_ms)
        finally:
            core.token_answered(time.monotonic())
        if token_taken(reply, self._name):
            await self._recover_and_promote(index)

    async def _recover_and_promote(self, index: int = 0) -> None:
        """As ``echomq.Consumer._recover_and_promote``: in steps until none is due."""
        queue = self.queues[index]
        while more_due(await queue.recover(now=self._now(), limit=HOUSEKEEPING_STEP,
                                           max_attempts=self.max_attempts)):
            pass
        while more_due(await queue.promote(now=self._now(), limit=HOUSEKEEPING_STEP)):
            pass

    async def _guarded_beat(self) -> None:
        """A beat; a transient error waits (stop-aware) with back-off, a fatal one raises."""
        try:
            await self._beat(force=False)
        except Exception as exc:
            await _until(self._stopping, self._pause_after(exc))
            return
        self.core.backoff.succeeded()

    async def _server_ms(self) -> int:
        return await async_server_ms(self.queue.conn)
