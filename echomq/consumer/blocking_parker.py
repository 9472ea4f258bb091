"""The blocking consumer's parking: ``Parker`` reads the heads and parks on the wake and watch
keys through a connection of its own (so a stop can ``CLIENT UNBLOCK`` exactly this consumer),
and the wake and watch tokens a consumer leaves (``echomq.queue.parking``)."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import redis

from echomq.consumer.node_parks import (
    CONNECTION_ERRORS,
    UNBLOCK_PATIENCE_S,
    WAKE_CAP,
    NodeParks,
    park_groups,
)
from echomq.consumer.settings import park_socket_timeout
from echomq.consumer.shell import park_keys, queue_park_reads, sightings_of
from echomq.engine.calls import text
from echomq.engine.clients import is_cluster, private_twin, twins
from echomq.engine.scatter import CommandList, scatter_reads
from echomq.engine.server_time import server_ms
from echomq.engine.transact import transact_once
from echomq.queue.blocking import Queue
from echomq.queue.connection import socket_timeout_of
from echomq.queue.parking import (
    WATCH_ROLE,
    WATCH_TOKENS,
    is_watch,
    queue_watch,
    split_beat,
)

if TYPE_CHECKING:
    from echomq.consumer.presence import Announcer




def push_wake_token(queue: Queue, key: str | None = None) -> None:
    """Leave one wake token on ``key`` (None: the queue's wake key), keeping the wake list
    within its cap (one atomic MULTI)."""
    wake = queue.key("wake") if key is None else key
    # on a cluster, a transaction on the node of the key's slot (a cluster client's own pipeline
    # holds none on every client version)
    for reply in transact_once(queue.conn, [("RPUSH", wake, 1), ("LTRIM", wake, 0, WAKE_CAP - 1)]):
        if isinstance(reply, Exception):
            raise reply


def push_watch_token(queue: Queue, key: str | None = None, tokens: int = WATCH_TOKENS) -> None:
    """Leave ``tokens`` on ``key`` (None: the queue's watch key): as many parked consumers of
    the queue read its heads again (see ``echomq.queue.parking``)."""
    with queue.conn.pipeline(transaction=False) as pipe:
        queue_watch(pipe, queue.key(WATCH_ROLE) if key is None else key, tokens)
        pipe.execute()


def hand_back(queue: Queue, kind: str, key: str) -> None:
    """Push one popped token of ``kind`` ("wake" or "watch") back to ``key``."""
    if kind == "watch":
        push_watch_token(queue, key, tokens=1)
    else:
        push_wake_token(queue, key)


class Parker:
    """Parks on the wake key through a connection of its own, so that ``interrupt`` can
    ``CLIENT UNBLOCK`` exactly this consumer (a wake token could wake another one instead).
    On a cluster, queues in several slots are parked on with one call per slot at once
    (``echomq.consumer.node_parks``).

    No lock: ``park`` marks itself parked before it reads the stop flag and ``stop`` sets the
    flag before it reads the mark, so one of the two always sees the other (and a stop from a
    signal handler cannot deadlock on a lock its own thread holds)."""

    def __init__(self, queues: Sequence[Queue], cap_ms: int) -> None:
        self._queue = queues[0]
        self._queues = list(queues)
        self._keys = park_keys(queues)
        self._cap_ms = cap_ms
        self._parked_in: int | None = None  # the parking thread, while it parks
        self._own: Queue | None = None
        self._client_id: int | None = None
        self._nodes: NodeParks | None = None  # a cluster client's parks over several slots
        self.socket_timeout_s: float | None = None

    def bind(self) -> Queue:
        """The queue as seen through the parking connection (made on first use)."""
        if self._own is not None:
            return self._own
        conn = self._queue.conn
        self.socket_timeout_s = socket_timeout_of(conn)
        # A pool of its own, whose read timeout outlasts the longest park.
        private = private_twin(conn, park_socket_timeout(self.socket_timeout_s, self._cap_ms))
        if private is not None:
            self.socket_timeout_s = private.connection_pool.connection_kwargs["socket_timeout"]
            self._client_id = int(private.client_id())
            self._own = copy.copy(self._queue)  # the same queue, parked through ``private``
            self._own.conn = private
        else:  # a cluster client: stop() falls back to a wake token
            self._own = self._queue
            if is_cluster(conn) and len(self._queues) > 1:
                self._nodes = NodeParks(
                    conn, park_socket_timeout(self.socket_timeout_s, self._cap_ms),
                    wake=lambda key: push_wake_token(self._queue, key),
                    push=lambda kind, key: hand_back(self._queue, kind, key))
        return self._own

    def read(self, *, ready: bool, lanes: bool,
             announcer: Announcer | None = None) -> list[Any]:
        """A Sighting of each queue, read through the parking connection in one flush (it was
        used last by a BLPOP, so no health check goes before it); ``announcer``: the read goes
        before a park, and the record rides in the flush when due."""
        own = self.bind()
        if is_cluster(own.conn):  # node by node, once: a node that is down fails its own
            pending = CommandList()
            queue_park_reads(pending, self._queues, ready=ready, lanes=lanes)
            beat = 0 if announcer is None else announcer.queue_parked(pending, self._cap_ms)
            replies, written = split_beat(scatter_reads(own.conn, pending.commands), beat)
        else:
            with own.conn.pipeline(transaction=False) as pipe:
                queue_park_reads(pipe, self._queues, ready=ready, lanes=lanes)
                beat = 0 if announcer is None else announcer.queue_parked(pipe, self._cap_ms)
                replies, written = split_beat(pipe.execute(raise_on_error=not beat), beat)
        if announcer is not None and beat and announcer.parked_written(written):
            announcer.relist()
        return sightings_of(replies, len(self._queues))

    def server_ms(self) -> int:
        return server_ms(self.bind().conn)

    def park(self, timeout_s: float, stopping: threading.Event) -> str | None:
        """Block until a token on any of the wake or watch keys, ``timeout_s``, or
        ``interrupt``: "wake", "watch" (which token), or None."""
        own = self.bind()
        if self._nodes is not None:
            groups = park_groups(own.conn, self._keys)
            if len(groups) > 1:
                return self._nodes.park(groups, timeout_s, stopping)
        self._parked_in = threading.get_ident()
        try:
            if stopping.is_set():
                return None
            popped = own.conn.blpop(self._keys, timeout=timeout_s)
        except twins(*CONNECTION_ERRORS):
            self.close()
            raise
        finally:
            self._parked_in = None
        if popped is None:
            return None
        kind = "watch" if is_watch(popped[0]) else "wake"
        if stopping.is_set():
            # A stopping consumer hands its token on, to the key it came from.
            hand_back(self._queue, kind, text(popped[0]))
        return kind

    def interrupt(self) -> None:
        """Make a park in progress return now (called after the stop flag is set): on a
        cluster, every slot's call."""
        if self._nodes is not None:
            self._nodes.interrupt()
        deadline = time.monotonic() + UNBLOCK_PATIENCE_S
        while (parker := self._parked_in) is not None:
            unblocked = self._unblock()
            if unblocked:
                return
            if unblocked is None or parker == threading.get_ident() \
                    or time.monotonic() > deadline:
                # No CLIENT UNBLOCK here (a cluster client, or denied), or we are the parked
                # thread itself, in a signal handler: a wake token is the way left.
                push_wake_token(self._queue)
                return
            time.sleep(0.002)  # the BLPOP is on its way to the server

    def close(self) -> None:
        nodes, self._nodes = self._nodes, None
        if nodes is not None:
            nodes.close()
        own, self._own, self._client_id = self._own, None, None
        if own is not None and own is not self._queue:
            with suppress(Exception):
                own.conn.close()
                own.conn.connection_pool.disconnect()

    def _unblock(self) -> bool | None:
        """CLIENT UNBLOCK the parking connection: whether it was blocked; None if impossible."""
        client_id = self._client_id
        if client_id is None:
            return None
        try:
            return bool(self._queue.conn.client_unblock(client_id))
        except twins(redis.ResponseError):
            return None
        except twins(redis.RedisError):
            return False
