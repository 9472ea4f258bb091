"""A cancel reaching the handler that runs the job: ``cancel_requested()``, read inside a
handler, and ``CancelFlags``, where both consumer shells keep the flag of each handler running.

``Queue.cancel`` flags a leased job on the server; the holder learns it at its next heartbeat
(``extend_many`` answers CANCELLING) and its shell sets the job's flag, a ``threading.Event``
that a context variable holds while the handler runs: in the handler's thread, in an
``asyncio.to_thread`` it starts (the context is copied) and in an ``async def`` handler's task.
Whatever the handler does then (return, raise, or its task cancelled), its outcome is settled as
usual and the server ends the attempt as cancelled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from echomq.engine.calls import Job

_flag: ContextVar[threading.Event | None] = ContextVar("echomq_cancel_flag", default=None)


def cancel_requested() -> bool:
    """Inside a handler: whether its job was cancelled (``Queue.cancel``) while it runs. False
    outside a handler. A handler that checks it may stop early: what it returns or raises then
    is settled as usual, and the job ends cancelled, never retried."""
    flag = _flag.get()
    return flag is not None and flag.is_set()


class CancelFlags:
    """The cancel flag of each job whose handler runs in this consumer (safe across threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flags: dict[Job, threading.Event] = {}

    @contextmanager
    def running(self, job: Job, asked: Callable[[], bool]) -> Iterator[threading.Event]:
        """While the block runs, ``job``'s flag is the one ``cancel_requested()`` reads; set at
        once when ``asked()`` says the cancel was learned before (asked once the flag is
        listed, so a ``request`` made meanwhile is never missed)."""
        flag = threading.Event()
        with self._lock:
            self._flags[job] = flag
        if asked():
            flag.set()
        token = _flag.set(flag)
        try:
            yield flag
        finally:
            _flag.reset(token)
            with self._lock:
                self._flags.pop(job, None)

    def request(self, jobs: Iterable[Job]) -> list[Job]:
        """Set the flag of each of ``jobs`` whose handler runs: those jobs, in order."""
        with self._lock:
            flags = [(job, flag) for job in jobs if (flag := self._flags.get(job)) is not None]
        for _, flag in flags:
            flag.set()
        return [job for job, _ in flags]
