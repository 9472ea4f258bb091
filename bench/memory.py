"""What a job costs in memory, piece by piece: the whole pending job (``enqueue_many`` with
default ids, payload ``noop``), its row alone, its pending-zset entry alone, the row again with
the earlier release's long field names (what the one-letter names saved) and with ``a 0``
(what leaving the attempts out of a new row saved), a pending task job (``@app.task`` on the
peers' no-op, ``enqueue_many``) beside it with the earlier release's envelope (a map of every
field, empty ones included), the same job with ids of other lengths, and the tombstone an acked
job leaves for ``retention_ms`` (with and without its expiry). Each figure is the used_memory
growth over N jobs, divided by N, on an empty server."""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec
import redis

from bench.common import pipelined, settle_memory
from bench.peers.tasks import noop
from echomq import Ack, App, Queue, new_job_id
from echomq.engine import rows
from echomq.tasks.envelope import now_ms

QUEUE = "bench"
TASK = f"{noop.__module__}.{noop.__qualname__}"  # the name @app.task gives it
PAYLOAD = b"noop"
BATCH = 500
ID_CHARS = string.ascii_letters + string.digits
ID_LENGTHS = (12, 16, 19, 20, 22, 23, 26, 30)  # whole ids, "JOB:" included; 30 = a ULID's
STAMP = 1_796_000_000_000  # a current ms timestamp: 13 digits, as the row's t holds
# The row as enqueue writes it (no attempts until the first claim), the same with its attempts
# at 0, and the earlier release's row.
ROW = ((rows.PAYLOAD.encode(), PAYLOAD), (rows.ENQUEUED_AT.encode(), STAMP))
ROW_WITH_ATTEMPTS = (ROW[0], (rows.ATTEMPTS.encode(), 0), ROW[1])
OLD_ROW = ((b"payload", PAYLOAD), (b"attempts", 0), (b"enqueued_at", STAMP))


def per_job(conn: redis.Redis, jobs: int, load: Callable[[], object]) -> float:
    """used_memory growth / ``jobs`` while ``load`` runs on a flushed server."""
    conn.flushall()
    before = settle_memory(conn)
    load()
    return (settle_memory(conn) - before) / jobs


def enqueue_all(queue: Queue, ids: Sequence[str], payload: bytes = PAYLOAD) -> None:
    for start in range(0, len(ids), BATCH):
        queue.enqueue_many([(job_id, payload) for job_id in ids[start:start + BATCH]])


def write_rows(conn: redis.Redis, queue: Queue, ids: Iterable[str],
               fields: Sequence[tuple[bytes, Any]]) -> None:
    """Each id's row with the given fields and values, in order."""
    flat = [part for field in fields for part in field]
    pipelined(conn, (("HSET", queue.key("job", job_id), *flat) for job_id in ids))


def pending_entries(conn: redis.Redis, queue: Queue, ids: Iterable[str]) -> None:
    pipelined(conn, (("ZADD", queue.key("pending"), STAMP, job_id) for job_id in ids))


def ack_all(queue: Queue) -> None:
    """Claim and ack every pending job through ``settle`` (the row stays as a tombstone)."""
    _, held = queue.settle([], claim=BATCH)
    while held:
        _, held = queue.settle([Ack(job) for job in held], claim=BATCH)


def enqueue_tasks(app: App, jobs: int) -> None:
    """``jobs`` calls of the no-op task, each a default id, ``BATCH`` a call."""
    task = app.tasks[TASK]
    for start in range(0, jobs, BATCH):
        task.enqueue_many([()] * min(BATCH, jobs - start))


def earlier_envelope() -> bytes:
    """The no-op task's payload as the earlier release's producer wrote it (JSON)."""
    return msgspec.json.encode({"task": TASK, "args": [], "kwargs": {}, "headers": {},
                                "enqueued_ms": now_ms(), "queue": QUEUE})


def task_jobs(conn: redis.Redis, app: App, jobs: int) -> dict[str, Any]:
    """A pending task job, and the same job with the earlier release's envelope."""
    earlier = earlier_envelope()
    ids = [new_job_id() for _ in range(jobs)]
    return {
        "task_job": per_job(conn, jobs, lambda: enqueue_tasks(app, jobs)),
        "task_job_earlier_envelope": per_job(
            conn, jobs, lambda: enqueue_all(app.queue, ids, earlier)),
        "task_row_usage": _task_row_usage(conn, app),
        "earlier_payload": earlier.decode(),
    }


