"""A third executor, in plain Python, over a model keyspace: the oracle of the property tests
and of the conformance runner's random sequence.

``Model.call(transition, argv)`` validates ``argv`` (numkeys onwards) in the order
docs/PROTOCOL.md gives, applies the transition to its keyspace and returns the raw RESP reply the
server must send. ``Model.render()`` gives the keyspace in the shape ``normalise`` gives a
harness snapshot, so tests compare the model with both servers' databases key by key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from echomq.conformance.resp import Arg
from echomq.engine.transitions import Transition

INT_MAX = 999_999_999_999_999
FENCE_MAX = INT_MAX - 1
WAKE_CAP = 64
LLONG_MAX = 2**63 - 1

E_KIND = b"EMQKIND job id must be JOB:<rest> with <rest> 1 to 200 bytes of A-Z a-z 0-9 . _ : -"
E_KEYS = b"EMQKEYS keys must be one queue's keys in the documented order"
E_TYPE = b"WRONGTYPE Operation against a key holding the wrong kind of value"
E_NOW = b"EMQNUM now must be * or an integer from 0 to 999999999999999"
E_FENCE = b"EMQFENCE the fence counter must hold an integer from 0 to 999999999999998"
E_RESULT = b"EMQSIZE result must be at most 524288 bytes"
RESULT_MAX = 524288
E_NOTINT = b"ERR value is not an integer or out of range"
E_NEGATIVE = b"ERR Number of keys can't be negative"
E_TOOMANY = b"ERR Number of keys can't be greater than number of args"

# The single verbs that may end a job (done keeping a result, or dead): they check its ended key.
ENDING = ("ack_result", "retry")
# The minimum of every integer argument; "now" and free-form bytes are absent.
MINIMUM = {"fence": 1, "lease_ms": 1, "retention_ms": 0, "delay_ms": 0, "max_attempts": 1,
           "limit": 1, "count": 0, "at_ms": 0}
KEY_TYPE = {"job": b"hash", "pending": b"zset", "active": b"zset", "delayed": b"zset",
            "dead": b"zset", "ring": b"list", "wake": b"list", "fence": b"string"}

_ID = re.compile(rb"JOB:[A-Za-z0-9._:-]{1,200}\Z")
_LANE = re.compile(rb"[A-Za-z0-9._:-]{1,200}\Z")
_INT = re.compile(rb"[0-9]{1,15}\Z")
_LL = re.compile(rb"(-?[1-9][0-9]*|0)\Z")


def raw(arg: Arg) -> bytes:
    return arg if isinstance(arg, bytes) else str(arg).encode()


def id_ok(value: bytes) -> bool:
    return _ID.match(value) is not None


def int_arg(value: bytes, minimum: int) -> int | None:
    """An integer argument (1-15 ASCII digits, at least ``minimum``), or None."""
    if _INT.match(value) is None:
        return None
    number = int(value)
    return number if number >= minimum else None


def int_field(value: bytes | None, fallback: int) -> int:
    """A row field read as a count: absent or not an integer gives ``fallback``."""
    if value is None:
        return fallback
    number = int_arg(value, 0)
    return fallback if number is None else number


def numkeys_of(value: bytes) -> int | None:
    """numkeys as the server's string2ll reads it (no sign but '-', no leading zero), or None."""
    if _LL.match(value) is None:
        return None
    number = int(value)
    return number if -LLONG_MAX - 1 <= number <= LLONG_MAX else None


def split_keys(words: list[bytes]) -> tuple[list[bytes], list[bytes]] | bytes:
    """Keys and arguments after numkeys, or the error EVALSHA gives for a bad numkeys."""
    numkeys = numkeys_of(words[0])
    if numkeys is None:
        return error(E_NOTINT)
    if numkeys > len(words) - 1:
        return error(E_TOOMANY)
    if numkeys < 0:
        return error(E_NEGATIVE)
    return words[1:1 + numkeys], words[1 + numkeys:]


def dec(value: int) -> bytes:
    return str(value).encode()


# -- replies ----------------------------------------------------------------------------------

def status(text: str) -> bytes:
    return b"+" + text.encode() + b"\r\n"


def error(message: bytes) -> bytes:
    return b"-" + message + b"\r\n"


def integer(value: int) -> bytes:
    return b":" + dec(value) + b"\r\n"


def bulk(value: bytes) -> bytes:
    return b"$" + dec(len(value)) + b"\r\n" + value + b"\r\n"


def null(protocol: int) -> bytes:
    return b"_\r\n" if protocol == 3 else b"$-1\r\n"


def arity_error(verb: str, nkeys: int, nargs: int) -> bytes:
    return error(f"EMQARITY EMQ.{verb} takes {nkeys} keys and {nargs} arguments".encode())


