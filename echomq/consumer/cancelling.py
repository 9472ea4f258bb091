"""A cancel reaching the handler that runs the job: ``cancel_requested()``, read inside a
handler, and ``CancelFlags``, where both consumer shells keep the flag of each handler running.

``Queue.cancel`` flags a leased job on the server and leaves a notice on ``<base>cancels``; the
holder learns it at once from its blocked read of the notices (``blocking_notices``,
``aio_notices``), or at its next heartbeat at the latest (``extend_many`` answers CANCELLING),
and its shell sets the job's flag, a ``Flag``
that a context variable holds while the handler runs: in the handler's thread, in an
``asyncio.to_thread`` it starts (the context is copied) and in an ``async def`` handler's task.
Whatever the handler does then (return, raise, or its task cancelled), its outcome is settled as
usual and the server ends the attempt as cancelled.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from contextvars import ContextVar

from echomq.engine.calls import Job


class Flag:
    """A job's cancel flag: set once, from any thread (a bool written under the GIL); nothing
    waits on it, so it is lighter than a ``threading.Event`` made for every job."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


_flag: ContextVar[Flag | None] = ContextVar("echomq_cancel_flag", default=None)


def cancel_requested() -> bool:
    """Inside a handler: whether its job was cancelled (``Queue.cancel``) while it runs. False
    outside a handler. A handler that checks it may stop early: what it returns or raises then
    is settled as usual, and the job ends cancelled, never retried."""
    flag = _flag.get()
    return flag is not None and flag.is_set()


class CancelFlags:
    """The cancel flag of each job whose handler runs in this consumer (safe across threads)."""

    def __init__(self) -> None:
        # Read and written by single dict operations, each atomic across threads.
        self._flags: dict[Job, Flag] = {}

    def running(self, job: Job, asked: Container[Job]) -> Running:
        """While the block runs, ``job``'s flag is the one ``cancel_requested()`` reads; set at
        once when ``job`` is in ``asked``: the cancel was learned before (looked up once the
        flag is listed, so a ``request`` made meanwhile is never missed)."""
        return Running(self, job, asked)

    def request(self, jobs: Iterable[Job]) -> list[Job]:
        """Set the flag of each of ``jobs`` whose handler runs: those jobs, in order."""
        flags = [(job, flag) for job in jobs if (flag := self._flags.get(job)) is not None]
        for _, flag in flags:
            flag.set()
        return [job for job, _ in flags]


class Running:
    """``CancelFlags.running``: a context manager (a class: one is made for every job)."""

    __slots__ = ("_asked", "_flags", "_job", "_token")

    def __init__(self, flags: CancelFlags, job: Job, asked: Container[Job]) -> None:
        self._flags, self._job, self._asked = flags._flags, job, asked

    def __enter__(self) -> Flag:
        flag = Flag()
        job = self._job
        self._flags[job] = flag
        if job in self._asked:
            flag.set()
        self._token = _flag.set(flag)
        return flag

    def __exit__(self, *exc: object) -> None:
        _flag.reset(self._token)
        self._flags.pop(self._job, None)
