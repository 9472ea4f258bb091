"""Supervised worker processes: ``echomq worker MODULE:HANDLER --queue Q --concurrency N``.

``--queue`` may repeat: one consumer serves the queues in strict priority order, the first
first. The target may name an App (anything with ``handler`` and ``queues``) instead of a
handler: its ``handler`` runs the jobs and its queues are served unless ``--queue`` says
otherwise; an App with ``async def`` tasks runs on the asyncio consumer with
``--async-concurrency`` jobs in flight per process, its plain tasks (if any) in a pool of
threads beside them. Each worker process calls the App's
``worker_started(spec)`` once it reached the server and ``worker_stopping()`` as it stops (also
before it exits to be replaced after a job overran its time limit), when the App has them.

Before any process starts, the server is checked: reachable, and (``wire=6``) with trafikey
loaded; if not, the command exits 1 with one line saying why. The supervisor then runs N consumer
processes, each a fresh interpreter that dies with the supervisor: the die-with-parent signal
(Linux ``PR_SET_PDEATHSIG``, SIGTERM) is set between fork and exec, and a child whose parent is
already gone by then ends at once — so no worker outlives a supervisor killed at any moment.

A child that dies is restarted. One that dies at start (before it reached the server, or within
``QUICK_DEATH_S`` of it without having started a job: an import error, a refused connection, a
server error that cannot heal) is restarted after a growing pause; after ``START_TRIES`` such
deaths in a row the supervisor stops the others and exits 1 with the last reason in one line. A
child that started a job is never a failed start, however soon it died (a job that kills its
process, retried on a short lease): it is replaced at once, and that job alone is charged the
attempts. A child that exits because a job overran ``--time-limit`` (the attempt already failed)
is replaced at once, and so is one whose handler raised SystemExit or KeyboardInterrupt (a
library calling ``sys.exit()``): that attempt is failed and sent first, and the consumer stops.

On SIGTERM or SIGINT the supervisor asks every child to stop: each stops claiming, lets its
running job finish and exits; a child still running after the grace period is killed, and its job
comes back through its lease. The supervisor then exits 0. A second signal kills the children at
once. A child whose supervisor died stops the same way (its running job finishes first).

Each child announces itself in the registry of workers (``echomq.workers``) while it runs, and
takes its record off on a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import wait
from types import FrameType
from typing import Any

from echomq import aio
from echomq.childsignals import SignalWaiter
from echomq.clients import async_twin
from echomq.connection import client_like, redis_from_url
from echomq.consumer import Consumer, refuse_unsupported
from echomq.embedded import die_with_parent
from echomq.errors import EchoMQError, TrafikeyMissing
from echomq.executors import executor_for
from echomq.loop import PARK_CAP_MS, PREFETCH
from echomq.queue import DEFAULT_LEASE_MS, Job, Queue
from echomq.transitions import CLAIM
from echomq.workers import Announcer

log = logging.getLogger("echomq")

LOG_FORMAT = "%(asctime)s %(levelname)s echomq[%(process)d]: %(message)s"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_ENDED = signal.SIGUSR1  # a child's consumer thread ended by itself
_OVERRUN = signal.SIGUSR2  # a child's job overran its time limit
EXIT_OVERRUN = 3  # a child's exit code after a job overran its time limit
QUICK_DEATH_S = 1.0
# Beyond the time limit, how long a process whose plain task overran waits for its other jobs
# in flight to be settled before it exits anyway.
DRAIN_SLACK_S = 10.0
START_TRIES = 3
MAX_BACKOFF_S = 10.0

# The child's program: the supervisor's import path, then the worker's entry point. What it needs
# comes in the environment (not in argv, which any local user can read: the URL may hold a
# password) and is removed from it at once, so the handler's own subprocesses do not inherit it.
_BOOT_VARIABLE = "ECHOMQ_WORKER_BOOT"
_BOOT = (f"import json, os, sys; boot = json.loads(os.environ.pop({_BOOT_VARIABLE!r})); "
         "sys.path[:] = boot['path']; "
         "from echomq.worker import child_main; child_main(boot['spec'], boot['status'])")


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs to build its consumer (sent to it as JSON).

    ``url``: the server; None serves the target App's own (its connection rebuilt in each
    process: ``connect``). ``queue``: one queue, or several in priority order. ``max_attempts``:
    None keeps the queue's. ``time_limit_ms``: None for no limit. ``async_concurrency``: None
    runs the blocking consumer; N the asyncio one with N handlers in flight (an App with async
    tasks; its plain ones run in threads, N at most)."""

    handler: str
    queue: str | tuple[str, ...]
    url: str | None
    lanes: bool = False
    wire: int = 5
    lease_ms: int = DEFAULT_LEASE_MS
    retry_delay_ms: int = 1_000
    max_attempts: int | None = None
    park_cap_ms: int = PARK_CAP_MS
    on_ack: str | None = None
    log_level: str = "INFO"
    time_limit_ms: int | None = None
    prefetch: int = PREFETCH
    async_concurrency: int | None = None
    metrics_dir: str | None = None  # count jobs in prometheus_client files there
    debug: bool = False  # a start failure logs its traceback, not one line

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues served, in priority order."""
        return (self.queue,) if isinstance(self.queue, str) else tuple(self.queue)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        fields = json.loads(text)
        if isinstance(fields["queue"], list):
            fields["queue"] = tuple(fields["queue"])
        return cls(**fields)


class WorkersFailed(EchoMQError):
    """The worker processes kept failing at start; the supervisor gave up."""


def load_object(target: str) -> Any:
    """Import ``module:attribute`` (attribute may be dotted) and return it."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:NAME, got {target!r}")
    found: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def load_callable(target: str) -> Callable[..., Any]:
    """Import ``module:attribute`` and return it, if it is callable."""
    found = load_object(target)
    if not callable(found):
        raise TypeError(f"{target} is not callable")
    return found  # type: ignore[no-any-return]