def number_error(name: str, minimum: int) -> bytes:
    return error(f"EMQNUM {name} must be an integer from {minimum} to {INT_MAX}".encode())


def variadic_arity_error(verb: str, nkeys: int, nargs: int) -> bytes:
    return error(f"EMQARITY EMQ.{verb} takes {nkeys} keys and at least {nargs} arguments".encode())


def item_error(n: int, shape: str) -> bytes:
    return error(f"EMQITEM item {n} must be {shape}".encode())


def array(elements: Sequence[bytes]) -> bytes:
    return b"*" + dec(len(elements)) + b"\r\n" + b"".join(elements)


SETTLE_ITEM = ("ack <id> <fence>, done <id> <fence> <result>, release <id> <fence> or retry "
               "<id> <fence> <delay_ms> <max_attempts> <error>")
PAIR = "<id> <fence>"
LOST = b"lease expired during attempt %d: the worker was lost"
# The lane bookkeeping keys a lane lease leaving active touches, and those promote checks.
LANE_BOOKKEEPING = ((b"ring", b"list"), (b"laneconf", b"hash"), (b"leased", b"hash"),
                    (b"parked", b"hash"))
REOPENING = ((b"throttled", b"zset"), (b"parked", b"hash"))
PARKED_FULL = 1


# -- the keyspace -----------------------------------------------------------------------------

@dataclass
class Value:
    """One key: its type and contents; ``expires`` when it has a TTL."""

    kind: bytes
    data: Any
    expires: bool = False


def _zset_items(data: dict[bytes, int]) -> list[tuple[bytes, int]]:
    return sorted(data.items(), key=lambda item: (item[1], item[0]))


def render_value(value: Value) -> Any:
    if value.kind == b"hash":
        return sorted(value.data.items())
    if value.kind == b"zset":
        return [(member, float(score)) for member, score in _zset_items(value.data)]
    if value.kind == b"list":
        return list(value.data)
    return value.data


def normalise(snap: dict[bytes, tuple[Any, ...]]) -> dict[bytes, tuple[Any, ...]]:
    """A harness snapshot with zsets as (member, float score) pairs whatever the protocol."""
    out: dict[bytes, tuple[Any, ...]] = {}
    for key, (kind, value, expires) in snap.items():
        if kind == b"zset":
            if value and isinstance(value[0], list):  # RESP3: [[member, score], ...]
                pairs = [(member, float(score)) for member, score in value]
            else:  # RESP2: member, score, member, score ...
                pairs = [(value[i], float(value[i + 1])) for i in range(0, len(value), 2)]
            value = pairs
        elif kind == b"hash":
            value = [tuple(pair) for pair in value]
        out[key] = (kind, value, expires)
    return out


@dataclass
class Move:
    member: bytes
    row: bytes
    score: int
    lane: bytes | None = None
    spent: int = 0  # recover: the attempts of a job that goes dead


@dataclass
class Item:
    """One element of a batch: a settle item (ack, retry or release) or an extend_many pair."""

    op: bytes
    id: bytes
    fence: int
    delay_ms: int = 0
    max_attempts: int = 0
    error: bytes = b""
    result: bytes | None = None  # done: the result its tombstone keeps


@dataclass
class Call:
    """A validated call: its keys, its arguments, the parsed numbers and items."""

    keys: list[bytes]
    args: list[bytes]
    base: bytes
    numbers: dict[str, int] = field(default_factory=dict)
    items: list[Item] = field(default_factory=list)
    record: bytes | None = None  # the claim record declared after the keys
    recorded: list[tuple[bytes, int]] | None = None  # its leases, when it was found


def split_record(transition: Transition, keys: list[bytes]) -> tuple[list[bytes], bytes | None]:
    """The call's own keys, and its claim record when it declares one after them."""
    if transition.record and len(keys) == len(transition.keys) + 1:
        return keys[:-1], keys[-1]
    return keys, None


def record_name_ok(base: bytes, key: bytes) -> bool:
    """A claim record's name: base + claim: + a claim id of the lane rule."""
    prefix = base + b"claim:"
    return key.startswith(prefix) and _LANE.match(key[len(prefix):]) is not None


def parse_record(value: bytes) -> list[tuple[bytes, int]]:
    """The '<id> <fence>' pairs of a record's value; none when it is not such a list."""
    words = value.split(b" ")
    pairs = [(words[i], int_arg(words[i + 1], 1)) for i in range(0, len(words) - 1, 2)]
    if len(words) % 2 or any(not id_ok(job_id) or fence is None for job_id, fence in pairs):
        return []
    return [(job_id, fence) for job_id, fence in pairs if fence is not None]


