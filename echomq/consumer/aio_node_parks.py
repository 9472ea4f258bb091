"""A park over queues that lie in several slots of a Valkey Cluster, for the asyncio shell: as
``echomq.consumer.node_parks`` (the same groups, answers and rules), with one task per slot's
``BLPOP``, each on a client of one connection to its node. A stop cancels the park: every call
is dropped with its connection (closed once it has unwound, or at the consumer's close: see
``echomq.consumer.aio_leftovers``), as one server's park is."""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import redis

from echomq.consumer.aio_leftovers import Leftovers
from echomq.consumer.node_parks import (
    TIMEOUT_GRACE_S,
    UNBLOCK_PATIENCE_S,
    Answer,
    ParkGroup,
    answer_of,
    line_key,
    verdict,
)
from echomq.engine.clients import client_library, twins

# Options a cluster node keeps for the pools its client makes itself: a new pool makes its own.
_NODE_OWN_OPTIONS = ("maint_notifications_pool_handler", "oss_cluster_maint_notifications_handler",
                     "orig_host_address", "orig_socket_timeout", "orig_socket_connect_timeout")

Push = Callable[[str, str], Coroutine[Any, Any, None]]


def async_node_client(conn: Any, node: Any, socket_timeout_s: float | None) -> Any:
    """A client of one connection to ``node`` of the asyncio cluster client ``conn`` (redis-py
    or valkey-py), with the node's options but ``socket_timeout_s`` as its read timeout."""
    aio = importlib.import_module(f"{client_library(conn)}.asyncio")
    options = {key: value for key, value in node.connection_kwargs.items()
               if key not in _NODE_OWN_OPTIONS}
    options["socket_timeout"] = socket_timeout_s
    pool = aio.ConnectionPool(connection_class=node.connection_class, **options)
    client_class = aio.Valkey if client_library(conn) == "valkey" else aio.Redis
    return client_class(connection_pool=pool, single_connection_client=True)


@dataclass(eq=False)
class AsyncLine:
    """One group's parking client (one connection to its node) and its id."""

    client: Any
    client_id: int
    blocked: bool = False  # from just before its BLPOP is sent until it returns

    async def close(self) -> None:
        with suppress(Exception):
            await self.client.aclose()
            await self.client.connection_pool.disconnect()


class AsyncNodeParks:
    """The parks of an asyncio consumer over several slots of the cluster client ``conn``
    (``echomq.consumer.node_parks.NodeParks``'s, awaited). Calls left running and lines
    dropped go to ``leftovers``, which the consumer's close drains."""

    def __init__(self, conn: Any, socket_timeout_s: float | None,
                 wake: Callable[[str], Awaitable[None]], push: Push,
                 leftovers: Leftovers) -> None:
        self._conn = conn
        self._socket_timeout_s = socket_timeout_s
        self._wake, self._push = wake, push
        self._lines: dict[tuple[str, int], AsyncLine] = {}
        self._leftovers = leftovers

    async def park(self, groups: Sequence[ParkGroup], timeout_s: float) -> str | None:
        """One ``BLPOP`` per group at once until the first returns, the others then ended:
        "wake", "watch" or None. Cancelled (a stop): every call and its connection dropped."""
        self._keep_only(groups)
        lines = [await self._line(group) for group in groups]
        ended: list[bool] = []  # made true by appending: the calls not yet sent are not sent
        tasks = [asyncio.ensure_future(self._call(line, group, timeout_s, ended))
                 for line, group in zip(lines, groups, strict=True)]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            ended.append(True)
            if all(task.result() is None for task in done):  # the timeout: the others reach it
                await asyncio.wait(tasks, timeout=TIMEOUT_GRACE_S)
            if not all(task.done() for task in tasks):
                await self._unblock_all(lines, groups, tasks)
                await asyncio.wait(tasks, timeout=UNBLOCK_PATIENCE_S)
        except asyncio.CancelledError:
            self._abandon(lines, tasks)
            raise
        answers: list[Answer] = []
        for line, task in zip(lines, tasks, strict=True):
            if task.done():
                answers.append(task.result())
                if isinstance(answers[-1], BaseException):
                    self._discard(line)
                    await line.close()
            else:  # left to end by itself: a token it pops then goes back
                self._discard(line)
                task.add_done_callback(self._handing_back)
                self._leftovers.close_after(task, line.close)
        return verdict(answers)

    async def close(self) -> None:
        lines, self._lines = self._lines, {}
        for line in lines.values():
            await line.close()

    async def _call(self, line: AsyncLine, group: ParkGroup, timeout_s: float,
                    ended: list[bool]) -> Answer:
        """One group's ``BLPOP``: its answer, an error as a value."""
        if ended:
            return None
        line.blocked = True
        try:
            return answer_of(await line.client.blpop(group.keys, timeout=timeout_s))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return exc
        finally:
            line.blocked = False

    def _keep_only(self, groups: Sequence[ParkGroup]) -> None:
        wanted = {line_key(group) for group in groups}
        for key in [key for key in self._lines if key not in wanted]:
            self._leftovers.spawn(self._lines.pop(key).close())

    async def _line(self, group: ParkGroup) -> AsyncLine:
        key = line_key(group)
        line = self._lines.get(key)
        if line is None:
            client = async_node_client(self._conn, group.node, self._socket_timeout_s)
            try:
                client_id = int(await client.client_id())
            except BaseException:
                await client.aclose()
                raise
            line = self._lines[key] = AsyncLine(client, client_id)
        return line

    async def _unblock_all(self, lines: Sequence[AsyncLine], groups: Sequence[ParkGroup],
                           tasks: Sequence[asyncio.Future[Answer]]) -> None:
        """CLIENT UNBLOCK every call still blocked, on its node; where that is denied, or the
        call does not reach its server within the patience, a wake token on its group."""
        deadline = time.monotonic() + UNBLOCK_PATIENCE_S
        waiting = [(line, group, task) for line, group, task in zip(lines, groups, tasks,
                                                                    strict=True)]
        while waiting:
            still = []
            for line, group, task in waiting:
                if task.done() or not line.blocked:
                    continue
                unblocked = await self._unblock(line, group)
                if unblocked is None or (not unblocked and time.monotonic() > deadline):
                    await self._wake(group.wake_key)
                elif not unblocked:
                    still.append((line, group, task))
            waiting = still
            if waiting:
                await asyncio.sleep(0.002)  # the BLPOP is on its way to the server

    async def _unblock(self, line: AsyncLine, group: ParkGroup) -> bool | None:
        """CLIENT UNBLOCK ``line`` on its node: whether it was blocked; None if denied."""
        try:
            return bool(await self._conn.execute_command("CLIENT", "UNBLOCK", line.client_id,
                                                         target_nodes=group.node))
        except twins(redis.ResponseError):
            return None
        except twins(redis.RedisError):
            return False

    def _abandon(self, lines: Sequence[AsyncLine], tasks: Sequence[asyncio.Future[Answer]]
                 ) -> None:
        """A stop: every call cancelled, its line closed once it has unwound."""
        for line, task in zip(lines, tasks, strict=True):
            self._discard(line)
            task.cancel()
            self._leftovers.close_after(task, line.close)

    def _handing_back(self, task: asyncio.Future[Answer]) -> None:
        """A done callback for a call left running: a token it popped goes back where it came
        from."""
        if task.cancelled() or task.exception() is not None:
            return
        answer = task.result()
        if isinstance(answer, tuple):
            self._leftovers.spawn(self._push(*answer))

    def _discard(self, line: AsyncLine) -> None:
        for key, kept in list(self._lines.items()):
            if kept is line:
                del self._lines[key]
