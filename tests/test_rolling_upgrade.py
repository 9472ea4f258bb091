"""A rolling upgrade across the change of row layout (SPEC invariant 14): a queue the earlier
release wrote (raw commands, as its scripts wrote them: pending jobs, due retries, leases of a
stopped worker, dead jobs, acked jobs' tombstones keeping their results) is served by workers
of this release started before, during and after ``echomq migrate`` runs, on both wires. No
handler gets an empty payload, every live job runs once with its own payload, and no job that
had ended changes its outcome."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from echomq import Consumer, Queue
from echomq.engine.calls import Job, JobOutcome
from echomq.ops import migrate as migrate_module
from echomq.ops.migrate import migrate_queue
from echomq.queue.registry import REGISTRY_KEY

AT = 1_700_000_000_000
PENDING, DELAYED, LEASED, DEAD, DONE = 1_500, 100, 100, 20, 200
ALL_LIVE = PENDING + DELAYED + LEASED
ERRORS = {"JOB:d": "try again"}  # the error a due retry's row keeps


def payload_of(job_id: str) -> bytes:
    return b"\x00payload of " + job_id.encode()


def write_old_release(conn: redis.Redis, base: str, name: str) -> dict[str, int]:
    """Queue ``name`` as the earlier release left it; each live job's attempts so far."""
    attempts: dict[str, int] = {}
    seconds, micros = conn.time()
    died = seconds * 1000 + micros // 1000  # now: not trimmed by the dead jobs' bounds
    with conn.pipeline(transaction=False) as pipe:
        for n in range(PENDING):
            job_id = f"JOB:p{n}"
            pipe.hset(base + "job:" + job_id, mapping={
                "payload": payload_of(job_id), "attempts": "0", "enqueued_at": str(AT + n)})
            pipe.zadd(base + "pending", {job_id: AT + n})
            attempts[job_id] = 0
        for n in range(DELAYED):  # a retry, due
            job_id = f"JOB:d{n}"
            pipe.hset(base + "job:" + job_id, mapping={
                "payload": payload_of(job_id), "attempts": "1", "enqueued_at": str(AT),
                "fence": str(n + 1), "error": "try again"})
            pipe.zadd(base + "delayed", {job_id: 1})
            attempts[job_id] = 1
        for n in range(LEASED):  # leased by a worker that was stopped: its lease expired
            job_id = f"JOB:l{n}"
            pipe.hset(base + "job:" + job_id, mapping={
                "payload": payload_of(job_id), "attempts": "1", "enqueued_at": str(AT),
                "fence": str(DELAYED + n + 1)})
            pipe.zadd(base + "active", {job_id: 1})
            attempts[job_id] = 1
        for n in range(DEAD):
            job_id = f"JOB:x{n}"
            pipe.hset(base + "job:" + job_id, mapping={
                "payload": payload_of(job_id), "attempts": "3", "enqueued_at": str(AT),
                "fence": "1", "error": "boom"})
            pipe.zadd(base + "dead", {job_id: died})
            pipe.rpush(base + "ended:" + job_id, "1")
        for n in range(DONE):  # acked, keeping a result
            job_id = f"JOB:r{n}"
            pipe.hset(base + "job:" + job_id, mapping={
                "attempts": "1", "enqueued_at": str(AT), "fence": "1",
                "result": b"result " + job_id.encode()})
            pipe.pexpire(base + "job:" + job_id, 3_600_000)
            pipe.rpush(base + "ended:" + job_id, "1")
            pipe.pexpire(base + "ended:" + job_id, 3_600_000)
        pipe.set(base + "fence", str(DELAYED + LEASED))
        pipe.sadd(REGISTRY_KEY, name)
        pipe.execute()
    return attempts


def ended_before(job_id: str) -> JobOutcome:
    if job_id.startswith("JOB:x"):
        return JobOutcome("dead", None, "boom", 3)
    return JobOutcome("done", b"result " + job_id.encode(), None, 1)


