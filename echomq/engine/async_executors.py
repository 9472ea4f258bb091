"""The asyncio executors of every transition, on a ``redis.asyncio`` client: the asyncio shell of
what ``echomq.engine.execution`` writes once (scripts, ``Wire.SCRIPTS``; native,
``Wire.NATIVE``; auto, ``Wire.AUTO``), so they send the same commands and map the same errors as
``echomq.engine.executors``."""

from __future__ import annotations

from echomq.engine.execution import AutoWire, ExecutorMethods, NativeWire, ScriptWire, of_wire
from echomq.engine.program import AsyncShell
from echomq.engine.wire import Wire

__all__ = ["AsyncExecutor", "async_executor_for"]


class AsyncExecutor(ExecutorMethods, AsyncShell):
    """Runs transitions on a ``redis.asyncio`` client (``Redis``, ``RedisCluster``)."""


class AsyncScriptExecutor(ScriptWire, AsyncExecutor):
    """wire=5 on an asyncio client."""


class AsyncNativeExecutor(NativeWire, AsyncExecutor):
    """wire=6 on an asyncio client."""


class AsyncAutoExecutor(AutoWire, AsyncExecutor):
    """wire="auto" on an asyncio client."""


_EXECUTORS: dict[int, AsyncExecutor] = {Wire.SCRIPTS: AsyncScriptExecutor(),
                                         Wire.NATIVE: AsyncNativeExecutor()}


def async_executor_for(wire: int | str, queue: str = "") -> AsyncExecutor:
    """The asyncio executor of ``wire`` (see ``echomq.engine.executors.executor_for``)."""
    return of_wire(_EXECUTORS, wire, lambda: AsyncAutoExecutor(queue))
