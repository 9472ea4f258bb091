"""Transitions sent once: never through a client's automatic retry.

A redis-py client (every one from redis-py 6 by default, any built with a ``Retry``) sends a
command again when its connection fails after the command went out: the reply was lost, the
command perhaps applied. A transition is not a read: sent twice it is applied twice (an enqueue
then answers DUPLICATE for the job it admitted, a claim leases a second batch). So transitions go
out here instead: on a connection of the client's own pool, written once and their replies read
once. A connection error is raised as it comes, the connection closed (the pool makes a fresh
one); the caller decides what to do, and the consumer's own retries are replay-safe
(docs/PROTOCOL.md, "Replays"). Health checks and reconnects, which send nothing of the call,
keep the client's own policy.

A standalone client, blocking or asyncio, takes this path: anything with a connection pool and
``parse_response`` that is not a pipeline (redis-py's clients, and forks of them). A cluster
client (``echomq.engine.cluster_once``) sends each command to the node of its keys' slot, named as
the
call's target: the client then follows MOVED, ASK and TRYAGAIN (refusals: nothing ran) but never
sends it again after a connection error. Any other client is sent to as it sends.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from echomq.engine import cluster_once
from echomq.engine.clients import is_cluster, twins

Command = Sequence[Any]
# The errors after which a call sent may have been applied without its reply reaching us.
LOST_REPLY: tuple[type[Exception], ...] = (ConnectionError, TimeoutError)


def lost_reply() -> tuple[type[BaseException], ...]:
    """``LOST_REPLY`` from either client library (``echomq.engine.clients.twins``)."""
    return twins(*LOST_REPLY)


def sends_once(client: Any) -> bool:
    """Whether ``client`` is one this module sends on (a standalone client, not a pipeline)."""
    return hasattr(client, "connection_pool") and hasattr(client, "parse_response") \
        and not hasattr(client, "command_stack")


def pool_args(pool: Any, name: Any) -> tuple[Any, ...]:
    """What ``get_connection`` takes: the command's name up to redis-py 5.2 (required), nothing
    from 5.3 (where passing it is deprecated)."""
    try:
        parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    except (TypeError, ValueError):
        return (name,)
    if parameter is None or parameter.default is not inspect.Parameter.empty:
        return ()
    return (name,)


def send_once(client: Any, *command: Any) -> Any:
    """The reply of ``command`` sent once on ``client`` (its server error raised as such)."""
    if is_cluster(client):
        return cluster_once.send(client, command)
    if not sends_once(client):
        return client.execute_command(*command)
    with _borrowed(client, command[0]) as conn:
        conn.send_command(*command)
        return client.parse_response(conn, command[0])


def flush_once(client: Any, commands: Sequence[Command]) -> list[Any]:
    """A reply (or the server's error, not raised) per command, sent together once."""
    if not commands:
        return []
    if is_cluster(client):
        return cluster_once.flush(client, commands)
    if not sends_once(client):
        with client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies
    with _borrowed(client, commands[0][0]) as conn:
        conn.send_packed_command(conn.pack_commands(commands))
        return [reply_or_error(client, conn, command[0]) for command in commands]


def reply_or_error(client: Any, conn: Any, name: Any) -> Any:
    try:
        return client.parse_response(conn, name)
    except twins(ResponseError) as exc:
        return exc


@contextmanager
def _borrowed(client: Any, name: Any) -> Iterator[Any]:
    """A connection of ``client`` for one exchange: its single connection (under its lock) or
    one of its pool's. Anything but a server error closes it: its reply may still be coming."""
    single = getattr(client, "connection", None)
    lock = getattr(client, "single_connection_lock", None) if single is not None else None
    pool = client.connection_pool
    conn = single if single is not None else pool.get_connection(*pool_args(pool, name))
    if lock is not None:
        lock.acquire()
    try:
        yield conn
    except twins(ResponseError):
        raise
    except BaseException:
        conn.disconnect()
        raise
    finally:
        if lock is not None:
            lock.release()
        if single is None:
            pool.release(conn)


async def async_send_once(client: Any, *command: Any) -> Any:
    """``send_once`` for an asyncio client."""
    if is_cluster(client):
        return await cluster_once.async_send(client, command)
    if not sends_once(client):
        return await client.execute_command(*command)
    conn, single = await _async_borrow(client, command[0])
    try:
        await conn.send_command(*command)
        return await client.parse_response(conn, command[0])
    except twins(ResponseError):
        raise
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await _async_give_back(client, conn, single)


async def async_flush_once(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``flush_once`` for an asyncio client."""
    if not commands:
        return []
    if is_cluster(client):
        return await cluster_once.async_flush(client, commands)
    if not sends_once(client):
        async with client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies
    conn, single = await _async_borrow(client, commands[0][0])
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        return [await _async_reply(client, conn, command[0]) for command in commands]
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await _async_give_back(client, conn, single)


async def _async_reply(client: Any, conn: Any, name: Any) -> Any:
    try:
        return await client.parse_response(conn, name)
    except twins(ResponseError) as exc:
        return exc


async def _async_borrow(client: Any, name: Any) -> tuple[Any, bool]:
    """A connection for one exchange, and whether it is the client's single connection (then
    held under its lock until given back)."""
    if getattr(client, "single_connection_client", False):
        await client.initialize()
    single = getattr(client, "connection", None)
    if single is not None:
        await client._single_conn_lock.acquire()
        return single, True
    pool = client.connection_pool
    return await pool.get_connection(*pool_args(pool, name)), False


async def _async_give_back(client: Any, conn: Any, single: bool) -> None:
    if single:
        client._single_conn_lock.release()
    else:
        await client.connection_pool.release(conn)


class Sent:
    """A command (or a flush of commands) written once on a connection of a client's pool, whose
    reply is read later (``reply``): what a caller does meanwhile overlaps the round trip. The
    connection stays out of the pool until then; anything but a server error closes it."""

    def __init__(self, client: Any, commands: Sequence[Command], flush: bool) -> None:
        self._client, self._commands, self._flush = client, commands, flush
        pool = client.connection_pool
        self._conn = pool.get_connection(*pool_args(pool, commands[0][0]))
        try:
            if flush:
                self._conn.send_packed_command(self._conn.pack_commands(commands))
            else:
                self._conn.send_command(*commands[0])
        except BaseException:
            self._give_back(broken=True)
            raise

    def _give_back(self, *, broken: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if broken:
            conn.disconnect()
        self._client.connection_pool.release(conn)

    def reply(self) -> Any:
        """The reply (``send_once``'s, or ``flush_once``'s list), read now."""
        client, conn = self._client, self._conn
        if conn is None:
            raise ConnectionError("the reply of a command sent ahead was read already")
        broken = True
        try:
            if self._flush:
                replies = [reply_or_error(client, conn, command[0]) for command in self._commands]
            else:
                try:
                    replies = client.parse_response(conn, self._commands[0][0])
                except twins(ResponseError):
                    broken = False
                    raise
            broken = False
            return replies
        finally:
            self._give_back(broken=broken)

    def close(self) -> None:
        """Forget the reply: the connection is closed (its reply may still be coming)."""
        self._give_back(broken=True)


def sends_ahead(client: Any) -> bool:
    """Whether a command can be written on ``client`` now and its reply read later: a standalone
    blocking client with a pool of connections (not one single connection, a cluster, or a
    pipeline)."""
    return sends_once(client) and getattr(client, "connection", None) is None \
        and not is_cluster(client) and not _waits_for_connections(client.connection_pool)


def _waits_for_connections(pool: Any) -> bool:
    """Whether ``pool`` makes a caller wait for a connection when all are out (a blocking pool):
    one held for a reply read later could then hold up the caller's own handler."""
    return "Blocking" in type(pool).__name__
