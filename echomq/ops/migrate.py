"""``echomq migrate``: rewrite the job rows an earlier release wrote to the row layout of this
one (docs/PROTOCOL.md, "The job row"): the fields every job carries under their one-letter
names, ``payload`` → ``p``, ``attempts`` → ``a``, ``enqueued_at`` → ``t``, ``fence`` → ``f``.

Every row of the queue is visited wherever its job is — pending, in a lane, active, delayed,
dead, waiting for its parents, or a tombstone kept for its result — by one ``SCAN`` of the
queue's row keys (``<base>job:*``, hashes only). A row holding none of the old names is left
alone, so a run over a migrated queue changes nothing and a run cut short can simply be run
again. A row holding any is rewritten in one ``MULTI``/``EXEC`` under ``WATCH`` (tried again when
the row changed in between): the new names get the old values (a new name already present
keeps its own value, the later write; ``attempts`` 0 becomes no ``a``, as a new row has none;
a tombstone — a row that expires — loses its ``payload`` instead of getting a ``p``, which
would make its ended job read as live), the old names go. ``HSET``/``HDEL`` keep the row's
expiry, so a tombstone still expires when it would have. A run that visited every row records
the layout in ``<base>layout`` (``2``), which a worker reads as it starts.

An upgrade need not stop the queue. A worker of this release reads rows of either layout: its
lease rewrites a row of the earlier one first (docs/PROTOCOL.md, "The job row"), so it runs
the job with its payload and its count of attempts, and ``Queue.outcome`` reads either. A worker
of the earlier release cannot read the rows this release writes, so the order of a rolling
upgrade is: replace every worker of the earlier release (a worker that starts while rows of
the earlier layout remain says so once, in the log), then the producers, then run
``echomq migrate`` — at any time, while the workers run; it rewrites the rows not leased yet.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from echomq.engine import rows as jobrow
from echomq.engine.calls import QueueCalls
from echomq.engine.clients import twins

OLD = tuple(jobrow.RENAMED)
NEW = tuple(jobrow.RENAMED.values())
SCAN_COUNT = 1000
_GLOB = re.compile(r"([*?\[\]\\])")


@dataclass
class Migrated:
    """What a run did to one queue: rows seen, and rows rewritten (they held old names)."""

    queue: str
    rows: int = 0
    rewritten: int = 0


def row_keys(conn: Any, name: str) -> Iterator[Any]:
    """Every job row of queue ``name`` (hashes under ``<base>job:``), each once or more (SCAN
    may repeat a key; rewriting a row twice changes nothing)."""
    pattern = _GLOB.sub(r"\\\1", QueueCalls(name).base + "job:") + "*"
    yield from conn.scan_iter(match=pattern, count=SCAN_COUNT, _type="hash")


def rename(values: Sequence[Any], tombstone: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The fields to set and the fields to delete, from a row's values of ``OLD`` then
    ``NEW`` (None: absent): each old name present goes, its value moving to the new name unless
    the new name is already set — or unless it is ``attempts`` at 0, which a row of this release
    says by leaving ``a`` out, or ``payload`` on a ``tombstone`` (a row that expires: its job
    ended, and a ``p`` would make it read as live)."""
    old, new = values[:len(OLD)], values[len(OLD):]
    sets = {short: value for short, value, now in zip(NEW, old, new, strict=True)
            if value is not None and now is None
            and not (short == jobrow.ATTEMPTS and value in (b"0", "0"))
            and not (short == jobrow.PAYLOAD and tombstone)}
    gone = [full for full, value in zip(OLD, old, strict=True) if value is not None]
    return sets, gone


def migrate_row(conn: Any, key: Any) -> bool:
    """Rewrite one row atomically; False when it held none of the old names."""
    with conn.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(key)
                sets, gone = rename(pipe.hmget(key, *OLD, *NEW), pipe.pttl(key) >= 0)
                if not gone:
                    pipe.unwatch()
                    return False
                pipe.multi()
                if sets:
                    pipe.hset(key, mapping=sets)
                pipe.hdel(key, *gone)
                pipe.execute()
                return True
            except twins(redis.WatchError):
                continue


def migrate_queue(conn: Any, name: str) -> Migrated:
    """Rewrite every row of queue ``name`` that holds an old name (see the module's text). Rows
    are read ``SCAN_COUNT`` at a time in one pipeline of ``HEXISTS`` of an old name each; only
    those holding one are rewritten, one transaction each."""
    done = Migrated(name)
    batch: list[Any] = []
    for key in row_keys(conn, name):
        batch.append(key)
        if len(batch) >= SCAN_COUNT:
            _migrate_batch(conn, batch, done)
            batch = []
    _migrate_batch(conn, batch, done)
    conn.set(QueueCalls(name).base + jobrow.LAYOUT_KEY, jobrow.LAYOUT)
    return done


def _migrate_batch(conn: Any, keys: list[Any], done: Migrated) -> None:
    if not keys:
        return
    with conn.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hmget(key, *OLD)
        found = pipe.execute()
    done.rows += len(keys)
    for key, values in zip(keys, found, strict=True):
        if any(value is not None for value in values) and migrate_row(conn, key):
            done.rewritten += 1
