"""The asyncio consumer's parking: ``AsyncParker`` reads the heads and parks on the wake and
watch keys through a client of its own, whose read timeout outlasts the longest park; a stop ends
a park at once (``interrupt``)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from echomq.consumer.aio_leftovers import UNWIND_S, Leftovers
from echomq.consumer.aio_node_parks import AsyncNodeParks
from echomq.consumer.core import LoopCore
from echomq.consumer.node_parks import WAKE_CAP, park_groups
from echomq.consumer.settings import park_socket_timeout
from echomq.consumer.shell import park_keys, queue_park_reads, sightings_of, wake_keys
from echomq.engine.clients import is_cluster, private_twin
from echomq.engine.scatter import CommandList, async_scatter_reads
from echomq.queue.aio import Queue
from echomq.queue.connection import socket_timeout_of
from echomq.queue.parking import (
    WATCH_ROLE,
    Sighting,
    is_watch,
    queue_watch,
    split_beat,
)

if TYPE_CHECKING:
    from echomq.consumer.presence import Announcer


class AsyncParker:
    """The parking of an asyncio consumer of ``queues`` (the first's client), parks at most
    ``cap_ms`` long."""

    def __init__(self, queues: Sequence[Queue], cap_ms: int) -> None:
        self._queue = queues[0]
        self._queues = list(queues)
        self._cap_ms = cap_ms
        self.socket_timeout_s = socket_timeout_of(self._queue.conn)
        self.timeout_s = self.socket_timeout_s  # the parking client's
        self._conn: Any = None  # made on the first park: see ``client``
        self._parking: asyncio.Task[str | None] | None = None
        # A cluster client's parks over several slots (``echomq.consumer.aio_node_parks``).
        self._nodes: AsyncNodeParks | None = None
        self._leftovers = Leftovers()  # what abandoned parks leave, ended by ``close``

    async def client(self) -> Any:
        """The client the consumer parks and reads through: a pool of its own whose read
        timeout outlasts the longest park (a cluster client: the queue's own)."""
        if self._conn is None:
            timeout_s = park_socket_timeout(self.socket_timeout_s, self._cap_ms)
            private = private_twin(self._queue.conn, timeout_s, single=False)
            if private is not None:
                self.timeout_s = timeout_s
            self._conn = self._queue.conn if private is None else private
            if private is None and is_cluster(self._conn) and len(self._queues) > 1 \
                    and self._nodes is None:
                self._nodes = AsyncNodeParks(self._conn, timeout_s, wake=self._push_wake,
                                             push=self.hand_back, leftovers=self._leftovers)
        return self._conn

    async def close(self) -> None:
        """Close every parking connection: first what abandoned parks left (a park cancelled
        while it opened its lines leaves them as it unwinds), then the lines kept, then the
        parking client."""
        await self._leftovers.drain()
        nodes, self._nodes = self._nodes, None
        if nodes is not None:
            await nodes.close()
        conn, self._conn = self._conn, None
        if conn is not None and conn is not self._queue.conn:
            await _close_client(conn)
        await self._leftovers.drain()

    async def read(self, *, ready: bool, lanes: bool,
                   announcer: Announcer | None = None) -> list[Sighting]:
        """Each queue's Sighting, read in one flush through the parking client (``announcer``:
        before a park, as ``echomq.consumer.blocking.Parker.read``)."""
        client = await self.client()
        if is_cluster(client):  # node by node, once: a node that is down fails its own
            pending = CommandList()
            queue_park_reads(pending, self._queues, ready=ready, lanes=lanes)
            beat = 0 if announcer is None else await announcer.aqueue_parked(pending,
                                                                             self._cap_ms)
            replies, written = split_beat(await async_scatter_reads(client, pending.commands),
                                          beat)
        else:
            async with client.pipeline(transaction=False) as pipe:
                queue_park_reads(pipe, self._queues, ready=ready, lanes=lanes)
                beat = 0 if announcer is None else await announcer.aqueue_parked(pipe,
                                                                                 self._cap_ms)
                replies, written = split_beat(await pipe.execute(raise_on_error=not beat), beat)
        if announcer is not None and beat and announcer.parked_written(written):
            await announcer.arelist()
        return sightings_of(replies, len(self._queues))

    async def blpop(self, timeout_s: float) -> str | None:
        """"wake", "watch" (which token it popped), or None (the timeout); on a cluster, queues
        in several slots are parked on with one call per slot at once."""
        client = await self.client()
        keys = park_keys(self._queues)
        if self._nodes is not None:
            groups = park_groups(client, keys)
            if len(groups) > 1:
                return await self._nodes.park(groups, timeout_s)
        popped = await client.blpop(keys, timeout=timeout_s)
        if popped is None:
            return None
        return "watch" if is_watch(popped[0]) else "wake"

    async def park(self, blpop: Coroutine[Any, Any, str | None],
                   stopping: asyncio.Event) -> str | None:
        """Run ``blpop`` (one BLPOP) so that a stop ends it: what it popped, or None. A stop
        does not wait for the cancelled BLPOP to unwind (a cancel that meets the client's own
        read timeout can be swallowed, and the call then blocks to its end): its parking client
        is dropped instead, and the next park, if any, opens another."""
        parking = self._parking = asyncio.ensure_future(blpop)
        stopped = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({parking, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._parking = None
            stopped.cancel()
        if parking.done():
            if parking.cancelled():
                if not stopping.is_set():
                    raise asyncio.CancelledError
                return None
            return parking.result()
        parking.cancel()
        abandoned, self._conn = self._conn, None
        own = abandoned is not None and abandoned is not self._queue.conn
        self._leftovers.close_after(parking, (lambda: _close_client(abandoned)) if own else None)
        return None

    def interrupt(self) -> None:
        """End the park in progress (``stop``)."""
        if self._parking is not None:
            self._parking.cancel()

    async def wait_wake(self, core: LoopCore) -> None:
        """Block on the wake keys at most the park cap (a handler finishing or a stop cancels
        it): one call per slot they lie in, until the first returns. A cancelled call is given
        ``UNWIND_S`` to unwind, then left to ``close`` (a cancel that meets the client's own read
        timeout can be swallowed, and the call then blocks to its end, as ``park`` says)."""
        conn = self._queue.conn
        timeout_s = core.park_cap_ms(self.socket_timeout_s) / 1000
        waiters = [asyncio.ensure_future(conn.blpop(group.keys, timeout=timeout_s))
                   for group in park_groups(conn, wake_keys(self._queues))]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            _, stuck = await asyncio.wait(waiters, timeout=UNWIND_S)
            for waiter in stuck:
                self._leftovers.close_after(waiter, None)
            for waiter in set(waiters) - stuck:
                if not waiter.cancelled():
                    waiter.exception()  # consumed: the wait's outcome is the wake, not its error

    async def _push_wake(self, key: str) -> None:
        await self.hand_back("wake", key)

    async def hand_back(self, kind: str, key: str) -> None:
        """Leave one token of ``kind`` ("wake" or "watch") on ``key``."""
        async with self._queue.conn.pipeline(transaction=False) as pipe:
            if kind == "watch":
                queue_watch(pipe, key, 1)
            else:
                pipe.rpush(key, 1)
                pipe.ltrim(key, 0, WAKE_CAP - 1)
            await pipe.execute()

    async def watch(self, index: int) -> None:
        """Leave watch tokens on queue ``index``."""
        queue = self._queues[index]
        async with queue.conn.pipeline(transaction=False) as pipe:
            queue_watch(pipe, queue.key(WATCH_ROLE))
            await pipe.execute()


async def _close_client(client: Any) -> None:
    """Close a parking client of the consumer's own, and its pool's connections."""
    with suppress(Exception):
        await client.aclose()
        await client.connection_pool.disconnect()
