"""A worker process's consumer, built from its spec: the blocking consumer, or the asyncio one
behind the same ``run``/``stop`` face, with the handler wrapped to count and announce its jobs."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from echomq.consumer.blocking import Consumer
from echomq.consumer.presence import Announcer
from echomq.consumer.shell import LoopShell
from echomq.queue.blocking import Job, recorded_queue
from echomq.queue.shard_layout import recorded_shards
from echomq.worker.spec import (
    WorkerSpec,
    async_connect,
    connect,
    is_app,
    load_callable,
    load_target,
)

if TYPE_CHECKING:
    from echomq import aio

log = logging.getLogger("echomq")

ENDED_SIGNAL = signal.SIGUSR1  # a child's consumer thread ended by itself
OVERRUN_SIGNAL = signal.SIGUSR2  # a child's job overran its time limit


def ask_for_replacement(job: Job) -> None:
    """Asks this worker process to exit to be replaced (``job`` overran its time limit)."""
    os.kill(os.getpid(), OVERRUN_SIGNAL)


def handler_of(target: Any, spec: WorkerSpec) -> Callable[[Job], object]:
    """The handler a worker runs: the target itself, or its App's (``async_handler`` on the
    asyncio consumer)."""
    if not is_app(target):
        return target  # type: ignore[no-any-return]
    if spec.async_concurrency is not None:
        return target.async_handler  # type: ignore[no-any-return]
    return target.handler  # type: ignore[no-any-return]


def consumer_options(spec: WorkerSpec, on_overrun: Callable[[Job], object] | None
                     ) -> dict[str, Any]:
    """The options both consumers take from ``spec``; the process, not its consumer, keeps
    the worker's record in the registry (``carry_record``: the consumer's parks carry it)."""
    return {"announce": False, "lanes": spec.lanes, "lease_ms": spec.lease_ms,
            "retry_delay_ms": spec.retry_delay_ms, "park_cap_ms": spec.park_cap_ms,
            "on_ack": load_callable(spec.on_ack) if spec.on_ack else None,
            "time_limit_ms": spec.time_limit_ms, "on_overrun": on_overrun,
            "prefetch": spec.prefetch}


def queue_options(spec: WorkerSpec, target: Any, name: str) -> dict[str, Any]:
    """The options of the worker's queue ``name``: an App's own queue of that name lends its
    retention (how long results stay) and attempt limit; ``--max-attempts`` sets the limit,
    so the crash path (recover) and the failure path (retry) count against the same number.
    ``--events``, or an App made with ``events=True``, has every queue served append its
    events."""
    options: dict[str, Any] = {}
    own = app_queue(target, name)
    for option in ("retention_ms", "max_attempts"):
        value = getattr(own, option, None)
        if isinstance(value, int) and not isinstance(value, bool):
            options[option] = value
    if spec.events or (is_app(target) and getattr(target, "events", False) is True):
        options["events"] = True
    if spec.max_attempts is not None:
        options["max_attempts"] = spec.max_attempts
    return options


def app_queue(target: Any, name: str) -> Any:
    """The App's own queue called ``name``, if ``target`` is an App that has one."""
    queues = getattr(target, "queues", None) if is_app(target) else None
    return queues.get(name) if isinstance(queues, dict) else None


def build_consumer(spec: WorkerSpec, on_overrun: Callable[[Job], object] | None = None,
                   announcer: Announcer | None = None, target: Any = None,
                   on_job: Callable[[], None] | None = None) -> Consumer:
    """The blocking consumer ``spec`` describes; ``on_overrun(job)`` runs after a job overran
    its time limit (and its attempt was failed); ``announcer`` (the worker registry's record)
    is told of each job the handler runs; ``target``: the App or handler (None: loaded);
    ``on_job()`` is called as each job starts."""
    target = load_target(spec.handler) if target is None else target
    conn = connect(spec, target)
    queues = [recorded_queue(conn, name, wire=spec.wire, **queue_options(spec, target, name))
              for name in spec.queues]
    handler = handler_of(target, spec)
    if spec.metrics_dir is not None and not is_app(target):  # an App counts through its hooks
        handler = _counted(handler, spec, queues[0].max_attempts)
    handler = _tracked(handler, announcer, on_job)
    consumer = Consumer(queues if len(queues) > 1 else queues[0], handler,
                        **consumer_options(spec, on_overrun))
    carry_record(consumer, announcer)
    return consumer


def carry_record(consumer: LoopShell, announcer: Announcer | None) -> None:
    """Have ``consumer``'s parks carry the process's record (``announcer``), as an announced
    consumer's parks carry its own: while it parks, the record's thread sends nothing and the
    flush before each park rewrites the record when due (every other park when parks run to
    their cap), so an idle worker process costs what an idle consumer does. The record shows
    the wire the consumer's first queue runs on."""
    consumer.announcer = announcer
    if announcer is not None:
        announcer.serves(consumer.queues[0])


