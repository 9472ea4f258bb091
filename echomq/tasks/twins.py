"""The asyncio side of an App's producer: ``aenqueue`` and a handle's ``aresult`` run on an
``echomq.aio.Queue`` of an asyncio client, found here.

An asyncio client belongs to the event loop it first ran on, so an App built on a blocking
client gets one twin of it (``echomq.engine.clients.async_twin``: same library, server and
options) per running event loop, made on first use there and closed as that loop shuts down
(``asyncio.run`` closes a loop's async generators: the twin's is one), or by ``await
app.aclose()``. Two ``asyncio.run`` calls in a row thus each get a client of their own. An App
given ``aconn=`` (any asyncio client, a cluster one included) uses that one on every loop: the
caller owns it, and closes it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any

from echomq.engine.clients import async_twin, is_cluster
from echomq.queue import aio

__all__ = ["AsyncQueues", "QueueOptions"]


@dataclass(frozen=True)
class QueueOptions:
    """What every queue of an App is made with (its wire, retention, attempts and events), and
    the count of shards of each sharded one."""

    wire: int
    retention_ms: int
    max_attempts: int
    events: bool
    sharded: Mapping[str, int] = field(default_factory=dict)

    def queue(self, aconn: Any, name: str) -> aio.Queue:
        # The App's blocking queue checked the server's eviction policy: not again here.
        return aio.Queue(aconn, name, wire=self.wire, retention_ms=self.retention_ms,
                         max_attempts=self.max_attempts, check_policy=False,
                         events=self.events, shards=self.sharded.get(name))


@dataclass
class LoopClient:
    """One event loop's asyncio client and the queues made on it, by name; ``closer``, for a
    twin, the suspended async generator whose end closes it."""

    aconn: Any
    queues: dict[str, aio.Queue] = field(default_factory=dict)
    closer: AsyncGenerator[None, None] | None = None


class AsyncQueues:
    """An App's ``echomq.aio.Queue`` of each name, on the running event loop's client."""

    def __init__(self, conn: Any, aconn: Any, options: QueueOptions) -> None:
        self.conn = conn
        self.options = options
        self._given = None if aconn is None else LoopClient(aconn)
        self._by_loop: dict[asyncio.AbstractEventLoop, LoopClient] = {}
        self._lock = threading.Lock()

    async def queue_named(self, name: str) -> aio.Queue:
        """The asyncio Queue called ``name`` on the running loop's client."""
        client = self._given or await self._loop_client()
        queue = client.queues.get(name)
        if queue is None:
            queue = client.queues[name] = self.options.queue(client.aconn, name)
        return queue

    async def aclose(self) -> None:
        """Close the running loop's twin, if it has one (a given ``aconn`` is left open)."""
        client = self._by_loop.get(asyncio.get_running_loop())
        if client is not None and client.closer is not None:
            await client.closer.aclose()

    async def _loop_client(self) -> LoopClient:
        if is_cluster(self.conn):
            raise TypeError(
                "an App on a cluster client makes no asyncio client of its own: give it one, "
                "App(..., aconn=redis.asyncio.RedisCluster(...)) (valkey.asyncio.ValkeyCluster "
                "for valkey-py), to use aenqueue and aresult")
        loop = asyncio.get_running_loop()
        with self._lock:
            for ended in [each for each in self._by_loop if each.is_closed()]:
                del self._by_loop[ended]
            client = self._by_loop.get(loop)
            if client is not None:
                return client
            client = self._by_loop[loop] = LoopClient(async_twin(self.conn))
        client.closer = self._closed_at_shutdown(loop, client)
        await anext(client.closer)
        return client

    async def _closed_at_shutdown(self, loop: asyncio.AbstractEventLoop,
                                  client: LoopClient) -> AsyncGenerator[None, None]:
        """An async generator left suspended: the loop's shutdown (or ``aclose``) closes it,
        closing the twin."""
        try:
            yield
        finally:
            with self._lock:
                if self._by_loop.get(loop) is client:
                    del self._by_loop[loop]
            await client.aconn.aclose()
