"""Runs the same raw argument list on both executors and compares what they did.

Each executor gets its own logical database on one server: db 1 runs the Lua twin by EVALSHA,
db 2 the native EMQ.* command. A call's argument list starts at numkeys, so malformed lists can be
sent exactly as a client would. Replies are compared as raw RESP bytes; keyspaces by snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.scripts import script_for
from echomq.transitions import TRANSITIONS, Transition
from tests.resp import Arg, RawConnection

SCRIPT_DB, NATIVE_DB = 1, 2
BY_NAME = {t.name: t for t in TRANSITIONS}


def command_for(executor: str, transition: Transition, argv: Sequence[Arg]) -> list[Arg]:
    """The full command of ``executor`` ("lua" or "native") for ``argv`` (numkeys onwards)."""
    if executor == "lua":
        return ["EVALSHA", script_for(transition).sha, *argv]
    assert transition.native is not None
    return [transition.native, *argv]


Snapshot = dict[bytes, tuple[Any, ...]]


def snapshot(conn: RawConnection) -> Snapshot:
    """Every key of the selected db: its type, its contents and whether it expires."""
    import hiredis

    def parsed(*args: Arg) -> Any:
        reader = hiredis.Reader()
        reader.feed(conn.call(*args))
        return reader.gets()

    state: Snapshot = {}
    for key in parsed("KEYS", "*"):
        kind = parsed("TYPE", key)
        if kind == b"hash":
            flat = parsed("HGETALL", key)
            value: Any = sorted(zip(flat[::2], flat[1::2], strict=True))
        elif kind == b"zset":
            value = parsed("ZRANGE", key, "0", "-1", "WITHSCORES")
        elif kind == b"list":
            value = parsed("LRANGE", key, "0", "-1")
        elif kind == b"string":
            value = parsed("GET", key)
        else:
            value = parsed("DUMP", key)
        state[key] = (kind, value, parsed("PTTL", key) > 0)
    return state


@dataclass
class Outcome:
    reply: bytes
    before: Snapshot
    after: Snapshot


class Pair:
    """Both executors side by side on one server, speaking ``protocol`` (2 or 3)."""

    def __init__(self, port: int, protocol: int) -> None:
        self.protocol = protocol
        self.lua = RawConnection(port, protocol, SCRIPT_DB)
        self.native = RawConnection(port, protocol, NATIVE_DB)
        # Snapshots read through RESP2 connections, so both protocols are compared alike.
        self.inspect = {"lua": RawConnection(port, 2, SCRIPT_DB),
                        "native": RawConnection(port, 2, NATIVE_DB)}
        for transition in TRANSITIONS:
            self.lua.call("SCRIPT", "LOAD", script_for(transition).source)

    def both(self) -> tuple[tuple[str, RawConnection], ...]:
        return (("lua", self.lua), ("native", self.native))

    def reset(self, setup: Sequence[Sequence[Arg]] = ()) -> None:
        for _, conn in self.both():
            conn.call("FLUSHDB")
            for command in setup:
                reply = conn.call(*command)
                assert not reply.startswith(b"-"), (command, reply)

    def snapshot(self, executor: str) -> Snapshot:
        """The keyspace of ``executor``'s db ("lua" or "native")."""
        return snapshot(self.inspect[executor])

    def run(self, transition: Transition, argv: Sequence[Arg]) -> dict[str, Outcome]:
        outcomes = {}
        for name, conn in self.both():
            before = self.snapshot(name)
            reply = conn.call(*command_for(name, transition, argv))
            outcomes[name] = Outcome(reply, before, self.snapshot(name))
        return outcomes

    def close(self) -> None:
        for conn in (self.lua, self.native, *self.inspect.values()):
            conn.close()


def assert_parity(outcomes: dict[str, Outcome], context: object = "") -> bytes:
    """Both executors sent the same bytes and left the same keyspace; a refusal changed nothing.
    Returns the common reply."""
    lua, native = outcomes["lua"], outcomes["native"]
    assert native.reply == lua.reply, f"{context}: replies differ"
    assert native.after == lua.after, f"{context}: keyspaces differ"
    if lua.reply.startswith(b"-"):
        assert lua.after == lua.before, f"{context}: a refused call changed the keyspace"
    return lua.reply
