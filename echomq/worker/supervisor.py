"""The supervisor: N worker processes started, watched and replaced, stopped on a signal."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from types import FrameType
from typing import Any

from echomq.embedded import die_with_parent
from echomq.worker.child import configure_logging
from echomq.worker.spec import (
    EXIT_OVERRUN,
    MAX_BACKOFF_S,
    QUICK_DEATH_S,
    START_TRIES,
    STOP_SIGNALS,
    WorkersFailed,
    WorkerSpec,
    check_spec,
    connect,
    probe_server,
)

log = logging.getLogger("echomq")

# The child's program: the supervisor's import path, then the worker's entry point. What it needs
# comes in the environment (not in argv, which any local user can read: the URL may hold a
# password) and is removed from it at once, so the handler's own subprocesses do not inherit it.
_BOOT_VARIABLE = "ECHOMQ_WORKER_BOOT"
_BOOT = (f"import json, os, sys; boot = json.loads(os.environ.pop({_BOOT_VARIABLE!r})); "
         "sys.path[:] = boot['path']; "
         "from echomq.worker.child import child_main; child_main(boot['spec'], boot['status'])")


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
            from echomq.ops.metrics import process_ended

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
    from echomq.ops.metrics import serving

    with serving(spec.url or connect(spec), metrics_at[1], metrics_at[0]) as directory:
        return Supervisor(replace(spec, metrics_dir=directory), concurrency, grace_s).run()
