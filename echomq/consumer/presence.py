"""The registry of live workers, its write side: each worker's record, kept fresh while it runs
(``roster`` reads it for the operator's tools: ``echomq workers``, ``stats``, the dashboard).

Each worker process, and each consumer whose ``run()`` runs in a process of the user's own
(``announced``, ``announced_async``: a script, a web process), keeps a hash
``emq:worker:<host>:<pid>:<started ms>`` (host, pid, queue and queues — the first and every queue it
serves, in priority order, as a JSON list —, wire — the one the first queue runs on, on wire auto
as soon as the server's first reply decided it —, started, the job in hand and since when, how many
jobs are in hand — ``running``: a lease prefetched and not yet started is not —, jobs done and
failed, last beat, whether a park wrote it, its expiry) and its key in the set ``emq:workers``. A
thread of its own (on an asyncio consumer, a task of its loop) rewrites the hash every ``BEAT_S``
and sets it to expire ``EXPIRY_BEATS`` beats later, so it keeps beating while a handler runs long,
and a process that dies without a word (SIGKILL) drops out within ``EXPIRY_MS``; a clean stop
deletes it at once. While a consumer parks, the thread is quiet: the flush of the read before each
park carries the rewrite when it is due (``Announcer.queue_parked``, every other park when parks
run to their cap), the record then expiring ``PARKED_EXPIRY_CAPS`` park caps later, so an idle
consumer's record costs it one command a park. The set is pruned of expired members when read.
Like the registry of queues, these keys lie outside every queue's hash slot and are written by the
client, never inside a transition.

Times are the server's clock (ms), so ages read on any host agree. A server that refuses these
writes (an ACL without ``emq:worker*``) is logged once; the worker runs on without its record.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import redis

from echomq.consumer.directives import Reject, RetryIn
from echomq.engine.clients import twins
from echomq.engine.server_time import time_ms
from echomq.engine.wire import wire_of
from echomq.queue.blocking import Job

log = logging.getLogger("echomq")

WORKERS_KEY = "emq:workers"
WORKER_PREFIX = "emq:worker:"
BEAT_S = 2.0
EXPIRY_BEATS = 3
EXPIRY_MS = int(BEAT_S * 1000 * EXPIRY_BEATS)
# A parked consumer's record expires this many park caps after it was written (225 s with
# the default cap) ...
PARKED_EXPIRY_CAPS = 3
# ... and is written again, in the flush before a park, when less than this many caps of its
# expiry are left (a park lasts a cap at most): every other park when parks run to their cap.
PARKED_REWRITE_CAPS = 1.5


_stamps = {"last": 0}
_stamps_lock = threading.Lock()


def _start_stamp() -> int:
    """The start of a record's worker (ms, this host's clock), one later than the last one of this
    process if need be: consumers started in one millisecond keep a record each."""
    with _stamps_lock:
        _stamps["last"] = max(int(time.time() * 1000), _stamps["last"] + 1)
        return _stamps["last"]


class Announcer:
    """A worker's record in the registry, refreshed every ``beat_s``: by a thread of its own
    (``start``/``stop``, ``conn`` a blocking client) or by a task of the running loop
    (``astart``/``astop``, ``conn`` an asyncio client)."""

    def __init__(self, conn: Any, queue: str | Sequence[str], wire: int | str, *,
                 beat_s: float = BEAT_S) -> None:
        self.conn = conn
        self.beat_s = beat_s
        self.expiry_ms = int(beat_s * 1000 * EXPIRY_BEATS)
        self.queues = [queue] if isinstance(queue, str) else list(queue)
        self.queue = self.queues[0]
        self._wire = wire_of(wire)
        self._executor: Any = None  # the first queue's, once ``serves`` names it
        self._born = time.monotonic()
        self.key = f"{WORKER_PREFIX}{socket.gethostname()}:{os.getpid()}:{_start_stamp()}"
        self._lock = threading.Lock()
        # The jobs in hand, by id: since when (monotonic s), in the order they began.
        self._jobs: dict[str, float] = {}
        self._done = 0
        self._failed = 0
        self._refused = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        # The park's record (see ``queue_parked``): writes are serialised by these locks, so a
        # beat of the thread (or task) never lands after the park's own and shortens its expiry.
        self._write_lock = threading.Lock()
        self._alock: asyncio.Lock | None = None
        self._parked = False  # the consumer parks: the thread's (task's) beats are skipped
        self._shown_parked = False  # the record on the server was written by a park
        self._lapses_at = 0.0  # when the record on the server expires, at the soonest (monotonic)
        self._writing_lapse = 0.0  # the same, for the parked write in flight
        # The server's clock less the monotonic one (ms), as read by the last TIME.
        self._offset_ms = time.time() * 1000 - time.monotonic() * 1000

    def serves(self, queue: Any) -> None:
        """The record shows the wire ``queue`` (the consumer's first, blocking or asyncio)
        really runs on: on wire auto, ``6`` once the server ran a native command, ``5`` once it
        refused one, ``auto`` only before the first reply."""
        self._executor = queue.executor

    @property
    def wire(self) -> str:
        """The record's wire: ``5``, ``6`` or ``auto``."""
        executor = self._executor
        return (self._wire if executor is None else executor.wire_in_use).label

    # what the worker does -----------------------------------------------------------------

    def began(self, job: Job) -> None:
        with self._lock:
            self._jobs.pop(job.id, None)
            self._jobs[job.id] = time.monotonic()

    def ended(self, job: Job | None = None, *, failed: bool) -> None:
        """``job`` ended (None: every job in hand); the record shows the latest job still in
        hand, if any (several run at once on the asyncio consumer)."""
        with self._lock:
            if job is None:
                self._jobs.clear()
            else:
                self._jobs.pop(job.id, None)
            if failed:
                self._failed += 1
            else:
                self._done += 1

    @property
    def _job(self) -> tuple[str, float] | None:
        """The latest job in hand (id, since), shown as the worker's job."""
        if not self._jobs:
            return None
        job_id = next(reversed(self._jobs))
        return job_id, self._jobs[job_id]

    def track(self, handler: Callable[[Job], object]) -> Callable[[Job], object]:
        """``handler`` noting each job it runs here: in hand while it runs (an ``async def``
        handler's until its awaitable ends), then done, or failed (it raised, or asked for a
        retry or a rejection)."""

        if inspect.iscoroutinefunction(handler):
            async def tracked_async(job: Job) -> object:
                self.began(job)
                return await self._finish(job, handler(job))

            return tracked_async

        def tracked(job: Job) -> object:
            self.began(job)
            try:
                result = handler(job)
            except BaseException:
                self.ended(job, failed=True)
                raise
            if result is not None and inspect.isawaitable(result):
                return self._finish(job, result)
            self.ended(job, failed=isinstance(result, RetryIn | Reject))
            return result

        return tracked

    async def _finish(self, job: Job, result: Awaitable[object]) -> object:
        try:
            value = await result
        except BaseException:
            self.ended(job, failed=True)
            raise
        self.ended(job, failed=isinstance(value, RetryIn | Reject))
        return value

    # the beat -----------------------------------------------------------------------------

    def start(self) -> None:
        """Write the record now, then every ``beat_s`` on a daemon thread (it dies with the
        process)."""
        self.beat()
        self._thread = threading.Thread(target=self._run, name="echomq-announcer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and delete the record (a clean stop)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._write(self._remove)

    def _run(self) -> None:
        while not self._stopped.wait(self.beat_s):
            self.beat()

    def beat(self) -> bool:
        """Write the record with a fresh expiry; False if the server refused."""
        return self._write(self._refresh)

    def fields(self, server_ms: int, expiry_ms: int | None = None) -> dict[str, str | int]:
        """The record's fields, its times on the server's clock ``server_ms`` (now); ``parked``
        is 1 when a park writes it, ``expiry_ms`` how long after ``beat_ms`` it expires."""
        with self._lock:
            job, done, failed = self._job, self._done, self._failed
            running = len(self._jobs)
        now = time.monotonic()
        since = "" if job is None else server_ms - int((now - job[1]) * 1000)
        return {"host": socket.gethostname(), "pid": os.getpid(), "queue": self.queue,
                "queues": json.dumps(self.queues), "wire": self.wire,
                "started_ms": server_ms - int((now - self._born) * 1000),
                "job": "" if job is None else job[0], "job_since_ms": since,
                "done": done, "failed": failed, "beat_ms": server_ms, "running": running,
                "parked": int(self._parked),
                "expiry_ms": self.expiry_ms if expiry_ms is None else expiry_ms}

    def _refresh(self) -> None:
        with self._write_lock:
            if self._parked:
                return  # the park rewrites the record
            sent = time.monotonic()
            server_time = self.conn.time()
            with self.conn.pipeline(transaction=False) as pipe:
                self._queue_refresh(pipe, server_time)
                pipe.execute()
            self._written(sent + self.expiry_ms / 1000, parked=False)

    def _remove(self) -> None:
        with self.conn.pipeline(transaction=False) as pipe:
            self._queue_remove(pipe)
            pipe.execute()

    def _queue_refresh(self, pipe: Any, server_time: Any) -> None:
        """The record's rewrite, queued on ``pipe`` (either library, blocking or asyncio)."""
        server_ms = time_ms(server_time)
        self._offset_ms = server_ms - time.monotonic() * 1000
        self._queue_write(pipe, server_ms, self.expiry_ms)
        pipe.sadd(WORKERS_KEY, self.key)

    def _queue_write(self, pipe: Any, server_ms: int, expiry_ms: int) -> None:
        """The record's ``HSET`` and ``PEXPIRE``, as bare commands (on a pipeline, or on a
        ``CommandList`` a cluster consumer's read sends node by node)."""
        fields = self.fields(server_ms, expiry_ms)
        pipe.execute_command("HSET", self.key, *[part for pair in fields.items() for part in pair])
        pipe.execute_command("PEXPIRE", self.key, expiry_ms)

    def _written(self, lapses_at: float, *, parked: bool) -> None:
        self._lapses_at, self._shown_parked = lapses_at, parked

    # the park's record: the consumer's parks carry it, both shells ---------------------------

    def queue_parked(self, pipe: Any, cap_ms: int) -> int:
        """The consumer parks (the beats of the thread or task stop until ``unparked``); queue
        on ``pipe``, the flush of its read before a park of at most ``cap_ms``, the record's
        rewrite (``HSET``, ``PEXPIRE``: it expires ``PARKED_EXPIRY_CAPS`` caps later) when the
        record on the server is not a parked one or has under ``PARKED_REWRITE_CAPS`` caps left.
        How many replies it adds to the flush (0 or 2), for ``parked_written``. Its times are
        the server's clock as of the last ``TIME``, carried on by the monotonic clock."""
        with self._write_lock:
            self._parked = True
            now = time.monotonic()
            left_s = self._lapses_at - now
            if self._shown_parked and left_s >= PARKED_REWRITE_CAPS * cap_ms / 1000:
                return 0
            expiry_ms = PARKED_EXPIRY_CAPS * cap_ms
            self._queue_write(pipe, int(self._offset_ms + now * 1000), expiry_ms)
            self._writing_lapse = now + expiry_ms / 1000
            return 2

    def parked_written(self, replies: Sequence[Any]) -> bool:
        """Note the replies (``HSET``, ``PEXPIRE``; errors as values) to ``queue_parked``'s
        commands; True when the record was written afresh (it had expired, and a reader may
        have taken it off ``emq:workers``): ``relist`` puts it back. A refusal is logged once
        and tried again at the next rewrite."""
        self._written(self._writing_lapse, parked=True)
        refused = next((reply for reply in replies if isinstance(reply, Exception)), None)
        if refused is not None:
            self._refusal(refused)
            return False
        self._refused = False
        return int(replies[0]) > 0

    def relist(self) -> bool:
        """Put the record's key back on ``emq:workers`` (blocking client)."""
        return self._write(lambda: self.conn.sadd(WORKERS_KEY, self.key))

    async def arelist(self) -> bool:
        """As ``relist``, on the asyncio client; on a blocking one (a worker process's record,
        which a thread beats while its asyncio consumer is busy) from a thread of the loop's
        executor, so the loop is not held."""
        if not inspect.iscoroutinefunction(self.conn.execute_command):
            return await asyncio.to_thread(self.relist)

        async def add() -> None:
            await self.conn.sadd(WORKERS_KEY, self.key)

        return await self._awrite(add)

    async def aqueue_parked(self, pipe: Any, cap_ms: int) -> int:
        """``queue_parked`` on an asyncio consumer, once the task's beat in flight is done."""
        async with self._async_lock():
            return self.queue_parked(pipe, cap_ms)

    def unparked(self) -> None:
        """The consumer's park ended: the thread's (task's) beats go on."""
        self._parked = False

    def _async_lock(self) -> asyncio.Lock:
        if self._alock is None:
            self._alock = asyncio.Lock()
        return self._alock

    def _queue_remove(self, pipe: Any) -> None:
        pipe.delete(self.key)
        pipe.srem(WORKERS_KEY, self.key)

    def _write(self, action: Callable[[], None]) -> bool:
        try:
            action()
        except twins(redis.RedisError) as exc:
            return self._refusal(exc)
        self._refused = False
        return True

    def _refusal(self, exc: BaseException) -> bool:
        if not self._refused:
            log.warning("the worker registry could not be written (%s); this worker runs "
                        "on without its record", exc)
        self._refused = True
        return False

    # the asyncio beat (``conn`` an asyncio client): a task on the running loop ----------------

    async def astart(self) -> None:
        """Write the record now, then every ``beat_s`` from a task on the running loop (a
        handler that blocks the loop holds the beat back as it holds the consumer)."""
        await self._awrite(self._arefresh)
        self._task = asyncio.create_task(self._abeats(), name="echomq-announcer")

    async def astop(self) -> None:
        """Stop beating and delete the record (a clean stop)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._awrite(self._aremove)

    async def _abeats(self) -> None:
        while True:
            await asyncio.sleep(self.beat_s)
            await self._awrite(self._arefresh)

    async def _arefresh(self) -> None:
        async with self._async_lock():
            if self._parked:
                return  # the park rewrites the record
            sent = time.monotonic()
            server_time = await self.conn.time()
            async with self.conn.pipeline(transaction=False) as pipe:
                self._queue_refresh(pipe, server_time)
                await pipe.execute()
            self._written(sent + self.expiry_ms / 1000, parked=False)

    async def _aremove(self) -> None:
        async with self.conn.pipeline(transaction=False) as pipe:
            self._queue_remove(pipe)
            await pipe.execute()

    async def _awrite(self, action: Callable[[], Awaitable[None]]) -> bool:
        try:
            await action()
        except twins(redis.RedisError) as exc:
            return self._refusal(exc)
        self._refused = False
        return True


def _tracking(consumer: Any) -> tuple[Announcer, Callable[[Job], Any]]:
    """A record of ``consumer``'s (a blocking or asyncio consumer: its queues, the first's
    client and wire), which its parks carry (``consumer.announcer``), and its handler before
    tracking; the handler tracked."""
    first = consumer.queues[0]
    announcer = Announcer(first.conn, [queue.name for queue in consumer.queues], first.wire)
    announcer.serves(first)
    handler = consumer.handler
    consumer.handler = announcer.track(handler)
    consumer.announcer = announcer
    return announcer, handler


def _untracking(consumer: Any, handler: Callable[[Job], Any]) -> None:
    consumer.handler = handler
    consumer.announcer = None


@contextlib.contextmanager
def announced(consumer: Any, announce: bool = True) -> Iterator[None]:
    """``consumer`` (a blocking one) listed in the registry of live workers while the block
    runs, the jobs its handler runs shown in hand; nothing when ``announce`` is False."""
    if not announce:
        yield
        return
    announcer, handler = _tracking(consumer)
    announcer.start()
    try:
        yield
    finally:
        _untracking(consumer, handler)
        announcer.stop()


@contextlib.asynccontextmanager
async def announced_async(consumer: Any, announce: bool = True) -> AsyncIterator[None]:
    """As ``announced``, for an asyncio consumer: its client beats from a task of the loop."""
    if not announce:
        yield
        return
    announcer, handler = _tracking(consumer)
    await announcer.astart()
    try:
        yield
    finally:
        _untracking(consumer, handler)
        await announcer.astop()
