"""A Starlette or FastAPI lifespan for an echomq App: its connection is checked at startup (a
server that cannot be reached fails the startup, not the first request) and closed at shutdown
(with the asyncio client ``aenqueue`` and ``aresult`` made on the web loop, ``App.aclose``);
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

from echomq import aio
from echomq.engine import clients
from echomq.tasks import App

__all__ = ["async_twin", "lifespan"]


# An asyncio client of the blocking client's library, to the same server with the same options.
async_twin = clients.async_twin


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
            await app.aclose()  # the asyncio client aenqueue and aresult made on this loop
            app.conn.close()

    return run


@asynccontextmanager
async def _consuming(app: App, options: dict[str, Any]) -> AsyncIterator[aio.Consumer]:
    """An asyncio consumer of the App's queue, running until the block exits."""
    conn = async_twin(app.conn)
    queue = aio.Queue(conn, app.queue.name, wire=app.queue.wire,
                      retention_ms=app.queue.retention_ms, max_attempts=app.queue.max_attempts)
    # Its ``run`` announces it (the default): the web process's consumer is listed in
    # ``echomq workers``.
    consumer = aio.Consumer(queue, app.async_handler, **options)
    running = asyncio.create_task(consumer.run(), name=f"echomq-consumer-{queue.name}")
    try:
        yield consumer
    finally:
        consumer.stop()
        try:
            await running
        finally:
            await conn.aclose(close_connection_pool=True)