def is_app(found: Any) -> bool:
    """Whether a worker's target is an App (its ``handler`` runs the jobs of its ``queues``)
    rather than a handler."""
    return hasattr(found, "handler") and hasattr(found, "queues")


def load_target(target: str) -> Any:
    """The App or the handler ``target`` names; TypeError for anything else."""
    found = load_object(target)
    if not is_app(found) and not callable(found):
        raise TypeError(f"{target} is neither a handler nor an App")
    return found


def app_queues(app: Any) -> tuple[str, ...]:
    """The names of the queues an App's tasks use, its default queue first."""
    names = [getattr(queue, "name", queue) for queue in app.queues]
    if isinstance(app.queues, dict):
        names = list(app.queues)
    first = getattr(getattr(app, "queue", None), "name", None)
    if first in names:
        names.remove(first)
        names.insert(0, first)
    return tuple(str(name) for name in names)


def runs_async(app: Any) -> bool:
    """Whether ``app`` has an ``async def`` task: then the asyncio consumer serves it, running
    its plain tasks (if any) in threads beside the async ones."""
    tasks = getattr(app, "tasks", None)
    found = list(tasks.values()) if isinstance(tasks, dict) else list(tasks or ())
    return hasattr(app, "async_handler") and any(getattr(task, "is_async", False)
                                                 for task in found)


def check_spec(spec: WorkerSpec) -> None:
    """Fail before any process starts: the target and hook import, the queues are given,
    the wire can drain."""
    target = load_target(spec.handler)
    if spec.url is None and getattr(target, "conn", None) is None:
        raise ValueError(f"no server to serve: {spec.handler} has no connection of its own; "
                         "give a URL")
    if spec.on_ack:
        load_callable(spec.on_ack)
    if not spec.queues or not all(spec.queues):
        raise ValueError("no queue to serve: give --queue (or a target App with queues)")
    if spec.async_concurrency is not None and spec.async_concurrency < 1:
        raise ValueError("async_concurrency must be at least 1")
    executor_for(spec.wire)  # 5 or 6
    refuse_unsupported(spec.wire, spec.lanes)


