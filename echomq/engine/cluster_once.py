"""Commands sent once through a cluster client (redis-py's or valkey-py's, blocking or asyncio).

A cluster client sends a command again after a connection error or a timeout, to the same node
or to the one its refreshed slot map names: for a transition, whose reply may have been lost
after it ran, that is a replay. Named as a call's target, a node is sent to once: the client still
follows MOVED and ASK and waits out TRYAGAIN (refusals, after which nothing ran), and refreshes
its slot map after a connection error, but raises that error instead of sending again. So each
command goes to the node of its first key's slot (every key of a queue shares its hash tag),
found here from the command itself. A refusal of the whole cluster (CLUSTERDOWN) is tried again,
as the client would: nothing ran.

The module's keynum key spec makes ``COMMAND INFO`` flag every ``EMQ.*`` command
``movablekeys``, and for such a command the client asks the server ``COMMAND GETKEYS`` whenever
it must find the slot itself: for a command sent without a target, and for one it follows after
MOVED. So before an ``EMQ.*`` command goes out, the client's own table of commands (its command
parser's, read from ``COMMAND`` when it connects) is told where that command's slot is: its
first key, after the key count (``hint``). The client then finds the slot itself, and a command
redirected by MOVED costs no extra round trip either.

A flush is sent command by command, in order (a cluster pipeline resends as the client does); a
server error is a reply of the flush, as from a pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ClusterDownError, ResponseError

from echomq.engine.clients import twins

Command = Sequence[Any]
# CLUSTERDOWN refusals tried again before the error is raised (the client's own default count).
CLUSTER_DOWN_TRIES = 3
_SCRIPT_CALLS = frozenset({"EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO"})


def _name(command: Command) -> str:
    """``command``'s name, upper case."""
    name = command[0].decode() if isinstance(command[0], bytes) else str(command[0])
    return name.upper()


def first_key(command: Command) -> Any | None:
    """The first key ``command`` names: after the key count of a script call or of an ``EMQ.*``
    command, else its first argument; None when it names none."""
    name = _name(command)
    if name in _SCRIPT_CALLS or name.startswith("EMQ."):
        count_at = 2 if name in _SCRIPT_CALLS else 1
        if len(command) <= count_at + 1 or not str(command[count_at]).isdigit() \
                or int(command[count_at]) < 1:
            return None
        return command[count_at + 1]
    return command[1] if len(command) > 1 else None


def hint(client: Any, command: Command) -> None:
    """Tells ``client``'s command parser that the ``EMQ.*`` command ``command`` has its slot's
    key right after the key count (``COMMAND INFO``'s first key position 2, the same for every
    call), in place of ``movablekeys``: the client then routes it, and follows a MOVED for it,
    without asking the server ``COMMAND GETKEYS``. Every key of a call shares the queue's hash
    tag, so the first is the slot's. Done again whenever the client has read its table afresh."""
    name = _name(command)
    table = getattr(getattr(client, "commands_parser", None), "commands", None)
    if not name.startswith("EMQ.") or not isinstance(table, dict):
        return
    entry = table.get(name.lower())
    if isinstance(entry, dict) and "movablekeys" in entry.get("flags", ()):
        table[name.lower()] = _first_key_entry(entry)


def _first_key_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` of a parser's table, its keys found at one fixed position: the first key."""
    flags = [flag for flag in entry["flags"] if flag != "movablekeys"]
    return {**entry, "flags": flags, "first_key_pos": 2, "last_key_pos": 2, "step_count": 1}


def _target(client: Any, command: Command) -> dict[str, Any]:
    """The ``target_nodes`` argument that sends ``command`` to its slot's node once; none for a
    command naming no key (sent as the client sends it)."""
    key = first_key(command)
    if key is None:
        return {}
    hint(client, command)
    return {"target_nodes": client.nodes_manager.get_node_from_slot(client.keyslot(key))}


def script_nodes(client: Any) -> list[Any]:
    """Where a script must be loaded for every transition to find it: each node ``client``'s
    slot map names as a slot's owner, and each node it takes for a primary. Not the primaries
    alone (where the client sends ``SCRIPT LOAD``): redis-py 5.0.1 takes a primary for a replica
    when a MOVED names the node its map already gives the slot (two threads redirected for one
    slot), and until its map is read again would leave that node out, which then answers the
    reloaded script's call with NOSCRIPT again."""
    found = {node.name: node for node in client.get_primaries()}
    for nodes in list(client.nodes_manager.slots_cache.values()):
        if nodes:
            found.setdefault(nodes[0].name, nodes[0])
    return list(found.values())


def send(client: Any, command: Command, **options: Any) -> Any:
    """The reply of ``command`` sent once through the blocking cluster ``client`` (``options``:
    what the client's reply callback of the command takes, as ``get=True`` for ``SET ... GET``)."""
    for tries_left in range(CLUSTER_DOWN_TRIES, -1, -1):
        try:
            return client.execute_command(*command, **options, **_target(client, command))
        except twins(ClusterDownError):
            if not tries_left:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def flush(client: Any, commands: Sequence[Command]) -> list[Any]:
    """A reply (or the server's error, not raised) per command, each sent once, in order."""
    replies: list[Any] = []
    for command in commands:
        try:
            replies.append(send(client, command))
        except twins(ResponseError) as exc:
            replies.append(exc)
    return replies


async def async_send(client: Any, command: Command, **options: Any) -> Any:
    """``send`` for an asyncio cluster client."""
    await client.initialize()  # its slot map, read at the first call
    for tries_left in range(CLUSTER_DOWN_TRIES, -1, -1):
        try:
            return await client.execute_command(*command, **options,
                                                **_target(client, command))
        except twins(ClusterDownError):
            if not tries_left:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def async_flush(client: Any, commands: Sequence[Command]) -> list[Any]:
    """``flush`` for an asyncio cluster client."""
    replies: list[Any] = []
    for command in commands:
        try:
            replies.append(await async_send(client, command))
        except twins(ResponseError) as exc:
            replies.append(exc)
    return replies
