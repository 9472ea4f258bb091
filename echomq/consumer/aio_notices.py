"""The asyncio consumer's reading of cancel notices: ``AsyncNoticeListener``, a task that, while
the consumer holds jobs, awaits ``XREAD`` on its queues' ``<base>cancels`` through a client of
its own (``echomq.queue.notices``), so that a cancel reaches the running handler at once rather
than at its next heartbeat. It sends nothing while nothing is in hand, and one read a cancel (or
a park cap) while jobs are; the consumer's close cancels it and closes its client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any

from echomq.consumer.aio_leftovers import UNWIND_S
from echomq.consumer.shell import own_blocking_client
from echomq.queue.aio import Queue
from echomq.queue.notices import NOTICES_ROLE, Notice, NoticeReads

log = logging.getLogger("echomq")

# The pause after a read that failed by an error that heals, before the next.
RETRY_PAUSE_S = 1.0
# How long a close tries to unblock the task's read before it cancels the task.
UNBLOCK_PATIENCE_S = 1.0

Tell = Callable[[list[list[Notice]]], Awaitable[None]]


class AsyncNoticeListener:
    """The reader of the cancel notices of ``queues`` (the first's client), each read blocking
    at most ``cap_ms``; ``holding`` says whether anything is in hand, ``tell`` is given what each
    read found. ``close`` ends its task; a later ``wake`` starts another. A cluster client has no
    client of its own to read on: there a cancel reaches its handler at the heartbeat, as
    before."""

    def __init__(self, queues: Sequence[Queue], cap_ms: int, holding: Callable[[], bool],
                 tell: Tell, heals: Callable[[BaseException], bool]) -> None:
        self._queue = queues[0]
        self._reads = NoticeReads([queue.key(NOTICES_ROLE) for queue in queues])
        self._cap_ms = cap_ms
        self._holding, self._tell, self._heals = holding, tell, heals
        self._reader: Reader | None = None
        self._changed = asyncio.Event()
        self._unread = False  # a cluster client, or reads refused: the heartbeat tells

    def wake(self) -> None:
        """Something came into hand: the task starts, or looks again."""
        if self._unread:
            return
        if self._reader is not None and not self._reader.task.done():
            self._changed.set()
            return
        own = own_blocking_client(self._queue.conn, self._cap_ms)
        if own is None:  # a cluster client
            self._unread = True
            return
        self._reader = Reader(own)
        self._reader.task = asyncio.ensure_future(self._run(self._reader))

    async def close(self) -> None:
        """End the task — its read unblocked (``CLIENT UNBLOCK``: a cancelled read could be
        swallowed by the client and block to its end), else cancelled — and close its
        client."""
        reader, self._reader = self._reader, None
        if reader is None:
            return
        self._changed.set()  # a task waiting for work sees it is no longer the listener's
        deadline = asyncio.get_running_loop().time() + UNBLOCK_PATIENCE_S
        while not reader.task.done() and asyncio.get_running_loop().time() < deadline:
            if reader.client_id is not None:  # else it reads nothing more once connected
                with suppress(Exception):
                    await self._queue.conn.client_unblock(reader.client_id)
            await asyncio.wait({reader.task}, timeout=0.05)
        if not reader.task.done():
            reader.task.cancel()
        with suppress(Exception):
            await reader.own.aclose()
            await reader.own.connection_pool.disconnect()
        await asyncio.wait({reader.task}, timeout=UNWIND_S)

    async def _run(self, reader: Reader) -> None:
        while self._reader is reader:
            if not self._holding():
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                notices = await self._read(reader)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._reader is not reader:
                    return
                if not self._heals(exc):
                    log.warning("cancel notices unread (%s: %s): a cancel reaches its running "
                                "handler at the next heartbeat", type(exc).__name__, exc)
                    self._unread = True
                    return
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            if any(notices) and self._reader is reader:
                await self._tell(notices)

    async def _read(self, reader: Reader) -> list[list[Notice]]:
        if reader.client_id is None:
            reader.client_id = int(await reader.own.client_id())
        if self._reader is not reader:  # closed meanwhile
            return []
        reply = await reader.own.execute_command(*self._reads.command(self._cap_ms))
        return self._reads.took(reply)


class Reader:
    """One task of an ``AsyncNoticeListener``, reading through ``own``, a client of one
    connection (its ``CLIENT ID``, ``client_id``, once known)."""

    task: asyncio.Task[None]

    def __init__(self, own: Any) -> None:
        self.own = own
        self.client_id: int | None = None
