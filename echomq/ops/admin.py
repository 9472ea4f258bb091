"""An operator's view of queues: what is where, how old, what died and why; requeue and purge.

Everything here reads with plain commands, and writes only through the ``requeue`` and ``purge``
scripts (atomic; scripts whatever wire the queue's workers use). On a queue that has an events
stream, an operator's change appends its events too (``has_events``).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from echomq.engine import rows as jobrow
from echomq.engine.calls import ZSETS, QueueCalls, payload_bytes, text
from echomq.engine.clients import is_cluster
from echomq.engine.executors import executor_for
from echomq.engine.priority import band, split_score
from echomq.engine.server_time import server_ms, time_ms
from echomq.engine.transitions import EVENTS_ROLE
from echomq.engine.wire import Wire
from echomq.queue.lanes import (
    lane_groups,
    paused_lanes,
    per_group,
    ring_in_turn,
    shown_depths,
    waiting_keys,
)
from echomq.queue.registry import DISCOVERED_KEY, REGISTRY_KEY
from echomq.queue.shard_layout import ShardCalls, recorded_shards, shard_of
from echomq.tasks.envelope import PayloadError, decode_envelope

_SCRIPTS = executor_for(Wire.SCRIPTS)
_QUEUE_KEY = re.compile(rb"^emq:\{(?P<name>[^{}]+)\}:(pending|active|delayed|dead|ring)$")


@dataclass
class QueueStats:
    name: str
    pending: int
    active: int
    delayed: int
    dead: int
    lanes: dict[str, int] = field(default_factory=dict)
    oldest_pending_age_ms: int | None = None
    server_time_ms: int = 0
    paused: bool = False
    paused_lanes: list[str] = field(default_factory=list)
    waiting: int = 0  # jobs waiting for their parents (Queue.enqueue_after), in <base>waiting

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def holds_anything(self) -> bool:
        """Whether the queue holds a job in any state, a lane or its pause."""
        return bool(self.pending or self.active or self.delayed or self.dead or self.lanes
                    or self.paused or self.waiting)


@dataclass
class DeadJob:
    id: str
    died_at_ms: int
    attempts: int
    error: str
    lane: str | None
    task: str | None = None  # the task a task job (an App's, or Django's) called


class _TaskCall(msgspec.Struct):
    task: str


_TASK_DECODERS = (msgspec.json.Decoder(_TaskCall), msgspec.msgpack.Decoder(_TaskCall))


def task_of(payload: bytes | None) -> str | None:
    """The task name a task job's payload carries (JSON or MessagePack, an App's envelope in
    either form or a Django call); None for any other payload."""
    if not payload:
        return None
    with contextlib.suppress(PayloadError):
        return decode_envelope(payload).task
    decoder = _TASK_DECODERS[0] if payload[:1] == b"{" else _TASK_DECODERS[1]
    try:
        return decoder.decode(payload).task
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class _Report(msgspec.Struct):
    value: Any


_REPORT_DECODERS = (msgspec.json.Decoder(_Report), msgspec.msgpack.Decoder(_Report))


def progress_of(raw: bytes) -> str:
    """A job's progress as text to show: a task's report (``echomq.progress``: a map of its
    value, JSON or MessagePack) as the JSON of that value; any other bytes as ``shown`` gives
    them."""
    decoder = _REPORT_DECODERS[0] if raw[:1] == b"{" else _REPORT_DECODERS[1]
    try:
        return json.dumps(decoder.decode(raw).value)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError):
        return shown(raw)


def shown(value: Any) -> str:
    """``value`` as text to show: stored errors and payloads are bytes that need not be UTF-8,
    so bytes that do not decode show escaped (``\\xff``) instead of failing the view."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def readable_error(error: str) -> str:
    """A stored error as echomq writes its own, its last line first then the traceback: a
    Django task's (JSON of ``exception_class_path`` and ``traceback``) is unpacked; any other
    text is kept as it is."""
    if not error.startswith("{"):
        return error
    try:
        found = json.loads(error)
        trace = str(found["traceback"]).rstrip("\n")
        kind = str(found["exception_class_path"])
    except (ValueError, TypeError, KeyError):
        return error
    last = trace.rpartition("\n")[2] or kind
    return f"{last}\n{trace}" if trace else kind


# The server's clock in ms, under the name the operator's tools have always called it by.
server_time_ms = server_ms


def register_queue(conn: Any, name: str) -> None:
    """Add ``name`` to the registry of queues (idempotent; one SADD)."""
    conn.sadd(REGISTRY_KEY, name)


def is_listed(conn: Any, name: str) -> bool:
    """Whether ``name`` is in the registry of queues."""
    return bool(conn.sismember(REGISTRY_KEY, name))


