"""``SignalWaiter``: how a worker process waits for its signals without blocking any of them.

A worker's main thread waits for a stop (or a word from its loop's thread) while the loop runs in
another thread. Blocking the signals and taking them with ``sigwait`` would leave them blocked
in every thread, and every process a handler starts (a subprocess, a fork) inherits that mask:
an orphan that ignores SIGTERM. Instead each waited signal gets a handler that does nothing in
Python, and the interpreter's wakeup socket carries its number to the waiting thread; no signal
is blocked anywhere. A process forked without exec gets the default dispositions back and no
wakeup socket (``os.register_at_fork``), so a SIGTERM still ends it and it cannot wake the worker.
The forking thread blocks the waited signals across the fork, and the child unblocks them only
once its dispositions are back to the default: a signal sent to the child before then waits for
that moment and ends it, rather than reaching the do-nothing handler (lost) and the inherited
wakeup socket (read by the worker as its own stop).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
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
        self._forking = threading.local()
        os.register_at_fork(before=self._block, after_in_parent=self._unblock,
                            after_in_child=self._forget_then_unblock)

    def _block(self) -> None:
        """Before a fork, in the forking thread: the waited signals held back (the child
        inherits the mask), noting which of them this call blocked."""
        before = signal.pthread_sigmask(signal.SIG_BLOCK, self.signals)
        self._forking.blocked = set(self.signals) - before

    def _unblock(self) -> None:
        """After a fork, in the parent: the mask as it was before it."""
        blocked = getattr(self._forking, "blocked", None)
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        self._forking.blocked = None

    def _forget_then_unblock(self) -> None:
        """In the child: the default dispositions first, then the signals let through, so one
        that arrived in between is taken by its default action."""
        try:
            self.forget()
        finally:
            self._unblock()

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
