"""A worker process: it builds its consumer, reports to the supervisor that it reached the server,
serves until told to stop (or until its job overran, or its handler asked the process to end),
and exits with a code that says which."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

from echomq.consumer.presence import Announcer
from echomq.worker.build import (
    ENDED_SIGNAL,
    OVERRUN_SIGNAL,
    AsyncWorkerLoop,
    WorkerLoop,
    ask_for_replacement,
    build_worker_loop,
    call_app,
)
from echomq.worker.signals import SignalWaiter
from echomq.worker.spec import (
    DRAIN_SLACK_S,
    EXIT_OVERRUN,
    LOG_FORMAT,
    STOP_SIGNALS,
    WorkerSpec,
    check_server,
    connect,
    load_target,
)

log = logging.getLogger("echomq")



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
    signals = SignalWaiter((*STOP_SIGNALS, ENDED_SIGNAL, OVERRUN_SIGNAL))
    status = _StatusPipe(status_fd)
    spec = WorkerSpec.from_json(spec_json)
    configure_logging(spec.log_level)
    if spec.metrics_dir is not None:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = spec.metrics_dir
    try:
        target = load_target(spec.handler)
        announcer = Announcer(connect(spec, target), spec.queues, spec.wire)
        consumer = build_worker_loop(spec, target, ask_for_replacement, announcer, status.ran)
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
    if received == ENDED_SIGNAL:
        status.ended()
    if received == ENDED_SIGNAL and not failed:
        log.warning("the consumer stopped by itself (a handler raised SystemExit or "
                    "KeyboardInterrupt); the supervisor replaces this worker")
    consumer.stop()
    if received == OVERRUN_SIGNAL:
        if isinstance(consumer, AsyncWorkerLoop):
            _drain_beside_the_overrun(consumer)
        _exit_to_be_replaced(announcer, target)
    thread.join()
    announcer.stop()
    if failed:
        status.failed(failed[0])
    return 1 if received == ENDED_SIGNAL or failed else 0


def _exit_to_be_replaced(announcer: Announcer, target: Any) -> None:
    """Exit after a job overran its time limit, without waiting for the job's thread (it may
    never return); the App hears ``worker_stopping`` first, as on any other way out."""
    log.warning("exiting after a job overran its time limit; the supervisor replaces this "
                "worker")
    announcer.stop()
    _app_stopping(target)
    logging.shutdown()
    os._exit(EXIT_OVERRUN)


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
        os.kill(os.getpid(), ENDED_SIGNAL)


# the supervisor ----------------------------------------------------------------------------
