"""Commands of several slots sent once each to a Valkey Cluster in one round: grouped by their
slot's node (as the client's slot map gives it), every node's group written on a connection of
that node before any reply is read, so a round costs one round trip whatever number of nodes
it reaches. Used for a spread consumer's round (``echomq.consumer.settle_all``).

Each command gets its own reply: what it answered, its server error (a ``MOVED`` or ``ASK``
among them: nothing ran, the caller sends it again through the cluster client, which follows
it), or the exception its node's connection met, none raised. A node that is down fails its own
commands only. As in ``echomq.engine.once``, nothing is ever sent twice: a command whose reply
was lost may have run, and it is the caller's to know what that means.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import AskError, MovedError, ResponseError

from echomq.engine.clients import twins
from echomq.engine.cluster_once import first_key, hint
from echomq.engine.errors import reply_code
from echomq.engine.once import Command, pool_args, reply_or_error

__all__ = ["CommandList", "async_scatter", "async_scatter_reads", "redirected", "scatter",
           "scatter_reads"]


class CommandList:
    """Commands queued as on a pipeline (``execute_command`` only), kept to be sent another way:
    a cluster consumer's reads before a park go out by ``scatter_reads``."""

    def __init__(self) -> None:
        self.commands: list[Command] = []

    def execute_command(self, *command: Any) -> None:
        self.commands.append(command)


def scatter_reads(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``scatter`` for reads (or writes that may be sent again): one a ``MOVED`` or ``ASK``
    refused is sent again through the cluster ``client``, which follows it (and reads its slot
    map afresh). A node that is down fails its own commands at once, never waiting out the
    client's retries."""
    replies = scatter(client, commands)
    for place in _redirected_places(replies):
        try:
            replies[place] = client.execute_command(*commands[place])
        except Exception as exc:
            replies[place] = exc
    return replies


async def async_scatter_reads(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``scatter_reads`` through an asyncio cluster ``client``."""
    replies = await async_scatter(client, commands)
    for place in _redirected_places(replies):
        try:
            replies[place] = await client.execute_command(*commands[place])
        except Exception as exc:
            replies[place] = exc
    return replies


def _redirected_places(replies: Sequence[Any]) -> list[int]:
    """The places of the commands a ``MOVED`` or ``ASK`` refused, to send again."""
    return [place for place, reply in enumerate(replies) if redirected(reply)]


@dataclass
class Group:
    """The commands (by their place in the round) bound for one node."""

    node: Any
    places: list[int] = field(default_factory=list)


def redirected(reply: Any) -> bool:
    """Whether ``reply`` is a ``MOVED`` or ``ASK`` refusal: the command did not run (a node's
    connection made by the cluster client parses them to their classes; another, to a plain
    server error)."""
    if isinstance(reply, twins(AskError, MovedError)):
        return True
    return isinstance(reply, twins(ResponseError)) and reply_code(reply) in ("MOVED", "ASK")


def _groups(client: Any, commands: Sequence[Command], replies: list[Any]) -> list[Group]:
    """``commands`` by the node of their first key's slot; one whose node cannot be told (a
    slot no node covers) has that error for its reply at once."""
    groups: dict[str, Group] = {}
    for place, command in enumerate(commands):
        try:
            hint(client, command)
            node = client.nodes_manager.get_node_from_slot(client.keyslot(first_key(command)))
        except Exception as exc:
            replies[place] = exc
            continue
        groups.setdefault(node.name, Group(node)).places.append(place)
    return list(groups.values())


def _failed(replies: list[Any], places: Iterator[int] | Sequence[int], exc: Exception) -> None:
    for place in places:
        replies[place] = exc


def scatter(client: Any, commands: Sequence[Command]) -> list[Any]:
    """A reply each for ``commands`` sent once through the blocking cluster ``client``, every
    node's group written before any reply is read."""
    replies: list[Any] = [None] * len(commands)
    written: list[tuple[Any, Any, Group]] = []
    of_node = getattr(client, "get_redis_connection", None) or client.get_valkey_connection
    for group in _groups(client, commands, replies):
        node_client = of_node(group.node)
        pool = node_client.connection_pool
        try:
            conn = pool.get_connection(*pool_args(pool, commands[group.places[0]][0]))
        except Exception as exc:
            _failed(replies, group.places, exc)
            continue
        try:
            conn.send_packed_command(conn.pack_commands([commands[p] for p in group.places]))
        except Exception as exc:
            conn.disconnect()
            pool.release(conn)
            _failed(replies, group.places, exc)
            continue
        written.append((node_client, conn, group))
    for node_client, conn, group in written:
        places = iter(group.places)
        try:
            for place in places:
                replies[place] = reply_or_error(node_client, conn, commands[place][0])
        except Exception as exc:
            conn.disconnect()  # the replies still coming are unread
            replies[place] = exc
            _failed(replies, places, exc)
        finally:
            node_client.connection_pool.release(conn)
    return replies


async def async_scatter(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``scatter`` through an asyncio cluster ``client``."""
    await client.initialize()  # its slot map, read at the first call
    replies: list[Any] = [None] * len(commands)
    written: list[tuple[Any, Any, Group]] = []
    for group in _groups(client, commands, replies):
        try:
            conn = group.node.acquire_connection()
        except Exception as exc:
            _failed(replies, group.places, exc)
            continue
        try:
            await conn.send_packed_command(
                conn.pack_commands([commands[p] for p in group.places]), False)
        except Exception as exc:
            await conn.disconnect()
            _give_back(group.node, conn)
            _failed(replies, group.places, exc)
            continue
        written.append((group.node, conn, group))
    for node, conn, group in written:
        places = iter(group.places)
        try:
            for place in places:
                replies[place] = await _async_reply(node, conn, commands[place][0])
        except Exception as exc:
            await conn.disconnect()
            replies[place] = exc
            _failed(replies, places, exc)
        finally:
            _give_back(node, conn)
    return replies


async def _async_reply(node: Any, conn: Any, name: Any) -> Any:
    try:
        return await node.parse_response(conn, name)
    except twins(ResponseError) as exc:
        return exc


def _give_back(node: Any, conn: Any) -> None:
    """Return ``conn`` to its asyncio cluster node: ``release`` where the node has it (redis-py
    from 5.1), its free list before."""
    release = getattr(node, "release", None)
    if release is not None:
        release(conn)
    else:
        node._free.append(conn)
