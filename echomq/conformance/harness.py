"""Runs the same raw argument list on both executors and compares what they did.

Both executors work in one database, each in scratch keys of its own: every key a call names is
prefixed with the executor's scratch prefix (``{emqconf-<token>-lua}`` or ``…-native}``). A
prefix common to all of a call's keys keeps the call exactly as valid as it was (a queue's keys
are a base plus fixed suffixes, so the base just grows the prefix), and the cases stay written
on readable bases (``emq:{q}:``); snapshots strip the prefix again. A call's argument list starts
at numkeys, so malformed lists are sent exactly as a client would. Replies are compared as raw
RESP bytes; keyspaces by snapshot of the executor's scratch keys, and nothing else is read,
written or deleted: the harness runs on servers it did not start.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import hiredis

from echomq.conformance.model import numkeys_of, raw
from echomq.conformance.resp import Address, Arg, RawConnection, parse
from echomq.engine.scripts import script_for
from echomq.engine.transitions import TRANSITIONS, Transition

EXECUTORS = ("lua", "native")
# Transitions whose "native" side runs the script too, named (comma-separated) by the environment
# variable ECHOMQ_CONFORMANCE_SCRIPTS_ONLY: the script side of transitions whose C is not written
# yet is judged against the table and the model alone. Unset (the default): both executors.
SCRIPTS_ONLY = frozenset(
    os.environ.get("ECHOMQ_CONFORMANCE_SCRIPTS_ONLY", "").replace(" ", "").split(",")) - {""}
_LEADING_DIGITS = re.compile(rb"[0-9]+")
BY_NAME = {t.name: t for t in TRANSITIONS}
Snapshot = dict[bytes, tuple[Any, ...]]


class ParityError(AssertionError):
    """The executors disagreed, or a case's reply was not the one its table expects."""


class ScratchNotEmpty(RuntimeError):
    """Keys under a scratch prefix that this run did not leave there: nothing is touched."""


def command_for(executor: str, transition: Transition, argv: Sequence[Arg]) -> list[Arg]:
    """The full command of ``executor`` ("lua" or "native") for ``argv`` (numkeys onwards)."""
    if executor == "lua":
        return ["EVALSHA", script_for(transition).sha, *argv]
    assert transition.native is not None
    return [transition.native, *argv]


class Scratch:
    """The key prefixes of one run: unique per run (a random token), one per executor."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or f"emqconf-{secrets.token_hex(6)}"
        self.pattern = b"{" + self.token.encode() + b"-*"

    def prefix(self, executor: str) -> bytes:
        return b"{" + self.token.encode() + b"-" + executor.encode() + b"}"

    def keys_of(self, executor: str, argv: Sequence[Arg]) -> list[Arg]:
        """``argv`` (numkeys onwards) with its keys in ``executor``'s scratch space. A numkeys the
        command refuses names no keys, but the server's ACL check reads its leading digits as a
        count ("1.5" as 1), so those words move too: a user allowed only scratch keys gets the
        command's own error, not NOPERM."""
        if not argv:
            return []
        word = raw(argv[0])
        count = numkeys_of(word)
        if count is None:
            digits = _LEADING_DIGITS.match(word)
            count = int(digits.group()) if digits else 0
        if not 0 <= count <= len(argv) - 1:
            return list(argv)
        prefix = self.prefix(executor)
        return [argv[0], *(prefix + raw(k) for k in argv[1:1 + count]), *argv[1 + count:]]

    def data_command(self, executor: str, command: Sequence[Arg]) -> list[Arg]:
        """A raw data command (``HSET key …``, ``ZADD key …``, ``DEL key``) on scratch keys."""
        return [command[0], self.prefix(executor) + raw(command[1]), *command[2:]]

    def canonical(self, executor: str, key: bytes) -> bytes:
        prefix = self.prefix(executor)
        return key[len(prefix):] if key.startswith(prefix) else key

    def clear(self, conn: RawConnection) -> int:
        """Deletes every key of this run (its token is its own); how many there were."""
        found = scan(conn, self.pattern)
        for start in range(0, len(found), 500):
            conn.call("DEL", *found[start:start + 500])
        return len(found)


def scan(conn: RawConnection, match: bytes = b"*") -> list[bytes]:
    """Every key matching ``match``, by SCAN (never KEYS: the server may be someone's)."""
    found: list[bytes] = []
    cursor = b"0"
    while True:
        cursor, batch = parse(conn.call("SCAN", cursor, "MATCH", match, "COUNT", 1000))
        found.extend(batch)
        if cursor == b"0":
            return sorted(set(found))


