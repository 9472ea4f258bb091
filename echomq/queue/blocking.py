"""``Queue``: the producer's and the worker's view of one echomq queue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

from echomq.engine.calls import (
    DEFAULT_LEASE_MS,
    Ack,
    Job,
    JobOutcome,
    Release,
    Retry,
    Verdict,
)
from echomq.engine.events import Event
from echomq.engine.executors import Executor, executor_for
from echomq.engine.program import BlockingShell, Program, drive
from echomq.queue.events import AFTER_NOW, resumed
from echomq.queue.methods import QueueMethods
from echomq.queue.policy import evicting_check
from echomq.queue.shard_layout import recorded_shards
from echomq.queue.sharded import ShardedMethods

__all__ = ["DEFAULT_LEASE_MS", "Ack", "Job", "JobOutcome", "Queue", "Release", "Retry",
           "ShardedQueue", "Verdict", "recorded_queue",
           "warn_if_evicting"]

R = TypeVar("R")


def warn_if_evicting(conn: Any) -> str | None:
    """Warns (EvictionPolicyWarning, and the ``echomq`` log) when the server's maxmemory-policy
    may evict keys: a queue's jobs would then vanish under memory pressure. Returns that policy;
    None when it cannot evict or the server does not say (CONFIG denied by ACL, or renamed)."""
    return drive(evicting_check(conn))


class Queue(QueueMethods, BlockingShell):
    """One queue on a Valkey server, run by scripts (``wire=5``) or the trafikey module (``6``).

    ``conn`` is a ``redis.Redis`` or ``redis.cluster.RedisCluster``. Every time-dependent call
    takes ``now`` (ms); None lets the server's clock decide. Creating it does no I/O: with
    ``check_policy``, the server's eviction policy is checked before the queue's first command,
    once per client (``check_policy()``; a warning when the server may evict keys).

    Its methods are programs written once for this blocking client and the asyncio one
    (``echomq.queue.methods``).
    """

    executor: Executor
    _executor_of = staticmethod(executor_for)

    def _drive(self, program: Program[R]) -> R:
        return drive(self._checked(program))

    def follow(self, since: str | None = None, block_ms: int = 10_000) -> Iterator[Event]:
        """Each event after ``since`` (None: from the oldest kept; ``"$"``: from now on) as it
        comes, for ever: ``events`` in a loop, each read waiting up to ``block_ms``."""
        after = resumed(since, self.latest_events(1) if since == AFTER_NOW else [])
        while True:
            for event in self.events(after, block_ms=block_ms):
                after = event.id
                yield event


class ShardedQueue(ShardedMethods, Queue):
    """One logical queue over N shards (``Queue(conn, name, shards=N)``): see
    ``echomq.queue.sharded``. The count of shards is recorded, or checked, before its first
    command."""

    _plain_class = Queue


Queue._sharded_class = ShardedQueue


def recorded_queue(conn: Any, name: str, **options: Any) -> Queue:
    """The Queue of ``name`` as the server records it: sharded over its recorded count of
    shards, else plain (one GET): what the operator's tools and the worker open."""
    return Queue(conn, name, shards=recorded_shards(conn, name), **options)