def check_server(conn: Any, wire: int) -> None:
    """Raise what keeps this server from serving a worker at all: no connection (a redis
    error), or for ``wire=6`` no trafikey (TrafikeyMissing). Changes nothing."""
    conn.ping()
    if wire == 6 and CLAIM.native is not None:
        # One string, so redis-py's COMMAND parser (which fails on a nil entry) is not used.
        found = conn.execute_command("COMMAND INFO", CLAIM.native)
        if not found or found[0] is None:
            raise TrafikeyMissing(CLAIM.native)


def connect(spec: WorkerSpec, target: Any = None) -> Any:
    """A new blocking client to the server the workers serve: ``spec.url``'s, or (no URL) the
    target App's own connection rebuilt, of its client library (``echomq.connection.client_like``);
    ``target``: the App (None: loaded)."""
    if spec.url is not None:
        return redis_from_url(spec.url)
    app = load_target(spec.handler) if target is None else target
    return client_like(app.conn)


def probe_server(spec: WorkerSpec, target: Any = None) -> None:
    """``check_server`` on a connection of its own, closed after."""
    conn = connect(spec, target)
    try:
        check_server(conn, spec.wire)
    finally:
        conn.close()


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
    the worker's record in the registry."""
    return {"announce": False, "lanes": spec.lanes, "lease_ms": spec.lease_ms,
            "retry_delay_ms": spec.retry_delay_ms, "park_cap_ms": spec.park_cap_ms,
            "on_ack": load_callable(spec.on_ack) if spec.on_ack else None,
            "time_limit_ms": spec.time_limit_ms, "on_overrun": on_overrun,
            "prefetch": spec.prefetch}


def queue_options(spec: WorkerSpec, target: Any, name: str) -> dict[str, Any]:
    """The options of the worker's queue ``name``: an App's own queue of that name lends its
    retention (how long results stay) and attempt limit; ``--max-attempts`` sets the limit,
    so the crash path (recover) and the failure path (retry) count against the same number."""
    options: dict[str, Any] = {}
    own = app_queue(target, name)
    for option in ("retention_ms", "max_attempts"):
        value = getattr(own, option, None)
        if isinstance(value, int) and not isinstance(value, bool):
            options[option] = value
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
    queues = [Queue(conn, name, wire=spec.wire, **queue_options(spec, target, name))
              for name in spec.queues]
    handler = handler_of(target, spec)
    if spec.metrics_dir is not None and not is_app(target):  # an App counts through its hooks
        handler = _counted(handler, spec, queues[0].max_attempts)
    handler = _tracked(handler, announcer, on_job)
    return Consumer(queues if len(queues) > 1 else queues[0], handler,
                    **consumer_options(spec, on_overrun))


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
                 target: Any = None) -> None:
        self.spec = spec
        self.target = target
        self.handler = handler
        self.replaced_after = replaced_after
        self.queue = Queue(connect(spec, target), spec.queues[0], wire=spec.wire)
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
        import redis.asyncio as aredis

        client = async_twin(self.queue.conn) if self.spec.url is None \
            else aredis.Redis.from_url(self.spec.url)
        in_flight = self.spec.async_concurrency or 1
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(
            max_workers=in_flight + 1, thread_name_prefix="echomq-task"))
        try:
            queues = [aio.Queue(client, name, wire=self.spec.wire,
                                **queue_options(self.spec, self.target, name))
                      for name in self.spec.queues]
            self._consumer = aio.Consumer(queues, self.handler,
                                          concurrency=self.spec.async_concurrency or 1,
                                          **consumer_options(self.spec, self._overran))
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
        _ask_for_replacement(job)

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
    return AsyncWorkerLoop(spec, handler, functools.partial(_ran_in_thread, target), target)


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
    from echomq.metrics import instrument  # only now: after PROMETHEUS_MULTIPROC_DIR is set

    return instrument(handler, ",".join(spec.queues), task=spec.handler,
                      max_attempts=max_attempts)