def snapshot(conn: RawConnection, match: bytes = b"*") -> Snapshot:
    """Every key matching ``match`` in the selected db: its type, contents and whether it
    expires. Two round trips after the SCAN: every key's TYPE and PTTL, then every value."""
    keys = scan(conn, match)
    heads = conn.replies([(verb, key) for key in keys for verb in ("TYPE", "PTTL")])
    kinds = heads[::2]
    values = conn.replies([value_command(kind, key) for kind, key in zip(kinds, keys, strict=True)])
    # Whether it has a TTL: PTTL 0 is a key in its last millisecond, -2 one that expired since it
    # was listed (nothing else deletes scratch keys); only -1 is a key without one.
    return {key: (kind, shaped(kind, value), ttl != -1)
            for key, kind, value, ttl in zip(keys, kinds, values, heads[1::2], strict=True)}


# How a key of each type is read whole: the verb, then what follows the key.
READS: dict[bytes, tuple[Arg, ...]] = {
    b"hash": ("HGETALL",), b"zset": ("ZRANGE", "0", "-1", "WITHSCORES"),
    b"list": ("LRANGE", "0", "-1"), b"string": ("GET",), b"set": ("SMEMBERS",),
    b"stream": ("XRANGE", "-", "+")}


def value_command(kind: bytes, key: bytes) -> tuple[Arg, ...]:
    """The command that reads a key of type ``kind`` whole (DUMP for a type not listed)."""
    verb, *tail = READS.get(kind, ("DUMP",))
    return (verb, key, *tail)


def shaped(kind: bytes, value: Any) -> Any:
    """A value as snapshots compare it: a hash's and a set's members sorted, a stream's entries
    without their ids."""
    if kind == b"hash":
        return sorted(zip(value[::2], value[1::2], strict=True))
    if kind == b"set":
        return sorted(value)
    if kind == b"stream":
        return stream_entries(value)
    return value


def stream_entries(entries: list[list[Any]]) -> list[tuple[bytes, ...]]:
    """A stream's entries (XRANGE's reply) as their field lists in id order: the ids carry the
    server's clock, so only their order is compared, and it must strictly increase."""
    ids = [tuple(int(part) for part in entry_id.split(b"-")) for entry_id, _ in entries]
    if any(later <= earlier for earlier, later in itertools.pairwise(ids)):
        raise ParityError(f"stream ids do not increase: {ids!r}")
    return [tuple(fields) for _, fields in entries]


@dataclass
class Outcome:
    reply: bytes
    before: Snapshot
    after: Snapshot


