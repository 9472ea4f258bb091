"""The asyncio Queue: ``echomq.aio.Queue`` on ``redis.asyncio`` or ``valkey.asyncio``, with the
same names, calls and semantics as ``echomq.Queue`` — both are the methods written once in
``echomq.queue.methods``, awaited here."""

from __future__ import annotations

from typing import Any, TypeVar

from echomq.engine.async_executors import AsyncExecutor, async_executor_for
from echomq.engine.program import AsyncShell, Program, adrive
from echomq.queue.methods import QueueMethods, evicting_check

R = TypeVar("R")


async def warn_if_evicting(conn: Any) -> str | None:
    """As ``echomq.queue.blocking.warn_if_evicting``, on an asyncio client."""
    return await adrive(evicting_check(conn))


class Queue(QueueMethods, AsyncShell):
    """One queue on a Valkey server, for asyncio code; see ``echomq.Queue``. Creating it does no
    I/O: with ``check_policy``, the server's eviction policy is checked before the queue's first
    command (or when ``await queue.check_policy()`` asks)."""

    executor: AsyncExecutor
    _executor_of = staticmethod(async_executor_for)

    async def _adrive(self, program: Program[R]) -> R:
        if self._policy_due:
            await self.check_policy()
        return await adrive(program)
