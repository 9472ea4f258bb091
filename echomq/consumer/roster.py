"""The registry of live workers as the operator's tools read it (``echomq workers``, ``stats``,
the dashboard): each record ``presence`` writes, as a ``WorkerInfo``; the set ``emq:workers``
pruned of the members whose record expired; the workers and the jobs in hand of each queue.
Times are the server's clock (ms), as the records give them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from echomq.consumer.presence import EXPIRY_MS, WORKERS_KEY
from echomq.engine.calls import text


@dataclass
class WorkerInfo:
    """One live worker as its record says; ``job`` is None when it is idle. ``queue`` is the
    first of the ``queues`` it serves, in priority order."""

    key: str
    host: str
    pid: int
    queue: str
    wire: int | str  # 5, 6, or "auto"
    started_ms: int
    job: str | None
    job_since_ms: int | None
    done: int
    failed: int
    beat_ms: int
    queues: list[str] = field(default_factory=list)
    running: int = 0  # jobs in hand at the last beat (a prefetched lease is not in hand)
    parked: bool = False  # written by the consumer's park: nothing in hand, beating once a park
    expiry_ms: int = EXPIRY_MS  # how long after ``beat_ms`` the record expires

    @property
    def job_ran_ms(self) -> int | None:
        """How long the job shown had run at the last beat (None: idle then); the job may have
        ended since, so its age is never read against the clock of today."""
        return None if self.job_since_ms is None else max(0, self.beat_ms - self.job_since_ms)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)



def live_workers(conn: Any) -> list[WorkerInfo]:
    """The workers whose records have not expired, by queue, host and pid; the members of
    ``emq:workers`` whose record is gone are taken off it."""
    keys = sorted(text(member) for member in conn.smembers(WORKERS_KEY))
    with conn.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hgetall(key)
        records = pipe.execute()
    gone = [key for key, record in zip(keys, records, strict=True) if not record]
    if gone:
        conn.srem(WORKERS_KEY, *gone)
    found = [_info(key, record) for key, record in zip(keys, records, strict=True) if record]
    return sorted(found, key=lambda w: (w.queue, w.host, w.pid, w.started_ms))


def counts_by_queue(workers: list[WorkerInfo]) -> dict[str, int]:
    """How many workers serve each queue (a worker of several queues counts for each)."""
    counts: dict[str, int] = {}
    for worker in workers:
        for queue in worker.queues or [worker.queue]:
            counts[queue] = counts.get(queue, 0) + 1
    return counts


def running_by_queue(workers: list[WorkerInfo]) -> dict[str, int]:
    """The jobs in hand at the last beat of each queue's workers (a worker of several queues
    counts for each)."""
    counts: dict[str, int] = {}
    for worker in workers:
        for queue in worker.queues or [worker.queue]:
            counts[queue] = counts.get(queue, 0) + worker.running
    return counts


def queues_field(raw: str | None, first: str) -> list[str]:
    """A record's ``queues`` (a JSON list); a record without one serves ``first`` alone."""
    try:
        found = json.loads(raw) if raw else None
    except ValueError:
        found = None
    if isinstance(found, list) and found and all(isinstance(name, str) for name in found):
        return found
    return [first] if first else []


def wire_field(raw: str) -> int | str:
    """A record's wire: its number (5, 6; 0 when missing), or ``auto`` as it is written."""
    return int(raw) if raw.isdigit() else raw or 0


def _info(key: str, record: dict[Any, Any]) -> WorkerInfo:
    fields = {text(name): text(value) for name, value in record.items()}

    def number(name: str) -> int:
        try:
            return int(fields.get(name, "0"))
        except ValueError:
            return 0

    job = fields.get("job") or None
    return WorkerInfo(key=key, host=fields.get("host", ""), pid=number("pid"),
                      queue=fields.get("queue", ""), wire=wire_field(fields.get("wire", "")),
                      started_ms=number("started_ms"), job=job,
                      job_since_ms=number("job_since_ms") if job else None,
                      done=number("done"), failed=number("failed"), beat_ms=number("beat_ms"),
                      queues=queues_field(fields.get("queues"), fields.get("queue", "")),
                      running=number("running") if "running" in fields else int(job is not None),
                      parked=fields.get("parked") == "1",
                      expiry_ms=number("expiry_ms") if "expiry_ms" in fields else EXPIRY_MS)
