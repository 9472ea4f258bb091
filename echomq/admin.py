"""An operator's view of queues: what is where, how old, what died and why; requeue and purge.

Everything here reads with plain commands, and writes only through the ``requeue`` and ``purge``
scripts (atomic; scripts whatever wire the queue's workers use).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from echomq.calls import ZSETS, QueueCalls, payload_bytes, text
from echomq.executors import executor_for
from echomq.lanes import lane_depths_of
from echomq.loop import HOUSEKEEPING_STEP, more_due
from echomq.registry import DISCOVERED_KEY, REGISTRY_KEY

_SCRIPTS = executor_for(5)
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DeadJob:
    id: str
    died_at_ms: int
    attempts: int
    error: str
    lane: str | None


def shown(value: Any) -> str:
    """``value`` as text to show: stored errors and payloads are bytes that need not be UTF-8,
    so bytes that do not decode show escaped (``\\xff``) instead of failing the view."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def server_time_ms(conn: Any) -> int:
    seconds, micros = conn.time()
    return int(seconds) * 1000 + int(micros) // 1000


def register_queue(conn: Any, name: str) -> None:
    """Add ``name`` to the registry of queues (idempotent; one SADD)."""
    conn.sadd(REGISTRY_KEY, name)


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


def stats(conn: Any, name: str) -> QueueStats:
    """Depths of every part of queue ``name``, its lanes, and the age of its oldest pending job."""
    calls = QueueCalls(name)
    with conn.pipeline(transaction=False) as pipe:
        for role in ZSETS:
            pipe.zcard(calls.key(role))
        pipe.zrange(calls.key("pending"), 0, 0, withscores=True)
        pipe.lrange(calls.key("ring"), 0, -1)
        pipe.hkeys(calls.key("parked"))
        *sizes, oldest, groups, parked = pipe.execute()
    now = server_time_ms(conn)
    lanes = lane_depths_of(conn, lambda group: calls.key("lane", lane=group), groups, parked)
    age = now - int(oldest[0][1]) if oldest else None
    pending, active, delayed, dead = (int(size) for size in sizes)
    return QueueStats(name, pending, active, delayed, dead, lanes=lanes,
                      oldest_pending_age_ms=age, server_time_ms=now)



def inspect(conn: Any, name: str, job_id: str) -> dict[str, Any] | None:
    """The row of ``job_id`` and where the job is (with its score there), or None."""
    calls = QueueCalls(name)
    row = conn.hgetall(calls.key("job", job_id))
    if not row:
        return None
    fields: dict[str, Any] = {shown(k): shown(v) for k, v in row.items() if shown(k) != "payload"}
    if b"payload" in row or "payload" in row:
        fields["payload"] = payload_bytes(row.get(b"payload", row.get("payload")))
    where, score = _location(conn, calls, job_id, fields.get("lane"))
    ttl = conn.pttl(calls.key("job", job_id))
    return {"id": job_id, "state": where, "score": score, "fields": fields,
            "expires_in_ms": ttl if ttl >= 0 else None}


def _location(conn: Any, calls: QueueCalls, job_id: str,
              lane: str | None) -> tuple[str, int | None]:
    with conn.pipeline(transaction=False) as pipe:
        for role in ZSETS:
            pipe.zscore(calls.key(role), job_id)
        scores = pipe.execute()
    for role, score in zip(ZSETS, scores, strict=True):
        if score is not None:
            return role, int(score)
    if lane is not None and conn.lpos(calls.key("lane", lane=lane), job_id) is not None:
        return f"lane:{lane}", None
    return "completed", None


def dead_jobs(conn: Any, name: str, limit: int = 100) -> list[DeadJob]:
    """The dead jobs of queue ``name``, oldest death first, with their last errors."""
    calls = QueueCalls(name)
    entries = conn.zrange(calls.key("dead"), 0, limit - 1, withscores=True)
    with conn.pipeline(transaction=False) as pipe:
        for job_id, _ in entries:
            pipe.hmget(calls.key("job", text(job_id)), "attempts", "error", "lane")
        rows = pipe.execute()
    return [DeadJob(text(job_id), int(score), int(row[0] or 0), shown(row[1] or b""),
                    text(row[2]) if row[2] is not None else None)
            for (job_id, score), row in zip(entries, rows, strict=True)]


def requeue(conn: Any, name: str, job_id: str, *, now: int | None = None) -> bool:
    """Run dead job ``job_id`` again with fresh attempts; False if it is not dead."""
    reply = _SCRIPTS.call(conn, *QueueCalls(name).requeue(job_id, now))
    return text(reply) == "REQUEUED"


def purge(conn: Any, name: str, *, limit: int = 1000) -> int:
    """Delete up to ``limit`` dead jobs (oldest first) and their rows; how many went."""
    return int(_SCRIPTS.call(conn, *QueueCalls(name).purge(limit)))


def recover_due(queue: Any, *, now: int | None = None,
                max_attempts: int | None = None) -> tuple[int, int]:
    """Recover ``queue``'s expired leases, then promote its due jobs, each in steps of at most
    HOUSEKEEPING_STEP (every call short) until a step leaves none due: (recovered, promoted)."""
    recovered = promoted = 0
    while True:
        step = queue.recover(now=now, limit=HOUSEKEEPING_STEP, max_attempts=max_attempts)
        recovered += step
        if not more_due(step):
            break
    while True:
        step = queue.promote(now=now, limit=HOUSEKEEPING_STEP)
        promoted += step
        if not more_due(step):
            break
    return recovered, promoted