def random_ids(length: int, count: int) -> list[str]:
    draw = random.Random(length)
    return ["JOB:" + "".join(draw.choices(ID_CHARS, k=length - 4)) for _ in range(count)]


def breakdown(conn: redis.Redis, queue: Queue, jobs: int) -> dict[str, Any]:
    ids = [new_job_id() for _ in range(jobs)]
    return {
        "pending_job": per_job(conn, jobs, lambda: enqueue_all(queue, ids)),
        "row": per_job(conn, jobs, lambda: write_rows(conn, queue, ids, ROW)),
        "row_old_names": per_job(conn, jobs, lambda: write_rows(conn, queue, ids, OLD_ROW)),
        "row_with_attempts": per_job(
            conn, jobs, lambda: write_rows(conn, queue, ids, ROW_WITH_ATTEMPTS)),
        "pending_entry": per_job(conn, jobs, lambda: pending_entries(conn, queue, ids)),
        "row_usage": _row_usage(conn, queue, ids[0]),
        "id_bytes": len(ids[0]),
    }


def _row_usage(conn: redis.Redis, queue: Queue, job_id: str) -> dict[str, Any]:
    """One row's MEMORY USAGE and encoding, with the fields it holds (after a fresh enqueue)."""
    conn.flushall()
    queue.enqueue(job_id, PAYLOAD)
    key = queue.key("job", job_id)
    usage = {"memory_usage": conn.memory_usage(key, samples=0),
             "encoding": _text(conn.object("encoding", key)),
             "fields": sorted(f.decode() for f in conn.hkeys(key))}
    conn.flushall()
    return usage


def _task_row_usage(conn: redis.Redis, app: App) -> dict[str, Any]:
    """One task job's row: its MEMORY USAGE, encoding and payload."""
    conn.flushall()
    key = app.queue.key("job", app.tasks[TASK].enqueue().id)
    usage = {"memory_usage": conn.memory_usage(key, samples=0),
             "encoding": _text(conn.object("encoding", key)),
             "payload": _text(conn.hget(key, rows.PAYLOAD))}
    conn.flushall()
    return usage


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def tombstones(conn: redis.Redis, queue: Queue, jobs: int) -> dict[str, Any]:
    """What an acked job's row costs while it is kept: with its expiry, then without it."""
    ids = [new_job_id() for _ in range(jobs)]
    conn.flushall()
    before = settle_memory(conn)
    enqueue_all(queue, ids)
    ack_all(queue)
    kept = settle_memory(conn)
    fields = sorted(f.decode() for f in conn.hkeys(queue.key("job", ids[0])))
    pipelined(conn, (("PERSIST", queue.key("job", job_id)) for job_id in ids))
    persisted = settle_memory(conn)
    conn.flushall()
    return {"tombstone": (kept - before) / jobs, "without_expiry": (persisted - before) / jobs,
            "fields": fields, "counts_after": jobs}


def run(port: int, jobs: int) -> dict[str, Any]:
    conn = redis.Redis(host="127.0.0.1", port=port)
    queue = Queue(conn, QUEUE, wire=6, check_policy=False)
    results: dict[str, Any] = {"jobs": jobs, "queue": QUEUE, "payload": PAYLOAD.decode()}
    warm = [new_job_id() for _ in range(min(jobs, 1_000))]  # the server's first allocations
    per_job(conn, len(warm), lambda: enqueue_all(queue, warm))
    results["breakdown"] = breakdown(conn, queue, jobs)
    app = App(conn, QUEUE, wire=6, check_policy=False)
    app.task(name=TASK)(noop)
    results["tasks"] = task_jobs(conn, app, jobs)
    results["id_lengths"] = [
        {"id_bytes": length,
         "pending_job": per_job(conn, jobs, lambda n=length: enqueue_all(
             queue, random_ids(n, jobs)))}
        for length in ID_LENGTHS]
    results["tombstone"] = tombstones(conn, queue, jobs)
    results["allocator"] = conn.info("memory").get("mem_allocator")
    conn.flushall()
    conn.close()
    return results