class AsyncWorkerLoop:
    """An ``echomq.aio.Consumer`` behind the blocking consumer's ``run``/``stop``/``stopping``
    and ``queue.conn``: ``run`` owns an event loop (on the worker's consumer thread) with a
    client of its own; ``stop`` is safe from any thread. The loop's default executor, where
    ``asyncio.to_thread`` runs an App's plain tasks, has a thread for every job in flight and
    one more, so neither a plain job nor the loop's own use of it (name lookups when the client
    reconnects) ever waits for a thread. ``drained`` is set once the consumer has stopped and
    settled what it ran (before the loop joins those threads).

    ``replaced_after(job)``: whether a job past its time limit (its attempt failed, its handler
    cancelled) means the process must be replaced — a task running on in a thread. Then the
    consumer stops claiming at once, on the loop, so no job starts after it, and the process
    asks for its replacement."""

    def __init__(self, spec: WorkerSpec, handler: Callable[[Job], object],
                 replaced_after: Callable[[Job], bool] | None = None,
                 target: Any = None, announcer: Announcer | None = None) -> None:
        self.spec = spec
        self.target = target
        self.handler = handler
        self.announcer = announcer
        self.replaced_after = replaced_after
        self.queue = recorded_queue(connect(spec, target), spec.queues[0], wire=spec.wire)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer: aio.Consumer | None = None
        self._stop_asked = threading.Event()
        self._ready = threading.Event()
        self.drained = threading.Event()

    @property
    def stopping(self) -> bool:
        return self._stop_asked.is_set()

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from echomq import aio  # only now: a blocking worker never loads the asyncio client

        client = async_connect(self.spec, self.queue.conn)
        in_flight = self.spec.async_concurrency or 1
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(
            max_workers=in_flight + 1, thread_name_prefix="echomq-task"))
        try:
            queues = [aio.Queue(client, name, wire=self.spec.wire,
                                shards=recorded_shards(self.queue.conn, name),
                                **queue_options(self.spec, self.target, name))
                      for name in self.spec.queues]
            self._consumer = aio.Consumer(queues, self.handler,
                                          concurrency=self.spec.async_concurrency or 1,
                                          **consumer_options(self.spec, self._overran))
            carry_record(self._consumer, self.announcer)
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            if self._stop_asked.is_set():
                return
            await self._consumer.run()
        finally:
            self._ready.set()
            self.drained.set()
            await client.aclose()

    def _overran(self, job: Job) -> None:
        if self.replaced_after is None or not self.replaced_after(job):
            return
        if self._consumer is not None:
            self._consumer.stop()  # on the loop's thread: nothing starts after this job
        ask_for_replacement(job)

    def stop(self) -> None:
        self._stop_asked.set()
        loop, consumer = self._loop, self._consumer
        if loop is not None and consumer is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(consumer.stop)

    def close(self) -> None:
        self.queue.conn.close()


WorkerLoop = Consumer | AsyncWorkerLoop


def build_worker_loop(spec: WorkerSpec, target: Any,
                      on_overrun: Callable[[Job], object] | None,
                      announcer: Announcer | None,
                      on_job: Callable[[], None] | None = None) -> WorkerLoop:
    """The blocking consumer, or (``async_concurrency``) the asyncio one, ``spec`` describes;
    ``on_job()`` is called as each job starts. With metrics on, an App counts its tasks through
    ``PrometheusHooks`` (added if missing)."""
    if spec.metrics_dir is not None and is_app(target):
        _count_app(target, spec)
    if spec.async_concurrency is None:
        return build_consumer(spec, on_overrun, announcer, target, on_job)
    handler = _tracked(handler_of(target, spec), announcer, on_job)
    # An async handler past its time limit is cancelled: the process, with the other jobs in
    # flight, goes on. A plain task of the App runs in a thread, which cannot be: the process
    # is replaced once the other jobs in flight are done.
    return AsyncWorkerLoop(spec, handler, functools.partial(_ran_in_thread, target), target,
                           announcer)


def _ran_in_thread(target: Any, job: Job) -> bool:
    """Whether the App ran ``job`` in a thread (``runs_in_thread``) on the asyncio consumer."""
    runs_in_thread = getattr(target, "runs_in_thread", None)
    return callable(runs_in_thread) and bool(runs_in_thread(job))


def _tracked(handler: Callable[[Job], object], announcer: Announcer | None,
             on_job: Callable[[], None] | None) -> Callable[[Job], object]:
    """``handler`` told to ``announcer`` and calling ``on_job()`` as each job starts (an
    ``async def`` handler stays one)."""
    if announcer is not None:
        handler = announcer.track(handler)
    if on_job is None:
        return handler
    note, inner = on_job, handler
    if inspect.iscoroutinefunction(inner):
        async def noted_async(job: Job) -> object:
            note()
            return await inner(job)

        return noted_async

    def noted(job: Job) -> object:
        note()
        return inner(job)

    return noted


def call_app(target: Any, name: str, *args: Any) -> None:
    """Call the App's ``name`` hook (``worker_started``, ``worker_stopping``) if it has one."""
    hook = getattr(target, name, None) if is_app(target) else None
    if callable(hook):
        hook(*args)


def _counted(handler: Callable[[Job], object], spec: WorkerSpec,
             max_attempts: int) -> Callable[[Job], object]:
    """A plain handler counted in the metrics, labelled with the worker's queues (a job does
    not say which of them it came from) and ``MODULE:HANDLER``."""
    from echomq.ops.metrics import instrument  # only now: after PROMETHEUS_MULTIPROC_DIR is set

    return instrument(handler, ",".join(spec.queues), task=spec.handler,
                      max_attempts=max_attempts)


def _count_app(target: Any, spec: WorkerSpec) -> None:
    from echomq.ops.metrics import counted_app  # only now: after PROMETHEUS_MULTIPROC_DIR is set

    if not counted_app(target):
        log.warning("%s has no task hooks to count its jobs through: the metrics show the "
                    "queues' depths only", spec.handler)