def forget_queue(conn: Any, name: str) -> bool:
    """Take ``name`` off the registry (its keys stay); False if it was not registered."""
    return bool(conn.srem(REGISTRY_KEY, name))


def queue_names(conn: Any) -> list[str]:
    """The registered queues of this server, sorted. The first call on a server whose keyspace
    was never searched discovers the queues made before the registry (one SCAN); every later
    call costs one SMEMBERS whatever the number of keys."""
    with conn.pipeline(transaction=False) as pipe:
        pipe.exists(DISCOVERED_KEY)
        pipe.smembers(REGISTRY_KEY)
        discovered, members = pipe.execute()
    names = {text(member) for member in members}
    if not discovered:
        names |= discover_queues(conn)
    return sorted(names)


def discover_queues(conn: Any) -> set[str]:
    """Search the keyspace once for queues by their fixed key names (``emq:{q}:pending`` and its
    siblings; job rows never match) and register them. Run again by ``echomq stats --rescan``."""
    names = set()
    # One pass; the server filters on the first letter of the five fixed names, so job rows
    # (``job:``), lanes (``lane:``) and the rest never reach the client.
    for key in conn.scan_iter(match="emq:{*}:[pdar]*", count=1000):
        found = _QUEUE_KEY.match(key if isinstance(key, bytes) else key.encode())
        if found:
            names.add(found["name"].decode())
    with conn.pipeline(transaction=False) as pipe:
        if names:
            pipe.sadd(REGISTRY_KEY, *names)
        pipe.set(DISCOVERED_KEY, "1")
        pipe.execute()
    return names


def queue_calls(conn: Any, name: str, *, events: bool = False) -> list[QueueCalls]:
    """The calls of each part of queue ``name``: of each of its shards, in order, when it is
    recorded sharded (``echomq.queue.shard_layout``), else its own; one GET."""
    count = recorded_shards(conn, name)
    if count is None:
        return [QueueCalls(name, events=events)]
    return [ShardCalls(name, index, count, events=events) for index in range(count)]


def _first_for_id(parts: list[QueueCalls], job_id: str) -> list[QueueCalls]:
    """``parts`` with the one ``job_id`` routes to first (a lane job's may be another)."""
    if len(parts) == 1:
        return parts
    first = shard_of(job_id, len(parts))
    return [parts[first], *parts[:first], *parts[first + 1:]]


def stats(conn: Any, name: str) -> QueueStats:
    """Depths of every part of queue ``name``, its lanes, whether it or any lane is paused,
    and the age of its oldest waiting job (flat or at a lane's head). A GET (is it sharded?),
    then three round trips whatever the number of lanes: the queue's keys, each lane's depth and
    head, the heads' admission times; one more when flat jobs of several priorities wait (the
    head of each priority between the highest and the lowest). On a cluster client, one more:
    ``TIME`` of the node serving the queue's slot (a cluster pipeline refuses ``TIME``). A
    sharded queue is one row: its shards' sums, the oldest age the largest of theirs."""
    parts = [_stats_of(conn, calls, name) for calls in queue_calls(conn, name)]
    return parts[0] if len(parts) == 1 else summed(name, parts)


def summed(name: str, parts: list[QueueStats]) -> QueueStats:
    """One queue's stats from its shards'."""
    ages = [part.oldest_pending_age_ms for part in parts
            if part.oldest_pending_age_ms is not None]
    lanes: dict[str, int] = {}
    for part in parts:
        lanes.update(part.lanes)
    total = {role: sum(getattr(part, role) for part in parts) for role in ZSETS}
    return QueueStats(name, total["pending"], total["active"], total["delayed"], total["dead"],
                      lanes=lanes, oldest_pending_age_ms=max(ages, default=None),
                      server_time_ms=max(part.server_time_ms for part in parts),
                      paused=any(part.paused for part in parts),
                      paused_lanes=sorted(lane for part in parts for lane in part.paused_lanes),
                      waiting=sum(part.waiting for part in parts))