class Pair:
    """Both executors side by side on one server, speaking ``protocol`` (2 or 3), each in its own
    scratch keys of ``scratch`` (a fresh one by default)."""

    def __init__(self, server: int | Address, protocol: int,
                 scratch: Scratch | None = None) -> None:
        address = server if isinstance(server, Address) else Address(port=server)
        self.protocol = protocol
        self.scratch = scratch or Scratch()
        # Every scratch key seen in a snapshot or written by a setup: what reset may delete.
        self.seen: dict[str, set[bytes]] = {name: set() for name in EXECUTORS}
        self.lua = RawConnection.to(address, protocol)
        self.native = RawConnection.to(address, protocol)
        # Snapshots read through a RESP2 connection, so both protocols are compared alike.
        self.inspect = RawConnection.to(address, 2)
        for transition in TRANSITIONS:
            loaded = self.lua.call("SCRIPT", "LOAD", script_for(transition).source)
            if loaded.startswith(b"-"):
                self.close()
                reason = loaded.decode(errors="replace").strip()
                raise RuntimeError(f"SCRIPT LOAD refused: {reason}")

    def both(self) -> tuple[tuple[str, RawConnection], ...]:
        return (("lua", self.lua), ("native", self.native))

    def reset(self, setup: Sequence[Sequence[Arg]] = ()) -> None:
        """Deletes the scratch keys this pair has seen, checks that none is left under either
        executor's prefix (a key there it did not make is refused, not deleted), applies
        ``setup``."""
        for name, _ in self.both():
            self.forget(name)
            left = scan(self.inspect, self.scratch.prefix(name) + b"*")
            if left:
                raise ScratchNotEmpty(f"keys this run did not make are under its scratch prefix: "
                                      f"{left[:3]!r}; they were left alone")
        self.apply(setup)

    def forget(self, executor: str) -> None:
        """Deletes the scratch keys of ``executor`` this pair has seen."""
        seen = sorted(self.seen[executor])
        self.inspect.replies([("DEL", *seen[start:start + 500])
                              for start in range(0, len(seen), 500)])
        self.seen[executor].clear()

    def apply(self, commands: Iterable[Sequence[Arg]]) -> None:
        """Raw data commands (key second) on both executors' scratch keys, in order, sent in one
        write to each; each must succeed."""
        commands = list(commands)
        for name, conn in self.both():
            scratch_commands = [self.scratch.data_command(name, command) for command in commands]
            self.seen[name].update(raw(command[1]) for command in scratch_commands)
            for command, reply in zip(commands, conn.replies(scratch_commands), strict=True):
                if isinstance(reply, hiredis.ReplyError):
                    raise RuntimeError(f"setup command {command!r} refused: -{reply}")

    def snapshot(self, executor: str) -> Snapshot:
        """The keyspace of ``executor`` ("lua" or "native"), keys without the scratch prefix."""
        taken = snapshot(self.inspect, self.scratch.prefix(executor) + b"*")
        self.seen[executor].update(taken)
        return {self.scratch.canonical(executor, key): value for key, value in taken.items()}

    def command(self, executor: str, transition: Transition, argv: Sequence[Arg]) -> list[Arg]:
        """``executor``'s full command for ``argv``, its keys in the executor's scratch space."""
        return command_for(executor, transition, self.scratch.keys_of(executor, argv))

    def run(self, transition: Transition, argv: Sequence[Arg],
            scripts_only: bool = False) -> dict[str, Outcome]:
        """``argv`` on both executors; with ``scripts_only`` the script runs on both (for the
        transitions without a native twin)."""
        outcomes = {}
        for name, conn in self.both():
            before = self.snapshot(name)
            executor = "lua" if scripts_only or transition.name in SCRIPTS_ONLY else name
            reply = conn.call(*command_for(executor, transition,
                                           self.scratch.keys_of(name, argv)))
            outcomes[name] = Outcome(reply, before, self.snapshot(name))
        return outcomes

    def close(self) -> None:
        """Deletes the scratch keys this pair has seen (when the server still answers), then
        closes its connections."""
        try:
            for name in EXECUTORS:
                self.forget(name)
        except OSError:
            pass
        finally:
            for conn in (self.lua, self.native, self.inspect):
                conn.close()


WINDOW = 24


def reply_difference(lua: bytes, native: bytes) -> str | None:
    """Where two replies first differ, with a short window of each; None when equal."""
    if lua == native:
        return None
    at = next((i for i, (a, b) in enumerate(zip(lua, native, strict=False)) if a != b),
              min(len(lua), len(native)))
    start = max(0, at - 8)
    return (f"replies differ at byte {at}: lua {lua[start:at + WINDOW]!r} "
            f"native {native[start:at + WINDOW]!r}")


def keyspace_differences(lua: Snapshot, native: Snapshot, limit: int = 5) -> list[str]:
    """The keys whose presence, type, contents or expiry differ, at most ``limit`` of them."""
    lines = []
    for key in sorted(set(lua) | set(native)):
        if lua.get(key) == native.get(key):
            continue
        if key not in native:
            lines.append(f"key {key!r} only on lua: {_short(lua[key])}")
        elif key not in lua:
            lines.append(f"key {key!r} only on native: {_short(native[key])}")
        else:
            lines.append(f"key {key!r}: lua {_short(lua[key])} native {_short(native[key])}")
    return lines[:limit] + ([f"... and {len(lines) - limit} more keys"]
                            if len(lines) > limit else [])


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def parity_differences(outcomes: dict[str, Outcome]) -> list[str]:
    """What differs between the executors: the reply bytes, the keyspaces, and whether a
    refusal changed anything (it must not). Empty when they agree."""
    lua, native = outcomes["lua"], outcomes["native"]
    found = [line for line in [reply_difference(lua.reply, native.reply)] if line]
    found += keyspace_differences(lua.after, native.after)
    for name, outcome in outcomes.items():
        if outcome.reply.startswith(b"-") and outcome.after != outcome.before:
            found.append(f"{name}: a refused call changed the keyspace")
    return found


def assert_parity(outcomes: dict[str, Outcome], context: object = "") -> bytes:
    """Both executors sent the same bytes and left the same keyspace; a refusal changed nothing.
    Returns the common reply."""
    found = parity_differences(outcomes)
    if found:
        raise ParityError(f"{context}: " + "; ".join(found))
    return outcomes["lua"].reply