def _count_app(target: Any, spec: WorkerSpec) -> None:
    from echomq.metrics import counted_app  # only now: after PROMETHEUS_MULTIPROC_DIR is set

    if not counted_app(target):
        log.warning("%s has no task hooks to count its jobs through: the metrics show the "
                    "queues' depths only", spec.handler)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)


# the child ---------------------------------------------------------------------------------


class _StatusPipe:
    """The child's side of its status pipe: ``ready <monotonic s>`` once the server answered,
    ``ran`` when its first job starts, ``ended <monotonic s>`` when its loop ended by itself,
    ``failed <reason>`` before a failure exit. CLOCK_MONOTONIC is the same for every process;
    the supervisor times a death from ``ended`` when there is one, not from the exit, which
    comes after the interpreter's own shutdown (half a second, more on a busy machine)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._ran = False
        os.set_inheritable(fd, False)  # the handler's own subprocesses do not hold it

    def ready(self) -> None:
        self._write(f"ready {time.monotonic()!r}")

    def ran(self) -> None:
        """A job starts here: from now on, this child's death is no failed start."""
        if not self._ran:
            self._ran = True
            self._write("ran")

    def ended(self) -> None:
        self._write(f"ended {time.monotonic()!r}")

    def failed(self, exc: BaseException) -> None:
        self._write("failed " + start_failure(exc))

    def _write(self, line: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, (line + "\n").encode(errors="backslashreplace"))


START_FAILURE_CAP = 500


def start_failure(exc: BaseException) -> str:
    """What a worker process's failed start says, in one line: ``Type: message`` and where it
    was raised (the file and line of its last frame, or of a syntax error); its traceback only
    in the log of a worker run with ``--debug``."""
    message = " ".join(str(exc).split())
    if len(message) > START_FAILURE_CAP:
        message = message[:START_FAILURE_CAP] + "…"
    head = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{head} (at {exc.filename}:{exc.lineno})"
    return f"{head} (at {frames[-1].filename}:{frames[-1].lineno})" if frames else head


def child_main(spec_json: str, status_fd: int) -> None:
    """A worker process: the consumer loop runs in a thread; this one waits for a signal
    (``SignalWaiter``, which blocks none: what a handler starts inherits no blocked signal):
    a stop, the loop's thread ending by itself (``SIGUSR1``), or a job past its time limit
    (``SIGUSR2``)."""
    signals = SignalWaiter((*STOP_SIGNALS, _ENDED, _OVERRUN))
    status = _StatusPipe(status_fd)
    spec = WorkerSpec.from_json(spec_json)
    configure_logging(spec.log_level)
    if spec.metrics_dir is not None:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = spec.metrics_dir
    try:
        target = load_target(spec.handler)
        announcer = Announcer(connect(spec, target), spec.queues, spec.wire)
        consumer = build_worker_loop(spec, target, _ask_for_replacement, announcer, status.ran)
        check_server(consumer.queue.conn, spec.wire)
        call_app(target, "worker_started", spec)
    except Exception as exc:
        log.error("worker could not start: %s", start_failure(exc), exc_info=spec.debug)
        status.failed(exc)
        sys.exit(1)
    status.ready()
    announcer.start()
    try:
        code = _serve(consumer, status, announcer, target, signals, spec.debug)
    finally:
        _app_stopping(target)
    sys.exit(code)


def _app_stopping(target: Any) -> None:
    try:
        call_app(target, "worker_stopping")
    except Exception:
        log.exception("the app's worker_stopping failed")