def _stats_of(conn: Any, calls: QueueCalls, name: str) -> QueueStats:
    clustered = is_cluster(conn)
    with conn.pipeline(transaction=False) as pipe:
        for role in ZSETS:
            pipe.zcard(calls.key(role))
        pipe.zrange(calls.key("pending"), 0, 0, withscores=True)
        pipe.zrange(calls.key("pending"), -1, -1, withscores=True)
        pipe.lrange(calls.key("ring"), 0, -1)
        pipe.hgetall(calls.key("ringleft"))
        pipe.hgetall(calls.key("parked"))
        pipe.exists(calls.key("paused"))
        pipe.zcard(calls.key("waiting"))
        if not clustered:
            pipe.time()  # a cluster pipeline refuses TIME: asked of the slot's node below
        replies = pipe.execute()
    *sizes, head, tail, entries, left, parked, paused, waiting = replies[:len(ZSETS) + 7]
    groups = ring_in_turn(entries, left)
    now = slot_clock_ms(conn, calls.key("pending")) if clustered else time_ms(replies[-1])
    lanes, lane_oldest = _lanes_of(conn, calls, groups, parked)
    oldest = _oldest_pending(conn, calls.key("pending"), head, tail)
    times = [oldest] if oldest is not None else []
    times += [lane_oldest] if lane_oldest is not None else []
    pending, active, delayed, dead = (int(size) for size in sizes)
    return QueueStats(name, pending, active, delayed, dead, lanes=lanes,
                      oldest_pending_age_ms=max(0, now - min(times)) if times else None,
                      server_time_ms=now, paused=bool(paused),
                      paused_lanes=paused_lanes(parked), waiting=int(waiting))


def slot_clock_ms(conn: Any, key: str) -> int:
    """The clock of the cluster node that serves ``key``'s slot, in ms: the clock its
    transitions stamped the queue's admission times with, so ages read off it do not take in the
    skew between nodes' clocks. One round trip (a cluster client sends TIME on its own)."""
    return time_ms(conn.time(target_nodes=conn.get_node_from_key(key)))


def _oldest_pending(conn: Any, key: str, head: list[Any], tail: list[Any]) -> int | None:
    """The earliest admission time among the flat pending jobs, from the first and last entries
    of ``pending``: each priority's jobs sort by time within its band, so the earliest is the
    earliest of the bands' heads (read when more than one priority waits)."""
    if not head:
        return None
    (highest, first), (lowest, _) = split_score(head[0][1]), split_score(tail[0][1])
    if highest == lowest:
        return first
    with conn.pipeline(transaction=False) as pipe:
        for priority in range(lowest, highest + 1):
            low, high = band(priority)
            pipe.zrangebyscore(key, low, high, start=0, num=1, withscores=True)
        heads = pipe.execute()
    return min(split_score(found[0][1])[1] for found in heads if found)


def _lanes_of(conn: Any, calls: QueueCalls, ring: list[Any],
              parked: dict[Any, Any]) -> tuple[dict[str, int], int | None]:
    """Each lane's depth, both its keys (as ``shown_depths`` keeps them), and the earliest
    admission time of the jobs at their heads: the list's head (its row's time) and the prio
    zset's (the time in its score); None: no lane job waits."""
    names = lane_groups(ring, parked)
    if not names:
        return {}, None
    with conn.pipeline(transaction=False) as pipe:
        for group in names:
            listed, prioritised = waiting_keys(calls.key, group)
            pipe.llen(listed)
            pipe.zcard(prioritised)
            pipe.lindex(listed, 0)
            pipe.zrange(prioritised, 0, 0, withscores=True)
        replies = pipe.execute()
    counts = [count for i in range(0, len(replies), 4) for count in replies[i:i + 2]]
    heads = [text(head) for head in replies[2::4] if head is not None]
    prio_times = [split_score(top[0][1])[1] for top in replies[3::4] if top]
    with conn.pipeline(transaction=False) as pipe:
        for job_id in heads:
            pipe.hget(calls.key("job", job_id), jobrow.ENQUEUED_AT)
        admitted = [int(at) for at in pipe.execute() if at is not None and text(at).isdigit()]
    return (shown_depths(names, per_group(counts), ring),
            min(admitted + prio_times, default=None))


def inspect(conn: Any, name: str, job_id: str) -> dict[str, Any] | None:
    """The row of ``job_id`` (its fields under their full names: ``payload``, ``attempts``,
    ``enqueued_at``, ``fence``, ...) and where the job is (with its score there), or None."""
    found = located(conn, name, job_id)
    return None if found is None else found[1]


def located(conn: Any, name: str, job_id: str) -> tuple[QueueCalls, dict[str, Any]] | None:
    """What ``inspect`` tells of ``job_id``, with the part of queue ``name`` (itself, or the
    shard) that holds its row; None when no part does."""
    for calls in _first_for_id(queue_calls(conn, name), job_id):
        row = conn.hgetall(calls.key("job", job_id))
        if row:
            return calls, _inspected(conn, calls, row, job_id)
    return None


