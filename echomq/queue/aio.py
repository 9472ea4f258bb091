"""The asyncio Queue: ``echomq.aio.Queue`` on ``redis.asyncio`` or ``valkey.asyncio``, with the
same names, calls and semantics as ``echomq.Queue`` — both are the methods written once in
``echomq.queue.methods``, awaited here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

from echomq.engine.async_executors import AsyncExecutor, async_executor_for
from echomq.engine.events import Event
from echomq.engine.program import AsyncShell, Program, adrive
from echomq.queue.events import AFTER_NOW, resumed
from echomq.queue.methods import QueueMethods
from echomq.queue.policy import evicting_check
from echomq.queue.sharded import ShardedMethods

R = TypeVar("R")


async def warn_if_evicting(conn: Any) -> str | None:
    """As ``echomq.queue.blocking.warn_if_evicting``, on an asyncio client."""
    return await adrive(evicting_check(conn))


class Queue(QueueMethods, AsyncShell):
    """One queue on a Valkey server, for asyncio code; see ``echomq.Queue``. Creating it does no
    I/O: with ``check_policy``, the server's eviction policy is checked before the queue's first
    command, once per client (or when ``await queue.check_policy()`` asks)."""

    executor: AsyncExecutor
    _executor_of = staticmethod(async_executor_for)

    async def _adrive(self, program: Program[R]) -> R:
        return await adrive(self._checked(program))

    async def follow(self, since: str | None = None,
                     block_ms: int = 10_000) -> AsyncIterator[Event]:
        """As ``echomq.Queue.follow``: an async generator over ``events`` in a loop."""
        after = resumed(since, await self.latest_events(1) if since == AFTER_NOW else [])
        while True:
            for event in await self.events(after, block_ms=block_ms):
                after = event.id
                yield event


class ShardedQueue(ShardedMethods, Queue):
    """One logical queue over N shards, for asyncio code (``echomq.aio.Queue(conn, name,
    shards=N)``): see ``echomq.queue.sharded``. The count of shards is recorded, or checked,
    before its first command."""

    _plain_class = Queue


Queue._sharded_class = ShardedQueue
