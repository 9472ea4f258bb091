"""Supervised worker processes: ``echomq worker MODULE:HANDLER --queue Q --concurrency N``.

The supervisor runs N consumer processes (``multiprocessing``, spawned afresh) and restarts any
that dies. On SIGTERM or SIGINT it asks every child to stop: each stops claiming, lets its running
job finish and exits; a child still running after the grace period is killed, and its job comes
back through its lease. The supervisor then exits 0. A second signal kills the children at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

import redis

from echomq.consumer import Consumer, refuse_unsupported
from echomq.executors import executor_for
from echomq.queue import DEFAULT_LEASE_MS, Job, Queue

log = logging.getLogger("echomq")

LOG_FORMAT = "%(asctime)s %(levelname)s echomq[%(process)d]: %(message)s"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_ENDED = signal.SIGUSR1  # a child's consumer thread ended by itself
_PR_SET_PDEATHSIG = 1
QUICK_DEATH_S = 1.0
MAX_BACKOFF_S = 10.0


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs to build its consumer (picklable)."""

    handler: str
    queue: str
    url: str
    lanes: bool = False
    wire: int = 5
    lease_ms: int = DEFAULT_LEASE_MS
    retry_delay_ms: int = 1_000
    max_attempts: int = 5
    park_cap_ms: int = 5_000
    on_ack: str | None = None
    log_level: str = "INFO"


def load_callable(target: str) -> Callable[..., Any]:
    """Import ``module:attribute`` (attribute may be dotted) and return it."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:NAME, got {target!r}")
    found: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"{target} is not callable")
    return found  # type: ignore[no-any-return]


def check_spec(spec: WorkerSpec) -> None:
    """Fail before any process starts: the handler and hook import, the wire can drain."""
    load_callable(spec.handler)
    if spec.on_ack:
        load_callable(spec.on_ack)
    executor_for(spec.wire)  # 5 or 6
    refuse_unsupported(spec.wire, spec.lanes)


def build_consumer(spec: WorkerSpec) -> Consumer:
    queue = Queue(redis.Redis.from_url(spec.url), spec.queue, wire=spec.wire)
    handler: Callable[[Job], object] = load_callable(spec.handler)
    on_ack = load_callable(spec.on_ack) if spec.on_ack else None
    return Consumer(queue, handler, lanes=spec.lanes, lease_ms=spec.lease_ms,
                    retry_delay_ms=spec.retry_delay_ms, max_attempts=spec.max_attempts,
                    park_cap_ms=spec.park_cap_ms, on_ack=on_ack)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)


# the child ---------------------------------------------------------------------------------


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def worker_main(spec: WorkerSpec) -> None:
    """A worker process: the consumer loop runs in a thread; this one waits for a signal.

    The stop signals are blocked in every thread and taken with ``sigwait``, so a stop never
    interrupts the loop midway; the loop's thread raises ``SIGUSR1`` if it ends by itself."""
    _die_with_parent()  # a supervisor that dies takes its workers down gracefully
    signal.pthread_sigmask(signal.SIG_BLOCK, {*STOP_SIGNALS, _ENDED})
    configure_logging(spec.log_level)
    consumer = build_consumer(spec)
    failed: list[BaseException] = []
    thread = threading.Thread(target=_run_loop, args=(consumer, failed), name="echomq-consumer")
    thread.start()
    received = signal.sigwait({*STOP_SIGNALS, _ENDED})
    consumer.stop()
    thread.join()
    sys.exit(1 if received == _ENDED or failed else 0)


def _run_loop(consumer: Consumer, failed: list[BaseException]) -> None:
    try:
        consumer.run()
    except BaseException as exc:
        failed.append(exc)
        log.exception("consumer crashed")
    finally:
        if not consumer.stopping:
            os.kill(os.getpid(), _ENDED)


# the supervisor ----------------------------------------------------------------------------


@dataclass
class _Slot:
    """One of the N places a worker process runs in."""

    index: int
    process: BaseProcess | None = None
    started: float = 0.0
    restart_at: float = 0.0
    backoff: float = 0.0


