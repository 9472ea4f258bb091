"""A Starlette or FastAPI lifespan for an echomq App: its connection is checked at startup (a
server that cannot be reached fails the startup, not the first request) and closed at shutdown;
with ``consume=True`` an asyncio consumer runs the App's tasks in the web process meanwhile.

    app = echomq.App(redis_from_url(URL))
    web = Starlette(routes=..., lifespan=lifespan(app, consume=True))  # or FastAPI(lifespan=...)

The consumer gets an asyncio client to the same server (same host, port, database, password and
timeouts as the App's own) and runs ``app.async_handler`` on the App's default queue; it is
stopped at shutdown, handing back the jobs it prefetched and did not start. Like a worker process,
it keeps a record in the registry of live workers (``echomq workers``) while it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import redis.asyncio
import redis.asyncio.connection

from echomq import aio
from echomq.tasks import App
from echomq.workers import Announcer

__all__ = ["async_twin", "lifespan"]


def async_twin(conn: Any) -> redis.asyncio.Redis:
    """An asyncio client to the server a blocking ``redis.Redis`` talks to, with its options
    (TCP, TLS or a Unix socket). TypeError for a client that has no single pool (a cluster)."""
    pool = getattr(conn, "connection_pool", None)
    if pool is None:
        raise TypeError("the lifespan's consumer needs a redis.Redis client, not a cluster one")
    kind = getattr(redis.asyncio.connection, pool.connection_class.__name__,
                   redis.asyncio.connection.Connection)
    return redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(
        connection_class=kind, **pool.connection_kwargs))


def lifespan(app: App, *, consume: bool = False,
             **consumer_options: Any) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """A lifespan for ``Starlette(lifespan=...)`` or ``FastAPI(lifespan=...)`` that opens and
    closes ``app``'s connection; with ``consume``, runs an ``echomq.aio.Consumer`` of the App's
    queue in the web process, made with ``consumer_options``."""

    @asynccontextmanager
    async def run(web_app: Any) -> AsyncIterator[None]:
        await asyncio.to_thread(app.conn.ping)
        try:
            if consume:
                async with _consuming(app, consumer_options):
                    yield
            else:
                yield
        finally:
            app.conn.close()

    return run


@asynccontextmanager
async def _consuming(app: App, options: dict[str, Any]) -> AsyncIterator[aio.Consumer]:
    """An asyncio consumer of the App's queue, running until the block exits."""
    conn = async_twin(app.conn)
    queue = aio.Queue(conn, app.queue.name, wire=app.queue.wire,
                      retention_ms=app.queue.retention_ms, max_attempts=app.queue.max_attempts)
    announcer = Announcer(app.conn, [queue.name], queue.wire)
    consumer = aio.Consumer(queue, announcer.track(app.async_handler), **options)
    await asyncio.to_thread(announcer.start)
    running = asyncio.create_task(consumer.run(), name=f"echomq-consumer-{queue.name}")
    try:
        yield consumer
    finally:
        consumer.stop()
        try:
            await running
        finally:
            await asyncio.to_thread(announcer.stop)
            await conn.aclose(close_connection_pool=True)
