"""The layout of a sharded queue (``Queue(conn, name, shards=N)``): one logical queue over N
plain queues, its shards, each under a hash tag of its own so they spread over a cluster's
slots as N queues would. Part of the stored format: neither the shards' names nor the routing
hash may ever change.

- Shard ``k`` (0 <= k < N) of queue ``q`` is the plain queue whose keys start ``emq:{q{k}:``
  (or ``emq:{q{k~s}:``): its hash tag is ``q{k`` (the cluster hashes what lies between the first
  ``{`` and the next ``}``). A queue's name may not hold a brace, so no plain queue's keys
  (``emq:{<name>}:…``) can ever be a shard's, nor can two shards of different queues meet.
- The shards' slots are evenly spaced: shard ``k``'s slot lies in the k-th N-th of the 16384
  slots (``shard_range``). Where ``q{k`` hashes elsewhere, the tag is ``q{k~s`` for the least
  ``s`` from 1 that lands there. So on a cluster whose primaries hold equal runs of slots (as
  ``valkey-cli --cluster create`` deals them) N shards, a multiple of the primaries, put the
  same number of shards on each.
- N (from ``MIN_SHARDS`` to ``MAX_SHARDS``) is recorded at creation in ``emq:{q}:shards``
  (``SET NX``, read back), so every client agrees on it; a client asking another N is refused.
- A job's shard is ``crc32(id) % N``; a lane job's is ``crc32(group) % N``, so a lane's keys
  and all its jobs share one shard and its limits, rate and weight stay exact.
"""

from __future__ import annotations

import binascii
import functools
import zlib
from typing import Any, ClassVar

from echomq.engine.calls import QueueCalls, text
from echomq.engine.errors import ArgumentError
from echomq.engine.transitions import key_of, queue_base

MIN_SHARDS = 2
MAX_SHARDS = 256
SHARDS_ROLE = "shards"
SLOTS = 16384
# The salts tried for a shard's tag: far more than ever needed (at N = 256 a tag lands in its
# 64 slots once in 256 tries on average; every name and N within bounds finds one).
SALTS = 1 << 20


class ShardError(ArgumentError):
    """A sharded queue asked for what it cannot give: a count of shards out of range or other
    than the one recorded on the server, or a method that has no meaning over shards."""


def checked_shards(shards: object) -> int:
    """``shards`` as a count of shards: an int from MIN_SHARDS to MAX_SHARDS, else ShardError."""
    if isinstance(shards, bool) or not isinstance(shards, int) \
            or not MIN_SHARDS <= shards <= MAX_SHARDS:
        raise ShardError(f"shards must be an integer from {MIN_SHARDS} to {MAX_SHARDS}, "
                         f"not {shards!r}")
    return shards


def slot_of_tag(tag: str) -> int:
    """The cluster's slot of a key whose hash tag is ``tag`` (CRC16/XMODEM mod 16384)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


def shard_range(index: int, shards: int) -> range:
    """The slots shard ``index`` of ``shards`` lies in: the index-th shards-th of them all."""
    return range(index * SLOTS // shards, (index + 1) * SLOTS // shards)


@functools.lru_cache(maxsize=4096)
def shard_name(name: str, index: int, shards: int) -> str:
    """The hash tag of shard ``index`` of the ``shards`` of queue ``name`` (``name`` checked as
    a queue's): ``name{index``, salted ``name{index~s`` until its slot is in ``shard_range``."""
    queue_base(name)
    checked_shards(shards)
    if not 0 <= index < shards:
        raise ShardError(f"shard {index!r} is not one of {shards} shards")
    head, slots = f"{name}{{{index}", shard_range(index, shards)
    for salt in range(SALTS):
        tag = head if salt == 0 else f"{head}~{salt}"
        if slot_of_tag(tag) in slots:
            return tag
    raise ShardError(f"no tag of shard {index} of queue {name!r} lands in its slots")


def shard_base(name: str, index: int, shards: int) -> str:
    """The prefix of every key of shard ``index`` of the ``shards`` of queue ``name``."""
    return f"emq:{{{shard_name(name, index, shards)}}}:"


def record_key(name: str) -> str:
    """The key that records how many shards queue ``name`` has."""
    return key_of(queue_base(name), SHARDS_ROLE)


def shard_of(job_id: str, shards: int, lane: str | None = None) -> int:
    """The shard of a job: by its lane's group when it has one, else by its id."""
    routed = job_id if lane is None else lane
    return zlib.crc32(routed.encode()) % shards


def recorded(reply: Any) -> int | None:
    """The count of shards from the record's value as read (None: no record)."""
    return None if reply is None else int(text(reply))


def mismatch(name: str, asked: int | None, found: int) -> ShardError:
    """The error of a client asking ``asked`` shards (None: a plain queue) of a queue recorded
    with ``found``."""
    wanted = "a plain queue" if asked is None else f"{asked} shards"
    return ShardError(f"queue {name!r} is recorded with {found} shards; this client asked for "
                      f"{wanted}: make it with shards={found}")


class ShardCalls(QueueCalls):
    """The calls of shard ``index`` of the ``shards`` of queue ``name``."""

    def __init__(self, name: str, index: int, shards: int, **options: Any) -> None:
        super().__init__(name, **options)
        self.name = shard_name(name, index, shards)
        self.base = shard_base(name, index, shards)


class ShardFace:
    """What every Queue says of its shards (mixed in): a plain queue is one shard, itself.
    ``Queue(conn, name, shards=N)`` makes the shell's sharded queue instead (its
    ``_sharded_class``, set by the shell)."""

    _sharded_class: ClassVar[type[Any] | None] = None
    shards: int = 1

    def __new__(cls, *args: Any, shards: int | None = None, **options: Any) -> Any:
        target = cls._sharded_class
        if shards is None:
            return object.__new__(cls)
        if target is not None and issubclass(target, cls):
            return object.__new__(target)
        raise ShardError(f"{cls.__name__} cannot be sharded: make Queue(conn, name, "
                         f"shards={shards!r})")

    @property
    def shard_queues(self) -> list[Any]:
        """The plain queues this queue spreads over, in shard order: itself alone."""
        return [self]

    def shard_of(self, job_id: str, lane: str | None = None) -> int:
        """The shard a job (``lane``: a lane job of that group) is routed to: 0."""
        return 0


def recorded_shards(conn: Any, name: str) -> int | None:
    """How many shards queue ``name`` is recorded with on a blocking client (None: a plain
    queue, or one never made sharded); one GET."""
    return recorded(conn.get(record_key(name)))