def parse_items(words: list[bytes]) -> list[Item] | bytes:
    """settle's items, in order: op and width, id, fence, delay_ms, max_attempts (retry) or the
    result's size (done)."""
    items: list[Item] = []
    i = 0
    while i < len(words):
        width = {b"ack": 3, b"done": 4, b"release": 3, b"retry": 6}.get(words[i], 0)
        if width == 0 or i + width > len(words):
            return item_error(len(items) + 1, SETTLE_ITEM)
        checked = _item_lease(words[i + 1], words[i + 2])
        if isinstance(checked, bytes):
            return checked
        item = Item(words[i], *checked)
        failure = _item_tail(item, words[i + 3:i + width])
        if failure is not None:
            return failure
        items.append(item)
        i += width
    return items


def _item_tail(item: Item, tail: list[bytes]) -> bytes | None:
    """The words after an item's lease: done's result, retry's delay_ms, max_attempts and
    error. The error reply of the first bad one, or None."""
    if item.op == b"done":
        if len(tail[0]) > RESULT_MAX:
            return error(E_RESULT)
        item.result = tail[0]
    elif item.op == b"retry":
        for name, word in (("delay_ms", tail[0]), ("max_attempts", tail[1])):
            value = int_arg(word, MINIMUM[name])
            if value is None:
                return number_error(name, MINIMUM[name])
            setattr(item, name, value)
        item.error = tail[2]
    return None


def parse_pairs(words: list[bytes]) -> list[Item] | bytes:
    """extend_many's pairs, in order: width, id, fence."""
    items: list[Item] = []
    for i in range(0, len(words), 2):
        if i + 2 > len(words):
            return item_error(len(items) + 1, PAIR)
        checked = _item_lease(words[i], words[i + 1])
        if isinstance(checked, bytes):
            return checked
        items.append(Item(b"extend", *checked))
    return items


def _item_lease(job_id: bytes, fence: bytes) -> tuple[bytes, int] | bytes:
    if not id_ok(job_id):
        return error(E_KIND)
    value = int_arg(fence, 1)
    return number_error("fence", 1) if value is None else (job_id, value)


