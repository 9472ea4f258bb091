"""Transactions sent once: ``MULTI``, the commands, ``EXEC``, written once on one connection and
their replies read once (``echomq.engine.once`` says why a transition is never sent again).

Every command of a transaction names keys of one queue, so of one slot: on a cluster, the
transaction goes to the node of that slot, on a connection of that node's own (a cluster
client's pipeline holds no transaction on every client library and version). A command the
server refuses as it queues it (a slot that moved: MOVED) makes it refuse the whole transaction
(EXECABORT), and each command's reply is then that refusal: nothing ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from echomq.engine.clients import is_cluster, twins
from echomq.engine.cluster_once import first_key
from echomq.engine.once import _async_borrow, _async_give_back, _borrowed, sends_once

Command = Sequence[Any]


def transact_once(client: Any, commands: Sequence[Command]) -> list[Any]:
    """A reply (or the server's error, not raised) per command, run as one transaction."""
    if is_cluster(client):
        client = _node_client(client, _node_of(client, commands))
    if not sends_once(client):
        with client.pipeline(transaction=True) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies
    with _borrowed(client, "MULTI") as conn:
        conn.send_packed_command(conn.pack_commands(_wrapped(commands)))
        queued = [_read(conn) for _ in range(len(commands) + 1)]
        return _replies(queued, _read(conn), len(commands))


async def async_transact_once(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``transact_once`` for an asyncio client."""
    if is_cluster(client):
        await client.initialize()
        return await _on_node(_node_of(client, commands), commands)
    if not sends_once(client):
        async with client.pipeline(transaction=True) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies
    conn, single = await _async_borrow(client, "MULTI")
    try:
        return await _async_exchange(conn, commands)
    finally:
        await _async_give_back(client, conn, single)


async def _on_node(node: Any, commands: Sequence[Command]) -> list[Any]:
    """The transaction on a connection of an asyncio cluster client's ``node``."""
    conn = node.acquire_connection()
    try:
        return await _async_exchange(conn, commands)
    finally:
        release = getattr(node, "release", None)
        if release is not None:
            release(conn)
        else:  # valkey-py's node keeps its free connections in a deque, with no method
            node._free.append(conn)


async def _async_exchange(conn: Any, commands: Sequence[Command]) -> list[Any]:
    """The transaction written and read on ``conn``; anything but a server error closes it (its
    replies may still be coming)."""
    try:
        await conn.send_packed_command(conn.pack_commands(_wrapped(commands)))
        queued = [await _async_read(conn) for _ in range(len(commands) + 1)]
        return _replies(queued, await _async_read(conn), len(commands))
    except BaseException:
        await conn.disconnect()
        raise


def _node_of(client: Any, commands: Sequence[Command]) -> Any:
    """The node serving the slot of the transaction's keys (its first command's first key)."""
    key = first_key(commands[0])
    return client.nodes_manager.get_node_from_slot(client.keyslot(key))


def _node_client(client: Any, node: Any) -> Any:
    """The standalone client a blocking cluster client keeps for ``node`` (redis-py's and
    valkey-py's name it after their own library)."""
    of_node = getattr(client, "get_redis_connection", None) or client.get_valkey_connection
    return of_node(node)


def _wrapped(commands: Sequence[Command]) -> list[Command]:
    return [("MULTI",), *commands, ("EXEC",)]


def _read(conn: Any) -> Any:
    try:
        return conn.read_response()
    except twins(ResponseError) as exc:
        return exc


async def _async_read(conn: Any) -> Any:
    try:
        return await conn.read_response()
    except twins(ResponseError) as exc:
        return exc


def _replies(queued: list[Any], executed: Any, count: int) -> list[Any]:
    """Each command's reply: EXEC's, or, when the server refused the transaction, the refusal
    each command met as it was queued (or EXEC's own, for one it queued)."""
    if isinstance(executed, list) and len(executed) == count:
        return executed
    refusals = queued[1:]
    return [reply if isinstance(reply, Exception) else executed for reply in refusals]