class Ledger:
    """What the handlers were given: each job's payloads, in order, and when all have run; the
    jobs that ran while migrate was mid-run (its first batch rewritten, not finished)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.payloads: dict[str, list[bytes]] = {}
        self.some_ran = threading.Event()
        self.all_ran = threading.Event()
        self.migrating = threading.Event()
        self.during: list[str] = []
        self.ran_during = threading.Event()

    def handle(self, job: Job) -> None:
        with self.lock:
            self.payloads.setdefault(job.id, []).append(job.payload)
            hold = len(self.payloads) == 50  # this job's run spans migrate's start
            if len(self.payloads) >= 50:
                self.some_ran.set()
            if len(self.payloads) >= ALL_LIVE:
                self.all_ran.set()
        if hold:  # 60 s at most: far above migrate's first batch, on a loaded machine
            assert self.migrating.wait(60), "migrate never got mid-run"
        with self.lock:
            if self.migrating.is_set():
                self.during.append(job.id)
                self.ran_during.set()


@contextmanager
def workers() -> Iterator[list[tuple[Consumer, threading.Thread]]]:
    started: list[tuple[Consumer, threading.Thread]] = []
    try:
        yield started
    finally:
        for consumer, _ in started:
            consumer.stop()
        for _, thread in started:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for _, thread in started), "a worker did not stop"


def start(started: list[tuple[Consumer, threading.Thread]], conn: redis.Redis, name: str,
          wire: int, ledger: Ledger) -> None:
    consumer = Consumer(Queue(conn, name, wire=wire, check_policy=False), ledger.handle,
                        housekeeping_ms=50, announce=False)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    started.append((consumer, thread))


def pausing_after_the_first_batch(ledger: Ledger) -> Any:
    """migrate's batch step, which after its first batch marks migrate mid-run and waits (30 s
    at most: far above a job's run, on a loaded machine) until a worker has run a job then."""
    batch = migrate_module._migrate_batch
    first = [True]

    def step(conn: Any, keys: list[Any], done: Any) -> None:
        batch(conn, keys, done)
        if first[0] and keys:
            first[0] = False
            ledger.migrating.set()
            assert ledger.ran_during.wait(30), "no job ran while migrate was mid-run"
    return step


@pytest.mark.parametrize("wire", [5, 6])
def test_workers_started_before_during_and_after_migrate(
        conn: redis.Redis, wire: int, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """migrate runs beside the workers, paused after its first batch until a job has run:
    workers demonstrably serve the queue while it is mid-run."""
    name = f"rolling{wire}"
    base = f"emq:{{{name}}}:"
    attempts = write_old_release(conn, base, name)
    queue = Queue(conn, name, wire=wire, check_policy=False)
    ended = [f"JOB:x{n}" for n in range(DEAD)] + [f"JOB:r{n}" for n in range(DONE)]
    assert all(queue.outcome(job_id) == ended_before(job_id) for job_id in ended)
    assert queue.outcome("JOB:p7") == JobOutcome("pending", None, None, 0)
    ledger = Ledger()
    monkeypatch.setattr(migrate_module, "_migrate_batch", pausing_after_the_first_batch(ledger))
    caplog.set_level(logging.WARNING, logger="echomq")

    with workers() as started:
        start(started, conn, name, wire, ledger)  # before migrate
        assert ledger.some_ran.wait(60)
        migrating = threading.Thread(target=migrate_queue, args=(conn, name))
        migrating.start()
        start(started, conn, name, wire, ledger)  # during
        migrating.join(60)
        assert not migrating.is_alive()
        ledger.migrating.clear()
        start(started, conn, name, wire, ledger)  # after
        assert ledger.all_ran.wait(120), f"{len(ledger.payloads)} of {ALL_LIVE} jobs ran"

    assert ledger.during, "no job ran while migrate was mid-run"
    assert set(ledger.during) <= set(attempts)
    assert [job_id for job_id, got in ledger.payloads.items() if b"" in got] == []
    assert ledger.payloads == {job_id: [payload_of(job_id)] for job_id in attempts}
    for job_id, before in attempts.items():
        assert queue.outcome(job_id) == JobOutcome("done", None, ERRORS.get(job_id[:5]),
                                                   before + 1), job_id
    assert [job_id for job_id in ended if queue.outcome(job_id) != ended_before(job_id)] == []
    old_names = {b"payload", b"attempts", b"enqueued_at", b"fence"}
    assert [key for key in conn.scan_iter(match=base + "job:*")
            if old_names & set(conn.hkeys(key))] == []
    assert [conn.zcard(base + place) for place in ("pending", "delayed", "active", "dead")] == [
        0, 0, 0, DEAD]
    assert conn.get(base + "layout") == b"2"
    warned = [r.getMessage() for r in caplog.records
              if "rows of the earlier row layout" in r.getMessage()]
    assert len(warned) == 1 and f"echomq migrate {name}" in warned[0], warned