def _serve(consumer: WorkerLoop, status: _StatusPipe, announcer: Announcer,
           target: Any, signals: SignalWaiter, debug: bool = False) -> int:
    failed: list[BaseException] = []
    thread = threading.Thread(target=_run_loop, args=(consumer, failed, debug),
                              name="echomq-consumer")
    thread.start()
    received = signals.wait()
    if received == _ENDED:
        status.ended()
    if received == _ENDED and not failed:
        log.warning("the consumer stopped by itself (a handler raised SystemExit or "
                    "KeyboardInterrupt); the supervisor replaces this worker")
    consumer.stop()
    if received == _OVERRUN:
        if isinstance(consumer, AsyncWorkerLoop):
            _drain_beside_the_overrun(consumer)
        _exit_to_be_replaced(announcer, target)
    thread.join()
    announcer.stop()
    if failed:
        status.failed(failed[0])
    return 1 if received == _ENDED or failed else 0


def _exit_to_be_replaced(announcer: Announcer, target: Any) -> None:
    """Exit after a job overran its time limit, without waiting for the job's thread (it may
    never return); the App hears ``worker_stopping`` first, as on any other way out."""
    log.warning("exiting after a job overran its time limit; the supervisor replaces this "
                "worker")
    announcer.stop()
    _app_stopping(target)
    logging.shutdown()
    os._exit(EXIT_OVERRUN)


def _ask_for_replacement(job: Job) -> None:
    os.kill(os.getpid(), _OVERRUN)


def _drain_beside_the_overrun(consumer: AsyncWorkerLoop) -> None:
    """Before a process whose plain task overran exits: the consumer, stopped, lets the other
    jobs in flight end (each within its own time limit) and hands the prefetched ones back,
    so none of them is cut short and charged an attempt for it."""
    limit_s = (consumer.spec.time_limit_ms or 0) / 1000
    if not consumer.drained.wait(limit_s + DRAIN_SLACK_S):
        log.warning("jobs still in flight %.1f s after a time limit overran; exiting anyway, "
                    "they come back through their leases", limit_s + DRAIN_SLACK_S)


def _run_loop(consumer: WorkerLoop, failed: list[BaseException], debug: bool = False) -> None:
    """Run the loop; when it ends, for whatever reason, tell the main thread (``SIGUSR1``): if
    no stop signal came first, this worker exits to be replaced (a handler that raised
    SystemExit stops the loop, and a worker that no longer consumes must not look alive). The
    crash is logged in one line (a server's refusal ends a start this way), its traceback only
    with ``debug``."""
    try:
        consumer.run()
    except BaseException as exc:
        failed.append(exc)
        log.error("consumer crashed: %s%s", start_failure(exc),
                  "" if debug else " (--debug logs its traceback)", exc_info=debug)
    finally:
        os.kill(os.getpid(), _ENDED)


# the supervisor ----------------------------------------------------------------------------


@dataclass
class _Slot:
    """One of the N places a worker process runs in."""

    index: int
    process: subprocess.Popen[bytes] | None = None
    pidfd: int = -1  # readable once the process ended
    status: int = -1  # the read end of its status pipe
    started: float = 0.0
    restart_at: float = 0.0
    backoff: float = 0.0
    failures: int = 0  # deaths at start in a row


@dataclass(frozen=True)
class _Exit:
    """How a child ended: its exit code, when it reached the server (if it did), and why."""

    code: int
    ready_at: float | None
    reason: str
    ran: bool = False  # it started a job
    ended_at: float | None = None  # when its loop ended by itself, if it did

    def quick(self, now: float) -> bool:
        """Whether it died before reaching the server, or within QUICK_DEATH_S of it."""
        if self.ready_at is None:
            return True
        died = self.ended_at if self.ended_at is not None else now
        return died - self.ready_at < QUICK_DEATH_S


