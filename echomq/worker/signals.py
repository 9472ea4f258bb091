"""``SignalWaiter``: how a worker process waits for its signals without blocking any of them.

A worker's main thread waits for a stop (or a word from its loop's thread) while the loop runs in
another thread. Blocking the signals and taking them with ``sigwait`` would leave them blocked
in every thread, and every process a handler starts (a subprocess, a fork) inherits that mask:
an orphan that ignores SIGTERM. Instead each waited signal gets a handler that does nothing in
Python, and the interpreter's wakeup socket carries its number to the waiting thread; no signal
is blocked anywhere. A process forked without exec gets the default dispositions back and no
wakeup socket (``os.register_at_fork``), so a SIGTERM still ends it and it cannot wake the worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Iterable
from types import FrameType

__all__ = ["SignalWaiter"]


def _noted(signum: int, frame: FrameType | None) -> None:
    """The Python side of a waited signal: the wakeup socket already carries it."""


class SignalWaiter:
    """Waits, in the main thread, for any of ``signals`` (installed at once: main thread only)."""

    def __init__(self, signals: Iterable[int]) -> None:
        self.signals = tuple(int(sig) for sig in signals)
        self._source, self._sink = socket.socketpair()
        self._sink.setblocking(False)
        signal.set_wakeup_fd(self._sink.fileno(), warn_on_full_buffer=False)
        for sig in self.signals:
            signal.signal(sig, _noted)
        os.register_at_fork(after_in_child=self.forget)

    def forget(self) -> None:
        """In a process forked from this one: default dispositions, no wakeup socket."""
        with contextlib.suppress(ValueError):  # forked from a thread Python does not know
            signal.set_wakeup_fd(-1)
            for sig in self.signals:
                signal.signal(sig, signal.SIG_DFL)

    def wait(self) -> int:
        """The next of the signals to arrive (one that came before this call counts)."""
        while True:
            for number in self._source.recv(64):
                if number in self.signals:
                    return number
