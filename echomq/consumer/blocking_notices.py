"""The blocking consumer's reading of cancel notices: ``NoticeListener``, a thread that, while
the consumer holds jobs, blocks in ``XREAD`` on its queues' ``<base>cancels`` through a
connection of its own (``echomq.queue.notices``), so that a cancel reaches the running handler
at once rather than at its next heartbeat. It sends nothing while nothing is in hand, and one read
a cancel (or a park cap) while jobs are; a stop unblocks it with ``CLIENT UNBLOCK``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from echomq.consumer.shell import own_blocking_client
from echomq.queue.blocking import Queue
from echomq.queue.notices import NOTICES_ROLE, Notice, NoticeReads

log = logging.getLogger("echomq")

# The pause after a read that failed by an error that heals, before the next.
RETRY_PAUSE_S = 1.0
# How long a stop waits for the reading thread to leave its read.
CLOSE_PATIENCE_S = 2.0

Tell = Callable[[list[list[Notice]]], None]


class NoticeListener:
    """The reader of the cancel notices of ``queues`` (the first's client), each read blocking
    at most ``cap_ms``. ``cond`` is the consumer's condition, notified whenever something comes
    into hand, and ``holding`` (read under it) whether anything is; ``tell`` is given what each
    read found. ``close`` ends the thread and its read; a later ``wake`` starts another. A
    cluster client has no connection of its own to read on: there a cancel reaches its handler at
    the heartbeat, as before."""

    def __init__(self, queues: Sequence[Queue], cap_ms: int, cond: threading.Condition,
                 holding: Callable[[], bool], tell: Tell,
                 heals: Callable[[BaseException], bool]) -> None:
        self._queue = queues[0]
        self._reads = NoticeReads([queue.key(NOTICES_ROLE) for queue in queues])
        self._cap_ms = cap_ms
        self._cond, self._holding, self._tell, self._heals = cond, holding, tell, heals
        self._reader: Reader | None = None
        self._unread = False  # a cluster client, or reads refused: the heartbeat tells

    def wake(self) -> None:
        """Something came into hand (called with ``cond`` held): the thread starts unless it
        runs; after, ``cond``'s notice wakes it."""
        if self._reader is not None or self._unread:
            return
        own = own_blocking_client(self._queue.conn, self._cap_ms)
        if own is None:  # a cluster client
            self._unread = True
            return
        self._reader = Reader(self, own)

    def close(self) -> None:
        """End the thread (a read in progress unblocked) and close its connection."""
        with self._cond:
            reader, self._reader = self._reader, None
            if reader is not None:
                reader.closed.set()
            self._cond.notify_all()
        if reader is not None:
            reader.end(self._queue)

    def run(self, reader: Reader) -> None:
        """The thread of ``reader``: while anything is in hand, read, and tell what was found."""
        while True:
            with self._cond:
                while not reader.closed.is_set() and not self._holding():
                    self._cond.wait()
            if reader.closed.is_set():
                return
            try:
                notices = self._reads.took(reader.read(self._reads.command(self._cap_ms)))
            except Exception as exc:
                if reader.closed.is_set():
                    return
                if not self._heals(exc):
                    log.warning("cancel notices unread (%s: %s): a cancel reaches its running "
                                "handler at the next heartbeat", type(exc).__name__, exc)
                    self._unread = True
                    return
                reader.closed.wait(RETRY_PAUSE_S)
                continue
            if any(notices) and not reader.closed.is_set():
                self._tell(notices)


class Reader:
    """One reading thread of a ``NoticeListener``, on a connection of its own, ``own``."""

    def __init__(self, listener: NoticeListener, own: Any) -> None:
        self.closed = threading.Event()
        self._own = own
        self._client_id: int | None = None
        self._reading = False
        self._thread = threading.Thread(target=listener.run, args=(self,),
                                        name="echomq-notices", daemon=True)
        self._thread.start()

    def read(self, command: tuple[Any, ...]) -> Any:
        """The reply to ``command``, a blocking read (None at once once closed)."""
        if self._client_id is None:
            self._client_id = int(self._own.client_id())
        self._reading = True
        try:
            if self.closed.is_set():
                return None
            return self._own.execute_command(*command)
        finally:
            self._reading = False

    def end(self, queue: Queue) -> None:
        """After ``closed`` is set: the read in progress unblocked (through ``queue``'s client),
        the thread joined, the connection closed."""
        thread = self._thread
        if thread is not threading.current_thread():
            deadline = time.monotonic() + CLOSE_PATIENCE_S
            while thread.is_alive() and time.monotonic() < deadline:
                if self._reading and self._client_id is not None:
                    with suppress(Exception):
                        queue.conn.client_unblock(self._client_id)
                thread.join(0.05)
        with suppress(Exception):
            self._own.close()
            self._own.connection_pool.disconnect()