class Supervisor:
    """Runs ``concurrency`` worker processes of ``spec`` until SIGTERM or SIGINT."""

    def __init__(self, spec: WorkerSpec, concurrency: int = 1, grace_s: float = 30.0) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.spec = spec
        self.grace_s = grace_s
        self.slots = [_Slot(index) for index in range(concurrency)]
        self.restarts = 0
        self.failure: str | None = None
        self._signals, self._signal_sink = socket.socketpair()

    def run(self) -> int:
        """Supervise until a stop signal; 0 once every child is gone. Raises WorkersFailed
        (after stopping the rest) when a child keeps failing at start. Main thread only."""
        previous = self._install_signals()
        try:
            log.info("supervisor started: %d worker(s) on queue %s", len(self.slots),
                     ", ".join(self.spec.queues))
            for slot in self.slots:
                self._start(slot)
            self._supervise()
            self._shut_down()
        finally:
            self._restore_signals(previous)
        if self.failure is not None:
            raise WorkersFailed(self.failure)
        log.info("supervisor stopped")
        return 0

    # signals ------------------------------------------------------------------------------

    def _install_signals(self) -> tuple[int, dict[int, Any]]:
        self._signal_sink.setblocking(False)
        self._signals.setblocking(False)
        previous_fd = signal.set_wakeup_fd(self._signal_sink.fileno(), warn_on_full_buffer=False)
        previous = {int(sig): signal.signal(sig, _note_signal) for sig in STOP_SIGNALS}
        return previous_fd, previous

    def _restore_signals(self, previous: tuple[int, dict[int, Any]]) -> None:
        previous_fd, handlers = previous
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(previous_fd)

    def _signalled(self) -> bool:
        try:
            received = self._signals.recv(64)
        except BlockingIOError:
            return False
        return any(number in {int(sig) for sig in STOP_SIGNALS} for number in received)

    # children -----------------------------------------------------------------------------

    def _start(self, slot: _Slot) -> None:
        status, status_sink = os.pipe()
        os.set_blocking(status, False)
        boot = {"path": sys.path, "spec": self.spec.to_json(), "status": status_sink}
        argv = [sys.executable, "-c", _BOOT, f"echomq-worker-{slot.index}"]
        try:
            process = subprocess.Popen(argv, pass_fds=(status_sink,),
                                       env={**os.environ, _BOOT_VARIABLE: json.dumps(boot)},
                                       preexec_fn=functools.partial(die_with_parent,
                                                                    os.getpid()))
        except BaseException:
            os.close(status)
            raise
        finally:
            os.close(status_sink)
        slot.process, slot.status, slot.started = process, status, time.monotonic()
        slot.pidfd = os.pidfd_open(process.pid)
        log.info("worker %d started (pid %s)", slot.index, process.pid)

    def _supervise(self) -> None:
        while self.failure is None:
            ready = wait([*self._pidfds(), self._signals], timeout=self._next_restart_in())
            if self._signals in ready and self._signalled():
                return
            for slot in self.slots:
                self._reap(slot)
                if self.failure is None and slot.process is None \
                        and time.monotonic() >= slot.restart_at:
                    self._restart(slot)

    def _pidfds(self) -> list[int]:
        return [slot.pidfd for slot in self.slots if slot.process is not None]

    def _next_restart_in(self) -> float | None:
        waiting = [slot.restart_at for slot in self.slots if slot.process is None]
        return max(0.0, min(waiting) - time.monotonic()) if waiting else None

    def _reap(self, slot: _Slot) -> None:
        """Note a child that died and when to start the next one in its place."""
        process = slot.process
        if process is None or process.poll() is None:
            return
        ended = self._release(slot, process.returncode)
        log.warning("worker %d (pid %s) exited with %s", slot.index, process.pid, ended.code)
        if ended.code == EXIT_OVERRUN:
            slot.restart_at = time.monotonic()  # a replacement, not a failure
        elif not ended.ran and ended.quick(time.monotonic()):
            self._failed_at_start(slot, ended.reason)
        else:
            slot.failures, slot.backoff, slot.restart_at = 0, 0.0, time.monotonic()

    def _release(self, slot: _Slot, code: int) -> _Exit:
        """Close the ended child's descriptors; what its status pipe said."""
        ready_at, reason, ran, ended_at = None, _exit_reason(code), False, None
        with contextlib.suppress(BlockingIOError):
            for line in os.read(slot.status, 65536).decode(errors="replace").splitlines():
                word, _, rest = line.partition(" ")
                if word == "ready":
                    ready_at = float(rest)
                elif word == "ran":
                    ran = True
                elif word == "ended":
                    ended_at = float(rest)
                elif word == "failed":
                    reason = rest
        os.close(slot.status)
        os.close(slot.pidfd)
        if self.spec.metrics_dir is not None and slot.process is not None:
            from echomq.metrics import process_ended

            process_ended(slot.process.pid, self.spec.metrics_dir)
        slot.process, slot.status, slot.pidfd = None, -1, -1
        return _Exit(code, ready_at, reason, ran, ended_at)

    def _failed_at_start(self, slot: _Slot, reason: str) -> None:
        slot.failures += 1
        if slot.failures >= START_TRIES:
            self.failure = (f"worker {slot.index} failed at start {slot.failures} times in a "
                            f"row; giving up: {reason}")
            log.error("%s", self.failure)
            return
        slot.backoff = min(max(slot.backoff * 2, 0.5), MAX_BACKOFF_S)
        slot.restart_at = time.monotonic() + slot.backoff
        log.warning("worker %d failed at start (%s); next try in %.1f s", slot.index, reason,
                    slot.backoff)

    def _restart(self, slot: _Slot) -> None:
        self._start(slot)
        self.restarts += 1
        log.warning("worker restarted: worker %d is now pid %s", slot.index,
                    slot.process.pid if slot.process else None)

    def _shut_down(self) -> None:
        """Ask every child to stop, wait out the grace period, then kill the rest."""
        running = [slot for slot in self.slots if slot.process is not None]
        log.info("stopping %d worker(s); grace %.1f s", len(running), self.grace_s)
        for slot in running:
            _signal(slot, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while (alive := [slot for slot in running if _alive(slot)]):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready = wait([slot.pidfd for slot in alive] + [self._signals], timeout=left)
            if self._signals in ready and self._signalled():
                log.warning("second signal: killing the workers now")
                break
        for slot in running:
            if _alive(slot):
                log.warning("worker pid %s still running after the grace period: killed; "
                            "its job comes back when its lease expires", _pid(slot))
                _signal(slot, signal.SIGKILL)
            if slot.process is not None:
                self._release(slot, slot.process.wait())


def _exit_reason(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with {code}"


def _note_signal(signum: int, frame: FrameType | None) -> None:
    """The Python side of a stop signal: the wakeup fd carries it to the supervisor loop."""


def _pid(slot: _Slot) -> int | None:
    return slot.process.pid if slot.process is not None else None


def _alive(slot: _Slot) -> bool:
    return slot.process is not None and slot.process.poll() is None


def _signal(slot: _Slot, sig: signal.Signals) -> None:
    if _alive(slot) and slot.process is not None:
        slot.process.send_signal(sig)


def run_workers(spec: WorkerSpec, concurrency: int, grace_s: float,
                metrics_at: tuple[str, int] | None = None) -> int:
    """Check ``spec`` and the server, then supervise ``concurrency`` workers until a stop
    signal (0), or until they keep failing at start (WorkersFailed). With ``metrics_at``
    (address, port), the workers' metrics summed and the queues' depths are served there."""
    configure_logging(spec.log_level)
    check_spec(spec)
    probe_server(spec)
    if metrics_at is None:
        return Supervisor(spec, concurrency, grace_s).run()
    from echomq.metrics import serving

    with serving(spec.url or connect(spec), metrics_at[1], metrics_at[0]) as directory:
        return Supervisor(replace(spec, metrics_dir=directory), concurrency, grace_s).run()