class Model:
    """The queue's keyspace in Python and every transition applied to it."""

    def __init__(self, protocol: int) -> None:
        self.protocol = protocol
        self.keys: dict[bytes, Value] = {}

    # raw keyspace helpers ---------------------------------------------------------------------

    def kind(self, key: bytes) -> bytes:
        value = self.keys.get(key)
        return b"none" if value is None else value.kind

    def zset(self, key: bytes) -> dict[bytes, int]:
        value = self.keys.setdefault(key, Value(b"zset", {}))
        return value.data  # type: ignore[no-any-return]

    def zadd(self, key: bytes, score: int, member: bytes) -> None:
        self.zset(key)[member] = score

    def zrem(self, key: bytes, member: bytes) -> None:
        value = self.keys.get(key)
        if value is not None:
            value.data.pop(member, None)
            self._drop_empty(key)

    def zitems(self, key: bytes) -> list[tuple[bytes, int]]:
        value = self.keys.get(key)
        return [] if value is None else _zset_items(value.data)

    def llen(self, key: bytes) -> int:
        value = self.keys.get(key)
        return 0 if value is None else len(value.data)

    def push(self, key: bytes, item: bytes, head: bool = False) -> None:
        value = self.keys.setdefault(key, Value(b"list", []))
        if head:
            value.data.insert(0, item)
        else:
            value.data.append(item)

    def hget(self, key: bytes, name: bytes) -> bytes | None:
        value = self.keys.get(key)
        return None if value is None else value.data.get(name)

    def _drop_empty(self, key: bytes) -> None:
        value = self.keys.get(key)
        if value is not None and not value.data:
            del self.keys[key]

    def render(self) -> dict[bytes, tuple[Any, ...]]:
        return {key: (value.kind, render_value(value), value.expires)
                for key, value in self.keys.items()}

    # setup commands applied behind the queue's back ---------------------------------------------

    def apply_setup(self, command: Sequence[Arg]) -> None:
        """Mirrors the few raw commands the tests send to both databases."""
        name, key, *rest = [raw(arg) for arg in command]
        handler = getattr(self, "_setup_" + name.decode().lower(), None)
        if handler is None:
            raise ValueError(f"the model does not know {name!r}")
        handler(key, rest)

    def _setup_del(self, key: bytes, rest: list[bytes]) -> None:
        self.keys.pop(key, None)

    def _setup_set(self, key: bytes, rest: list[bytes]) -> None:
        self.keys[key] = Value(b"string", rest[0], expires=b"PX" in rest[1:])

    def _setup_hset(self, key: bytes, rest: list[bytes]) -> None:
        value = self.keys.setdefault(key, Value(b"hash", {}))
        for i in range(0, len(rest), 2):
            value.data[rest[i]] = rest[i + 1]

    def _setup_hdel(self, key: bytes, rest: list[bytes]) -> None:
        for name in rest:
            self.keys[key].data.pop(name, None)
        self._drop_empty(key)

    def _setup_pexpire(self, key: bytes, rest: list[bytes]) -> None:
        self.keys[key].expires = True

    def _setup_rpush(self, key: bytes, rest: list[bytes]) -> None:
        for item in rest:
            self.push(key, item)

    def _setup_zadd(self, key: bytes, rest: list[bytes]) -> None:
        for i in range(0, len(rest), 2):
            self.zadd(key, int(rest[i]), rest[i + 1])

    # validation -------------------------------------------------------------------------------

    def validate(self, transition: Transition, argv: Sequence[Arg]) -> Call | bytes:
        """The parsed call, or the error reply the first failing step gives."""
        words = [raw(arg) for arg in argv]
        split = split_keys(words)
        if isinstance(split, bytes):
            return split
        keys, args = split
        keys, record = split_record(transition, keys)
        verb = transition.name.upper()
        if transition.items:
            return self._validate_batch(transition, keys, args, record)
        if len(keys) != len(transition.keys) or len(args) != len(transition.args):
            return arity_error(verb, len(transition.keys), len(transition.args))
        job_id = args[0] if transition.args[0] == "id" else b""
        if transition.args[0] == "id" and not id_ok(job_id):
            return error(E_KIND)
        base = self._base(transition, keys, job_id)
        if base is None or (record is not None and not record_name_ok(base, record)):
            return error(E_KEYS)
        call = Call(keys, args, base, record=record)
        failure = self._numbers(call, transition.args, args)
        if failure is not None:
            return failure
        checked = self._typed(transition, call)
        if transition.name in ENDING and not isinstance(checked, bytes) \
                and not self.list_or_none(base + b"ended:" + job_id):
            return error(E_TYPE)
        return checked

    def list_or_none(self, key: bytes) -> bool:
        return self.kind(key) in (b"none", b"list")

    def _numbers(self, call: Call, names: Sequence[str], words: Sequence[bytes]) -> bytes | None:
        """The first number error among the fixed arguments, in order; None when all parse."""
        for name, word in zip(names, words, strict=True):
            failure = self._number(call, name, word)
            if failure is not None:
                return failure
        return None

    def _validate_batch(self, transition: Transition, keys: list[bytes],
                        args: list[bytes], record: bytes | None) -> Call | bytes:
        """settle and extend_many: keys, fixed numbers, items, types, then every item's row."""
        fixed = len(transition.args)
        if len(keys) != len(transition.keys) or len(args) < fixed:
            return variadic_arity_error(transition.name.upper(), len(transition.keys), fixed)
        base = self._base(transition, keys, b"")
        if base is None or (record is not None and not record_name_ok(base, record)):
            return error(E_KEYS)
        call = Call(keys, args, base, record=record)
        failure = self._numbers(call, transition.args, args[:fixed])
        if failure is not None:
            return failure
        items = (parse_items if transition.name == "settle" else parse_pairs)(args[fixed:])
        if isinstance(items, bytes):
            return items
        call.items = items
        checked = self._typed(transition, call)
        if isinstance(checked, bytes):
            return checked
        if any(self.kind(base + b"job:" + item.id) not in (b"none", b"hash")
               or not self.list_or_none(self.release_lane(base, item))
               or (item.op in (b"done", b"retry")
                   and not self.list_or_none(base + b"ended:" + item.id))
               or (item.op != b"extend"
                   and not self.lane_bookkeeping_ok(base, base + b"job:" + item.id))
               for item in items):
            return error(E_TYPE)
        return checked

    def release_lane(self, base: bytes, item: Item) -> bytes:
        """The lane key a release item's job would go back to; b"" when it has none."""
        row = base + b"job:" + item.id
        if item.op != b"release" or self.kind(row) != b"hash":
            return b""
        lane = self.hget(row, b"lane")
        return b"" if lane is None else base + b"lane:" + lane

    def _typed(self, transition: Transition, call: Call) -> Call | bytes:
        for role, key in zip(transition.keys, call.keys, strict=True):
            if self.kind(key) not in (b"none", KEY_TYPE[role]):
                return error(E_TYPE)
        failure = self.record_checked(transition, call)
        if failure is not None:
            return failure
        if call.recorded is not None:
            call.numbers["last_fence"] = 0  # a call that finds its record leases nothing
        elif transition.name == "settle" and call.numbers["count"] == 0:
            call.numbers["last_fence"] = 0  # a settle that claims nothing never reads it
        elif "fence" in transition.keys:
            counter = self.fence_counter(call.keys[transition.keys.index("fence")])
            if counter is None:
                return error(E_FENCE)
            call.numbers["last_fence"] = counter
        return call

    def record_checked(self, transition: Transition, call: Call) -> bytes | None:
        """The claim record's type, then (claim, or settle claiming) whether the call finds it
        (its leases then ``call.recorded``) and the type of each recorded row: the error, or
        None."""
        if call.record is None or call.record not in self.keys:
            return None
        if self.kind(call.record) != b"string":
            return error(E_TYPE)
        if transition.name == "settle" and call.numbers["count"] == 0:
            return None
        call.recorded = parse_record(self.keys[call.record].data)
        if any(self.kind(call.base + b"job:" + job_id) not in (b"none", b"hash")
               for job_id, _fence in call.recorded):
            return error(E_TYPE)
        return None

    def held(self, call: Call, active: bytes) -> list[bytes]:
        """The recorded leases still held, each as a claim replies it."""
        jobs = []
        for job_id, fence in call.recorded or ():
            row = call.base + b"job:" + job_id
            if self.is_current(active, row, job_id, fence):
                attempt = int_field(self.hget(row, b"attempts"), 0)
                jobs.append(b"*4\r\n" + bulk(job_id) + bulk(self.hget(row, b"payload") or b"")
                            + integer(attempt) + integer(fence))
        return jobs

    def write_record(self, call: Call, leases: list[tuple[bytes, int]]) -> None:
        """The leases just made, recorded (expiring) when the call declares a record."""
        if call.record is not None and leases:
            value = b" ".join(job_id + b" " + dec(fence) for job_id, fence in leases)
            self.keys[call.record] = Value(b"string", value, expires=True)

    def fence_counter(self, key: bytes) -> int | None:
        """The queue's fence counter (absent: 0), or None when it cannot count on."""
        value = self.keys.get(key)
        if value is None:
            return 0
        number = int_arg(value.data, 0)
        return number if number is not None and number <= FENCE_MAX else None

    @staticmethod
    def _base(transition: Transition, keys: list[bytes], job_id: bytes) -> bytes | None:
        suffixes = [b"job:" + job_id if role == "job" else role.encode()
                    for role in transition.keys]
        first, suffix = keys[0], suffixes[0]
        if not first.endswith(suffix):
            return None
        base = first[:len(first) - len(suffix)]
        if any(key != base + end for key, end in zip(keys[1:], suffixes[1:], strict=True)):
            return None
        return base

    @staticmethod
    def _number(call: Call, name: str, word: bytes) -> bytes | None:
        if name == "result":
            return error(E_RESULT) if len(word) > RESULT_MAX else None
        if name == "now":
            if word == b"*":
                raise ValueError("the model runs on an explicit clock only")
            value = int_arg(word, 0)
            if value is None:
                return error(E_NOW)
        elif name in MINIMUM:
            value = int_arg(word, MINIMUM[name])
            if value is None:
                return number_error(name, MINIMUM[name])
        else:
            return None
        call.numbers[name] = value
        return None

    # transitions ------------------------------------------------------------------------------

    def call(self, transition: Transition, argv: Sequence[Arg]) -> bytes:
        """Runs ``argv`` (numkeys onwards); the raw reply the server must send."""
        checked = self.validate(transition, argv)
        if isinstance(checked, bytes):
            return checked
        handler = getattr(self, "_" + transition.name)
        reply: bytes = handler(checked)
        return reply

    def is_current(self, active: bytes, row: bytes, job_id: bytes, fence: int) -> bool:
        if self.kind(active) != b"zset" or job_id not in self.keys[active].data:
            return False
        if self.kind(row) != b"hash":
            return False
        return int_field(self.hget(row, b"fence"), 0) == fence

    def replayed(self, row: bytes, fence: int, error: bytes | None = None,
                 dead: bytes = b"", job_id: bytes = b"") -> str:
        """What a lease that is not current answers when its settlement went through already:
        an ack (``error`` None) left a tombstone (no payload, expiring) at ``fence``, ACKED; a
        retry left the row at ``fence`` with its error, DEAD while in ``dead``, else RETRYING.
        Else STALE."""
        if self.kind(row) != b"hash" or int_field(self.hget(row, b"fence"), 0) != fence:
            return "STALE"
        has_payload = self.hget(row, b"payload") is not None
        if error is None:
            return "STALE" if has_payload or not self.keys[row].expires else "ACKED"
        if not has_payload or self.hget(row, b"error") != error:
            return "STALE"
        in_dead = self.kind(dead) == b"zset" and job_id in self.keys[dead].data
        return "DEAD" if in_dead else "RETRYING"

    def mark_ended(self, row: bytes, job_id: bytes, retention_ms: int | None) -> None:
        """The job's ended key (beside its row) holds one token; with retention_ms it expires."""
        key = row[:len(row) - len(job_id) - 4] + b"ended:" + job_id
        if self.llen(key) == 0:
            self.push(key, b"1")
        if retention_ms:
            self.keys[key].expires = True

    def wake(self, key: bytes, count: int) -> None:
        for _ in range(max(0, min(count, WAKE_CAP - self.llen(key)))):
            self.push(key, b"1")

    def admit(self, call: Call, score: int) -> bytes:
        """Admit the job once (invariant 2): its row, and its id in the set of ``call``'s second
        key at ``score`` (pending now, or delayed until it is due); an existing row is a
        duplicate that changes nothing."""
        row, waiting, wake_key = call.keys
        job_id, payload = call.args[0], call.args[1]
        if row in self.keys:
            return status("DUPLICATE")
        self.keys[row] = Value(b"hash", {b"payload": payload, b"attempts": b"0",
                                         b"enqueued_at": dec(call.numbers["now"])})
        self.zadd(waiting, score, job_id)
        self.wake(wake_key, 1)
        return status("ENQUEUED")

    def _enqueue(self, call: Call) -> bytes:
        return self.admit(call, call.numbers["now"])

    def _enqueue_delayed(self, call: Call) -> bytes:
        numbers = call.numbers
        return self.admit(call, max(numbers["now"] + numbers["delay_ms"], numbers["at_ms"]))

    def _claim(self, call: Call) -> bytes:
        pending, active, counter = call.keys
        if call.recorded is not None:
            return next(iter(self.held(call, active)), null(self.protocol))
        for member, _score in self.zitems(pending):
            row = call.base + b"job:" + member
            self.zrem(pending, member)
            if self.kind(row) != b"hash":
                continue  # a ghost: dropped, never returned
            attempt, fence = self.lease(call, row, member, active, counter)
            self.write_record(call, [(member, fence)])
            payload = self.hget(row, b"payload") or b""
            return (b"*4\r\n" + bulk(member) + bulk(payload) + integer(attempt)
                    + integer(fence))
        return null(self.protocol)

    def lease(self, call: Call, row: bytes, member: bytes, active: bytes,
              counter: bytes) -> tuple[int, int]:
        """Counts the attempt and takes the queue's next fence (SET: any TTL goes)."""
        attempt = int_field(self.hget(row, b"attempts"), 0) + 1
        fence = call.numbers["last_fence"] + 1
        self.keys[counter] = Value(b"string", dec(fence))
        fields = self.keys.setdefault(row, Value(b"hash", {})).data
        fields[b"attempts"] = dec(attempt)
        fields[b"fence"] = dec(fence)
        self.zadd(active, call.numbers["now"] + call.numbers["lease_ms"], member)
        return attempt, fence

    def typed(self, base: bytes, table: Sequence[tuple[bytes, bytes]]) -> bool:
        """Each key base + suffix of ``table`` is absent or of its type."""
        return all(self.kind(base + suffix) in (b"none", kind) for suffix, kind in table)

    def lane_bookkeeping_ok(self, base: bytes, row: bytes) -> bool:
        """check_lane_bookkeeping of the prelude, types only: a lane job's lease leaving active
        touches the ring, the knobs, the leases held, the parked groups, and its lane when its
        group is parked at its limit; each must be absent or of its type."""
        group = self.hget(row, b"lane") if self.kind(row) == b"hash" else None
        if group is None:
            return True
        if not self.typed(base, LANE_BOOKKEEPING):
            return False
        if int_field(self.hget(base + b"parked", group), 0) & PARKED_FULL:
            return self.list_or_none(base + b"lane:" + group)
        return True

    def _ack(self, call: Call) -> bytes:
        active, row = call.keys
        if not self.is_current(active, row, call.args[0], call.numbers["fence"]):
            return status(self.replayed(row, call.numbers["fence"]))
        if not self.lane_bookkeeping_ok(call.base, row):
            return error(E_TYPE)
        return status(self.finish_ack(active, row, call.args[0], call.numbers["retention_ms"]))

    def _ack_result(self, call: Call) -> bytes:
        active, row = call.keys
        if not self.is_current(active, row, call.args[0], call.numbers["fence"]):
            return status(self.replayed(row, call.numbers["fence"]))
        if not self.lane_bookkeeping_ok(call.base, row):
            return error(E_TYPE)
        return status(self.finish_ack(active, row, call.args[0], call.numbers["retention_ms"],
                                      call.args[3]))

    def finish_ack(self, active: bytes, row: bytes, job_id: bytes, retention_ms: int,
                   result: bytes | None = None) -> str:
        self.zrem(active, job_id)
        if retention_ms == 0:
            del self.keys[row]
        else:
            value = self.keys[row]
            if result is not None:
                value.data[b"result"] = result
            value.data.pop(b"payload", None)
            value.expires = True
            self._drop_empty(row)
            if result is not None:
                self.mark_ended(row, job_id, retention_ms)
        return "ACKED"

    def _retry(self, call: Call) -> bytes:
        active, row = call.keys[0], call.keys[3]
        job_id, number = call.args[0], call.numbers
        if not self.is_current(active, row, job_id, number["fence"]):
            return status(self.replayed(row, number["fence"], call.args[4], call.keys[2], job_id))
        if not self.lane_bookkeeping_ok(call.base, row):
            return error(E_TYPE)
        item = Item(b"retry", job_id, number["fence"], number["delay_ms"],
                    number["max_attempts"], call.args[4])
        return status(self.finish_retry(call.keys, row, item, number["now"]))

    def finish_retry(self, keys: list[bytes], row: bytes, item: Item, now: int) -> str:
        """retry's effects; ``keys`` starts with active, delayed, dead."""
        active, delayed, dead = keys[:3]
        self.zrem(active, item.id)
        self.keys[row].data[b"error"] = item.error
        if int_field(self.hget(row, b"attempts"), 0) >= item.max_attempts:
            self.zadd(dead, now, item.id)
            self.mark_ended(row, item.id, None)
            return "DEAD"
        self.zadd(delayed, now + item.delay_ms, item.id)
        return "RETRYING"

    def _settle(self, call: Call) -> bytes:
        active, pending, counter = call.keys[0], call.keys[3], call.keys[4]
        count = 0 if call.recorded is not None else call.numbers["count"]
        claims, ghosts = self.plan_claims(call.base, pending, count)
        if call.numbers["last_fence"] + len(claims) > INT_MAX:
            return error(E_FENCE)
        verdicts = [status(self.settle_item(call, item)) for item in call.items]
        if call.recorded is not None:
            return b"*2\r\n" + array(verdicts) + array(self.held(call, active))
        for ghost in ghosts:
            self.zrem(pending, ghost)
        jobs, leases = [], []
        for member in claims:
            row = call.base + b"job:" + member
            self.zrem(pending, member)
            attempt, fence = self.lease(call, row, member, active, counter)
            call.numbers["last_fence"] = fence
            leases.append((member, fence))
            payload = self.hget(row, b"payload") or b""
            jobs.append(b"*4\r\n" + bulk(member) + bulk(payload) + integer(attempt)
                        + integer(fence))
        self.write_record(call, leases)
        return b"*2\r\n" + array(verdicts) + array(jobs)

    def plan_claims(self, base: bytes, pending: bytes, count: int) -> tuple[list[bytes],
                                                                            list[bytes]]:
        """claim's walk for up to ``count`` live rows, and the ghosts met on the way."""
        claims: list[bytes] = []
        ghosts: list[bytes] = []
        for member, _score in self.zitems(pending):
            if len(claims) == count:
                break
            live = self.kind(base + b"job:" + member) == b"hash"
            (claims if live else ghosts).append(member)
        return claims, ghosts

    def settle_item(self, call: Call, item: Item) -> str:
        row = call.base + b"job:" + item.id
        if not self.is_current(call.keys[0], row, item.id, item.fence):
            if item.op == b"release":
                return "STALE"
            error = item.error if item.op == b"retry" else None
            return self.replayed(row, item.fence, error, call.keys[2], item.id)
        if item.op in (b"ack", b"done"):
            return self.finish_ack(call.keys[0], row, item.id, call.numbers["retention_ms"],
                                   item.result)
        if item.op == b"release":
            return self.finish_release(call, row, item.id)
        return self.finish_retry(call.keys, row, item, call.numbers["now"])

    def finish_release(self, call: Call, row: bytes, job_id: bytes) -> str:
        """Hand a lease back unrun: out of active, its attempt uncounted (never below 0), back
        where recover puts it, a wake token."""
        active, pending, ring, wake_key = call.keys[0], call.keys[3], call.keys[5], call.keys[6]
        self.zrem(active, job_id)
        attempts = int_field(self.hget(row, b"attempts"), 0)
        self.keys[row].data[b"attempts"] = dec(max(attempts - 1, 0))
        score = int_field(self.hget(row, b"enqueued_at"), call.numbers["now"])
        self.put_back(call.base, ring, pending, Move(job_id, row, score, self.hget(row, b"lane")),
                      head=True)
        self.wake(wake_key, 1)
        return "RELEASED"

    def _extend_many(self, call: Call) -> bytes:
        active, deadline = call.keys[0], call.numbers["now"] + call.numbers["lease_ms"]
        verdicts = []
        for item in call.items:
            current = self.is_current(active, call.base + b"job:" + item.id, item.id, item.fence)
            if current:
                self.zadd(active, deadline, item.id)
            verdicts.append(status("EXTENDED" if current else "STALE"))
        return array(verdicts)

    def _extend(self, call: Call) -> bytes:
        active, row = call.keys
        job_id, number = call.args[0], call.numbers
        if not self.is_current(active, row, job_id, number["fence"]):
            return status("STALE")
        self.zadd(active, number["now"] + number["lease_ms"], job_id)
        return status("EXTENDED")

    def _plan(self, base: bytes, due: list[tuple[bytes, int]], fallback: int | None,
              max_attempts: int | None = None) -> tuple[list[Move], list[bytes]] | bytes:
        moves: list[Move] = []
        ghosts: list[bytes] = []
        for member, score in due:
            row = base + b"job:" + member
            if self.kind(row) != b"hash":
                ghosts.append(member)
                continue
            attempts = int_field(self.hget(row, b"attempts"), 0)
            if max_attempts is not None and attempts >= max_attempts:
                if not self.list_or_none(base + b"ended:" + member):
                    return error(E_TYPE)
                moves.append(Move(member, row, score, spent=attempts))
                continue
            move = Move(member, row, score, self.hget(row, b"lane"))
            if move.lane is not None:
                if self.kind(base + b"lane:" + move.lane) not in (b"none", b"list"):
                    return error(E_TYPE)
            elif fallback is not None:
                move.score = int_field(self.hget(row, b"enqueued_at"), fallback)
            moves.append(move)
        return moves, ghosts

    def _move_back(self, call: Call, head: bool) -> bytes:
        zsource, pending, ring, wake_key = call.keys[:4]
        now, limit = call.numbers["now"], call.numbers["limit"]
        due = [item for item in self.zitems(zsource) if item[1] <= now][:limit]
        plan = self._plan(call.base, due, now if head else None, call.numbers.get("max_attempts"))
        if isinstance(plan, bytes):
            return plan
        # Every key is checked before anything is written, each refusal a WRONGTYPE: recover
        # checks the lane bookkeeping of each lane lease it takes, promote the keys of the groups
        # it reopens.
        if head and not all(self.lane_bookkeeping_ok(call.base, call.base + b"job:" + member)
                            for member, _score in due):
            return error(E_TYPE)
        if not head and not self.typed(call.base, REOPENING):
            return error(E_TYPE)
        moves, ghosts = plan
        for ghost in ghosts:
            self.zrem(zsource, ghost)
        back = 0
        for move in reversed(moves) if head else moves:
            self.zrem(zsource, move.member)
            if move.spent:
                self.keys[move.row].data[b"error"] = LOST % move.spent
                self.zadd(call.keys[4], now, move.member)
                self.mark_ended(move.row, move.member, None)
            else:
                self.put_back(call.base, ring, pending, move, head)
                back += 1
        self.wake(wake_key, back)
        return integer(len(moves))

    def put_back(self, base: bytes, ring: bytes, pending: bytes, move: Move, head: bool) -> None:
        """A flat job to pending at its score; a lane job to its lane (joining the ring)."""
        if move.lane is None:
            self.zadd(pending, move.score, move.member)
            return
        lane_key = base + b"lane:" + move.lane
        if self.llen(lane_key) == 0:
            self.push(ring, move.lane)
        self.push(lane_key, move.member, head=head)

    def _requeue(self, call: Call) -> bytes:
        dead, pending, ring, wake_key, row = call.keys
        job_id = call.args[0]
        if self.kind(dead) != b"zset" or job_id not in self.keys[dead].data \
                or self.kind(row) != b"hash":
            return status("NOT_DEAD")
        plan = self._plan(call.base, [(job_id, call.numbers["now"])], None)
        if isinstance(plan, bytes):
            return plan
        if not self.list_or_none(call.base + b"ended:" + job_id):
            return error(E_TYPE)
        if plan[0][0].lane is not None and self.kind(call.base + b"parked") not in (b"none",
                                                                                     b"hash"):
            return error(E_TYPE)
        self.zrem(dead, job_id)
        self.keys[row].data[b"attempts"] = b"0"
        self.keys.pop(call.base + b"ended:" + job_id, None)
        self.put_back(call.base, ring, pending, plan[0][0], head=False)
        self.wake(wake_key, 1)
        return status("REQUEUED")

    def _recover(self, call: Call) -> bytes:
        return self._move_back(call, head=True)

    def _promote(self, call: Call) -> bytes:
        return self._move_back(call, head=False)