class Supervisor:
    """Runs ``concurrency`` worker processes of ``spec`` until SIGTERM or SIGINT."""

    def __init__(self, spec: WorkerSpec, concurrency: int = 1, grace_s: float = 30.0) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.spec = spec
        self.grace_s = grace_s
        self.slots = [_Slot(index) for index in range(concurrency)]
        self.restarts = 0
        self._context = multiprocessing.get_context("spawn")
        self._signals, self._signal_sink = socket.socketpair()

    def run(self) -> int:
        """Supervise until a stop signal; 0 once every child is gone. Main thread only."""
        previous = self._install_signals()
        try:
            log.info("supervisor started: %d worker(s) on queue %s", len(self.slots),
                     self.spec.queue)
            for slot in self.slots:
                self._start(slot)
            self._supervise()
            self._shut_down()
            log.info("supervisor stopped")
            return 0
        finally:
            self._restore_signals(previous)

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
        process = self._context.Process(target=worker_main, args=(self.spec,),
                                        name=f"echomq-worker-{slot.index}", daemon=False)
        process.start()
        slot.process, slot.started = process, time.monotonic()
        log.info("worker %d started (pid %s)", slot.index, process.pid)

    def _supervise(self) -> None:
        while True:
            ready = wait([*self._sentinels(), self._signals], timeout=self._next_restart_in())
            if self._signals in ready and self._signalled():
                return
            for slot in self.slots:
                self._reap(slot)
                if slot.process is None and time.monotonic() >= slot.restart_at:
                    self._restart(slot)

    def _sentinels(self) -> list[int]:
        return [slot.process.sentinel for slot in self.slots if slot.process is not None]

    def _next_restart_in(self) -> float | None:
        waiting = [slot.restart_at for slot in self.slots if slot.process is None]
        return max(0.0, min(waiting) - time.monotonic()) if waiting else None

    def _reap(self, slot: _Slot) -> None:
        """Note a child that died: restart it now, or later if it keeps dying young."""
        process = slot.process
        if process is None or process.is_alive():
            return
        process.join()
        slot.process = None
        lived = time.monotonic() - slot.started
        slot.backoff = min(max(slot.backoff * 2, 0.5), MAX_BACKOFF_S) if lived < QUICK_DEATH_S \
            else 0.0
        slot.restart_at = time.monotonic() + slot.backoff
        log.warning("worker %d (pid %s) exited with %s", slot.index, process.pid,
                    process.exitcode)

    def _restart(self, slot: _Slot) -> None:
        self._start(slot)
        self.restarts += 1
        log.warning("worker restarted: worker %d is now pid %s", slot.index,
                    slot.process.pid if slot.process else None)

    def _shut_down(self) -> None:
        """Ask every child to stop, wait out the grace period, then kill the rest."""
        running = [slot.process for slot in self.slots if slot.process is not None]
        log.info("stopping %d worker(s); grace %.1f s", len(running), self.grace_s)
        for process in running:
            _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while (alive := [p for p in running if p.is_alive()]):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready = wait([p.sentinel for p in alive] + [self._signals], timeout=left)
            if self._signals in ready and self._signalled():
                log.warning("second signal: killing the workers now")
                break
        for process in running:
            if process.is_alive():
                log.warning("worker pid %s still running after the grace period: killed; "
                            "its job comes back when its lease expires", process.pid)
                _signal(process, signal.SIGKILL)
            process.join()


def _note_signal(signum: int, frame: FrameType | None) -> None:
    """The Python side of a stop signal: the wakeup fd carries it to the supervisor loop."""


def _signal(process: BaseProcess, sig: signal.Signals) -> None:
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)


def run_workers(spec: WorkerSpec, concurrency: int, grace_s: float) -> int:
    """Check ``spec``, then supervise ``concurrency`` workers until a stop signal."""
    configure_logging(spec.log_level)
    check_spec(spec)
    return Supervisor(spec, concurrency, grace_s).run()
