"""The model's keyspace: its values, the shape a harness snapshot is compared in, the raw
commands a test applies behind the queue's back, and the readers and writers every transition
shares (is a lease current, what a replay answers, the ended token, wake tokens, a job put back
in pending or its lane, the lane bookkeeping's types)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.conformance.model.call import Move
from echomq.conformance.model.events import EventSink
from echomq.conformance.model.words import (
    FENCE_MAX,
    int_arg,
    int_field,
    pending_score,
    raw,
    row_priority,
)
from echomq.conformance.resp import Arg
from echomq.engine.rows import RENAMED

WAKE_CAP = 64
# Each of the job row's four one-letter fields to the earlier layout's name for it.
OLD_NAME = {short.encode(): full.encode() for full, short in RENAMED.items()}
# The lane bookkeeping keys a lane lease leaving active touches, and those promote checks.
LANE_BOOKKEEPING = ((b"ring", b"list"), (b"laneconf", b"hash"), (b"leased", b"hash"),
                    (b"parked", b"hash"))
REOPENING = ((b"throttled", b"zset"), (b"parked", b"hash"))
PARKED_FULL = 1


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
    if value.kind == b"set":
        return sorted(value.data)
    if value.kind in (b"list", b"stream"):  # a stream: its entries' field tuples, in order
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


class State:
    """The queue's keyspace in Python, and what every transition reads and writes in it."""

    def __init__(self, protocol: int) -> None:
        self.protocol = protocol
        self.keys: dict[bytes, Value] = {}
        self.sink = EventSink()  # the running call's events stream

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

    def hset(self, key: bytes, name: bytes, value: bytes) -> None:
        self.keys.setdefault(key, Value(b"hash", {})).data[name] = value

    def hdel(self, key: bytes, name: bytes) -> None:
        value = self.keys.get(key)
        if value is not None:
            value.data.pop(name, None)
            self._drop_empty(key)

    def push(self, key: bytes, item: bytes, head: bool = False) -> None:
        value = self.keys.setdefault(key, Value(b"list", []))
        if head:
            value.data.insert(0, item)
        else:
            value.data.append(item)

    def hget(self, key: bytes, name: bytes) -> bytes | None:
        value = self.keys.get(key)
        return None if value is None else value.data.get(name)

    def field(self, row: bytes, name: bytes) -> bytes | None:
        """One of a job row's four one-letter fields, else the earlier layout's name for it
        (include/rows.lua, row_field)."""
        value = self.hget(row, name)
        return self.hget(row, OLD_NAME[name]) if value is None else value

    def drop_payload(self, row: bytes) -> None:
        """The row's payload goes under either name (include/rows.lua, drop_payload)."""
        for name in (b"p", b"payload"):
            self.keys[row].data.pop(name, None)

    def emit(self, kind: str, job_id: bytes, attempt: int, fence: int | None = None,
             lane: bytes | None = None, due: int | None = None, priority: int = 0) -> None:
        """An entry in the running call's events stream, when it declared one."""
        entry = self.sink.entry(kind, job_id, attempt, fence, lane, due, priority)
        if entry is not None and self.sink.key is not None:
            self.keys.setdefault(self.sink.key, Value(b"stream", [])).data.append(entry)

    def attempts_of(self, row: bytes) -> int:
        """The attempts a row counts (no row, absent or not a count: 0)."""
        return int_field(self.field(row, b"a"), 0) if self.kind(row) == b"hash" else 0

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

    def _setup_sadd(self, key: bytes, rest: list[bytes]) -> None:
        self.keys.setdefault(key, Value(b"set", set())).data.update(rest)

    def _setup_zadd(self, key: bytes, rest: list[bytes]) -> None:
        """ZADD key score member ...: a score that is not an integer (``1.5``, ``-inf``) is
        kept as the float the server keeps."""
        for i in range(0, len(rest), 2):
            word = rest[i]
            score = int(word) if word.lstrip(b"-").isdigit() else float(word)
            self.zset(key)[rest[i + 1]] = score  # type: ignore[assignment]

    def _setup_xadd(self, key: bytes, rest: list[bytes]) -> None:
        """XADD key <id> field value ...: an entry (its id only orders it)."""
        self.keys.setdefault(key, Value(b"stream", [])).data.append(tuple(rest[1:]))

    # readers and writers every transition shares ------------------------------------------------

    def list_or_none(self, key: bytes) -> bool:
        return self.kind(key) in (b"none", b"list")

    def fence_counter(self, key: bytes) -> int | None:
        """The queue's fence counter (absent: 0), or None when it cannot count on."""
        value = self.keys.get(key)
        if value is None:
            return 0
        number = int_arg(value.data, 0)
        return number if number is not None and number <= FENCE_MAX else None

    def is_current(self, active: bytes, row: bytes, job_id: bytes, fence: int) -> bool:
        if self.kind(active) != b"zset" or job_id not in self.keys[active].data:
            return False
        if self.kind(row) != b"hash":
            return False
        return int_field(self.field(row, b"f"), 0) == fence

    def replayed(self, row: bytes, fence: int, error: bytes | None = None,
                 dead: bytes = b"", job_id: bytes = b"") -> str:
        """What a lease that is not current answers when its settlement went through already:
        a flagged lease's settlement left a cancelled tombstone at ``fence``, CANCELLED;
        an ack (``error`` None) left a tombstone (no payload, expiring) at ``fence``, ACKED; a
        retry left the row at ``fence`` with its error, DEAD while in ``dead``, else RETRYING.
        Else STALE."""
        if self.cancelled_at(row, fence):
            return "CANCELLED"
        if self.kind(row) != b"hash" or int_field(self.field(row, b"f"), 0) != fence:
            return "STALE"
        has_payload = self.field(row, b"p") is not None
        if error is None:
            return "STALE" if has_payload or not self.keys[row].expires else "ACKED"
        if not has_payload or self.hget(row, b"error") != error:
            return "STALE"
        in_dead = self.kind(dead) == b"zset" and job_id in self.keys[dead].data
        return "DEAD" if in_dead else "RETRYING"

    def flagged(self, row: bytes) -> bool:
        """A cancel flagged the lease's row (its cancel mark)."""
        return self.kind(row) == b"hash" and self.hget(row, b"cancel") is not None

    def cancelled_at(self, row: bytes, fence: int) -> bool:
        """The row is a cancelled tombstone (no payload, the cancel mark) at ``fence``."""
        return (self.kind(row) == b"hash" and int_field(self.field(row, b"f"), 0) == fence
                and self.field(row, b"p") is None
                and self.hget(row, b"cancelled") is not None)

    def bury_cancelled(self, row: bytes, job_id: bytes, retention_ms: int) -> str:
        """The row drops its payload and expires, keeping its cancel mark (0: deleted); the
        job's ended key wakes its waiters."""
        if retention_ms == 0:
            del self.keys[row]
            return "CANCELLED"
        value = self.keys[row]
        self.drop_payload(row)
        value.expires = True
        self.mark_ended(row, job_id, retention_ms)
        return "CANCELLED"

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

    def typed(self, base: bytes, table: Sequence[tuple[bytes, bytes]]) -> bool:
        """Each key base + suffix of ``table`` is absent or of its type."""
        return all(self.kind(base + suffix) in (b"none", kind) for suffix, kind in table)

    def lane_bookkeeping_ok(self, base: bytes, row: bytes) -> bool:
        """check_lane_bookkeeping of the prelude, types only: a lane job's lease leaving active
        touches the ring, the knobs, the leases held, the parked groups, and its lane when its
        group is parked at its limit; each must be absent or of its type."""
        if self.kind(row) == b"hash" and not self.queue_slot_ok(row[:row.index(b"job:")]):
            return False
        group = self.hget(row, b"lane") if self.kind(row) == b"hash" else None
        if group is None:
            return True
        if not self.typed(base, LANE_BOOKKEEPING):
            return False
        if int_field(self.hget(base + b"parked", group), 0) & PARKED_FULL:
            return self.lane_keys_ok(base, group)
        return True

    def lane_keys_ok(self, base: bytes, group: bytes) -> bool:
        """A group's lane (a list) and its prio zset, each absent or of its type."""
        return self.list_or_none(base + b"lane:" + group) \
            and self.kind(base + b"prio:" + group) in (b"none", b"zset")

    def lane_empty(self, base: bytes, group: bytes) -> bool:
        return self.llen(base + b"lane:" + group) == 0 and base + b"prio:" + group not in self.keys

    def lane_move(self, base: bytes, member: bytes, score: int, at: int) -> Move | None:
        """A lane job's move back to its lane, its keys checked (None: of another type)."""
        row = base + b"job:" + member
        move = Move(member, row, score, self.hget(row, b"lane"))
        if move.lane is not None:
            if not self.lane_keys_ok(base, move.lane):
                return None
            move.priority, move.at = row_priority(self.hget(row, b"priority")), at
        return move

    def put_back(self, base: bytes, ring: bytes, pending: bytes, move: Move, head: bool) -> None:
        """A flat job to pending at its score; a lane job to its lane (joining the ring): at
        priority 0 to the list's head or tail, else to its prio zset."""
        if move.lane is None:
            self.zadd(pending, move.score, move.member)
            return
        if self.lane_empty(base, move.lane) and self.hget(base + b"parked", move.lane) is None:
            self.push(ring, move.lane)
        if move.priority:
            self.zadd(base + b"prio:" + move.lane, pending_score(move.priority, move.at),
                      move.member)
        else:
            self.push(base + b"lane:" + move.lane, move.member, head=head)

    # the queue-wide limits' side of a lease leaving active (the claims': model/limits.py) -------

    def queue_slot_ok(self, base: bytes) -> bool:
        """check_queue_slot, types only: ``queueconf`` a hash or absent; while the queue is held
        at its concurrency limit (``held``), ``wake`` a list or absent."""
        conf = base + b"queueconf"
        if self.kind(conf) not in (b"none", b"hash"):
            return False
        return self.hget(conf, b"held") is None or self.list_or_none(base + b"wake")

    def release_queue_slot(self, base: bytes, leases: int = 1) -> None:
        """``leases`` leases leave active: while the queue is held, a wake token each."""
        if self.hget(base + b"queueconf", b"held") is not None:
            self.wake(base + b"wake", leases)
