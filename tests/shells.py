"""Both consumer shells behind one blocking interface, so every loop test runs against each.

``echomq.Consumer`` is used as it is. ``AsyncShell`` drives an ``echomq.aio.Consumer`` on an event
loop of its own thread, through an asyncio client to the same server with the same options, and
offers the blocking one's calls (``run``, ``stop``, ``beat``, ``drain``, ``park_timeout_ms``).
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from echomq import Job, Queue, aio
from echomq.consumer.blocking import Consumer
from echomq.engine.clients import client_library, is_cluster

T = TypeVar("T")
SHELLS = ["sync", "async"]


def async_client_like(conn: Any) -> Any:
    """An asyncio client of the blocking client's library (redis-py or valkey-py) with its
    address and timeouts (of a cluster client: an asyncio cluster client of its first node)."""
    library = client_library(conn)
    if is_cluster(conn):
        clusters = importlib.import_module(f"{library}.asyncio.cluster")
        node = conn.get_default_node()
        kind = clusters.ValkeyCluster if library == "valkey" else clusters.RedisCluster
        node_client = getattr(node, "redis_connection", None) or node.valkey_connection
        credentials = {key: value
                       for key, value in node_client.connection_pool.connection_kwargs.items()
                       if key in ("username", "password") and value is not None}
        return kind(host=node.host, port=node.port, **credentials)
    aio_module = importlib.import_module(f"{library}.asyncio")
    retry_class = importlib.import_module(f"{library}.asyncio.retry").Retry
    no_backoff = importlib.import_module(f"{library}.backoff").NoBackoff
    options = dict(conn.connection_pool.connection_kwargs)
    keep = {"host", "port", "db", "username", "password", "socket_timeout",
            "socket_connect_timeout", "path"}
    chosen = {key: value for key, value in options.items() if key in keep}
    retry = options.get("retry")
    if retry is not None:  # the same number of retries, in asyncio's own Retry
        chosen["retry"] = retry_class(no_backoff(), int(getattr(retry, "_retries", 0)))
    client_class = aio_module.Valkey if library == "valkey" else aio_module.Redis
    if "path" in chosen:
        return client_class(unix_socket_path=chosen.pop("path"), **chosen)
    return client_class(**chosen)


class AsyncShell:
    """An ``echomq.aio.Consumer`` with the blocking Consumer's interface."""

    def __init__(self, queue: Queue | list[Queue], handler: Callable[[Job], object],
                 **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        queues = queue if isinstance(queue, list) else [queue]
        self.sync_queue = queues[0]
        self.client = async_client_like(queues[0].conn)
        async_queues = [aio.Queue(self.client, one.name, wire=one.wire,
                                  max_attempts=one.max_attempts,
                                  staging_timeout_ms=one.staging_timeout_ms) for one in queues]
        served = async_queues if isinstance(queue, list) else async_queues[0]
        try:
            self.consumer = self._call(self._make(served, handler, options))
        except BaseException:
            self.close()
            raise

    @staticmethod
    async def _make(queue: aio.Queue | list[aio.Queue], handler: Callable[[Job], object],
                    options: dict[str, Any]) -> aio.Consumer:
        return aio.Consumer(queue, handler, **options)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def queue(self) -> Queue:
        return self.sync_queue

    @property
    def handler(self) -> Any:
        return self.consumer.handler

    @handler.setter
    def handler(self, value: Any) -> None:
        self.consumer.handler = value

    @property
    def stopping(self) -> bool:
        return self.consumer.stopping

    def run(self) -> None:
        self._call(self.consumer.run())

    def connect(self) -> None:
        """Open the client now: an asyncio cluster client reads its slot map at its first call
        (0.2 s to over a second on a loaded machine), where the blocking one did in its
        constructor; a test timing a stop times the stop, not that."""
        if is_cluster(self.client):
            self._call(self.client.initialize())

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self.consumer.stop)

    def beat(self, *, park: bool = True) -> int:
        return self._call(self.consumer.beat(park=park))

    def drain(self) -> int:
        return self._call(self.consumer.drain())

    def park_timeout_ms(self) -> int:
        return self._call(self.consumer.park_timeout_ms())

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self.client.aclose(), timeout=5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()


AnyConsumer = Consumer | AsyncShell
Make = Callable[..., Any]


@pytest.fixture(params=SHELLS, name="shell")
def shell_fixture(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(name="make")
def make_fixture(shell: str) -> Iterator[Make]:
    """Builds consumers of the shell under test: ``make(queue, handler, **options)``."""
    made: list[AnyConsumer] = []

    def build(queue: Queue | list[Queue], handler: Callable[[Job], object],
              **options: Any) -> Any:
        consumer: AnyConsumer
        if shell == "sync":
            consumer = Consumer(queue, handler, **options)
        else:
            consumer = AsyncShell(queue, handler, **options)
        made.append(consumer)
        return consumer

    yield build
    for consumer in made:
        consumer.close()