def _inspected(conn: Any, calls: QueueCalls, row: dict[Any, Any],
               job_id: str) -> dict[str, Any]:
    named = {jobrow.FULL_NAMES.get(shown(k), shown(k)): v for k, v in row.items()}
    fields: dict[str, Any] = {k: shown(v) for k, v in named.items() if k != "payload"}
    if "payload" in named:
        fields["payload"] = payload_bytes(named["payload"])
    fields.setdefault("attempts", "0")  # a row never claimed has no a (docs/PROTOCOL.md)
    if "progress" in named:
        fields["progress"] = progress_of(payload_bytes(named["progress"]))
    if "result_dropped" in fields:  # an ack over maxmemory kept the outcome, not the result
        fields["result"] = f"dropped ({fields.pop('result_dropped')})"
    where, score = _location(conn, calls, job_id, fields.get("lane"))
    ttl = conn.pttl(calls.key("job", job_id))
    return {"id": job_id, "state": where, "score": score, "fields": fields,
            "expires_in_ms": ttl if ttl >= 0 else None}


def _location(conn: Any, calls: QueueCalls, job_id: str,
              lane: str | None) -> tuple[str, int | None]:
    with conn.pipeline(transaction=False) as pipe:
        for role in (*ZSETS, "waiting"):
            pipe.zscore(calls.key(role), job_id)
        scores = pipe.execute()
    for role, score in zip((*ZSETS, "waiting"), scores, strict=True):
        if score is not None:
            return role, int(score)
    if lane is not None and conn.lpos(calls.key("lane", lane=lane), job_id) is not None:
        return f"lane:{lane}", None
    # a prioritised lane job: its score is no moment (its row holds its priority and time)
    if lane is not None and conn.zscore(calls.key("prio", lane=lane), job_id) is not None:
        return f"lane:{lane}", None
    return "completed", None


def dead_jobs(conn: Any, name: str, limit: int = 100, *, start: int = 0,
              newest_first: bool = False) -> list[DeadJob]:
    """The dead jobs of queue ``name``, oldest death first (``newest_first``: newest first)
    from the ``start``-th, with their last errors (of a sharded queue: its shards' merged by
    time of death)."""
    parts = queue_calls(conn, name)
    if len(parts) == 1:
        return _dead_of(conn, parts[0], start, limit, newest_first)
    merged = [job for calls in parts
              for job in _dead_of(conn, calls, 0, start + limit, newest_first)]
    return sorted(merged, key=lambda job: job.died_at_ms,
                  reverse=newest_first)[start:start + limit]


def _dead_of(conn: Any, calls: QueueCalls, start: int, limit: int,
             newest_first: bool) -> list[DeadJob]:
    entries = conn.zrange(calls.key("dead"), start, start + limit - 1, desc=newest_first,
                          withscores=True)
    with conn.pipeline(transaction=False) as pipe:
        for job_id, _ in entries:
            pipe.hmget(calls.key("job", text(job_id)), jobrow.ATTEMPTS, "error", "lane",
                       jobrow.PAYLOAD)
        rows = pipe.execute()
    return [DeadJob(text(job_id), int(score), int(row[0] or 0),
                    readable_error(shown(row[1] or b"")),
                    text(row[2]) if row[2] is not None else None,
                    task_of(payload_bytes(row[3]) if row[3] is not None else None))
            for (job_id, score), row in zip(entries, rows, strict=True)]


DEAD_PAGE = 1000


def every_dead_job(conn: Any, name: str) -> list[DeadJob]:
    """Every dead job of queue ``name``, oldest death first, read a page at a time."""
    found: list[DeadJob] = []
    while True:
        page = dead_jobs(conn, name, DEAD_PAGE, start=len(found))
        found += page
        if len(page) < DEAD_PAGE:
            return found


def has_events(conn: Any, name: str) -> bool:
    """Whether queue ``name`` has an events stream (its Queues are made with ``events=True``):
    an operator's change to it then declares the key too, so the stream misses none."""
    return _streams(conn, QueueCalls(name))


def _streams(conn: Any, calls: QueueCalls) -> bool:
    return bool(conn.exists(calls.key(EVENTS_ROLE)))


def _with_events(conn: Any, calls: QueueCalls) -> QueueCalls:
    """``calls`` declaring the events key when its queue (or shard) has an events stream."""
    calls.events = _streams(conn, calls)
    return calls


def requeue(conn: Any, name: str, job_id: str, *, now: int | None = None) -> bool:
    """Run dead job ``job_id`` again with fresh attempts; False if it is not dead (of a sharded
    queue: on its id's shard, then, a lane job's, the others)."""
    for calls in _first_for_id(queue_calls(conn, name), job_id):
        reply = _SCRIPTS.call(conn, *_with_events(conn, calls).requeue(job_id, now))
        if text(reply) == "REQUEUED":
            return True
    return False


def purge(conn: Any, name: str, *, limit: int = 1000) -> int:
    """Delete up to ``limit`` dead jobs (oldest first; of a sharded queue, shard by shard) and
    their rows; how many went."""
    gone = 0
    for calls in queue_calls(conn, name):
        if gone < limit:
            gone += int(_SCRIPTS.call(conn, *_with_events(conn, calls).purge(limit - gone)))
    return gone
