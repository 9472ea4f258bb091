"""Producer and consumer threads that keep going through crashes, failovers and reshards.

Each thread retries a call that failed for a transient reason (server down, loading, a failover,
a slot on the move) until a deadline, and records in the Ledger only what the server confirmed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import redis

from echomq import Job, Queue, StaleLease
from echomq.consumer.faults import client_table_race
from tests.reliability.ledger import Ledger, _text, reckon
from tests.reliability.servers import TRANSIENT

T = TypeVar("T")

LATEST = 999_999_999_999_999  # a `now` past every lease and due time
LEASE_MS = 600_000  # nothing is recovered mid-run: a lease outlives the scenario
# Server errors that say "not now" rather than "no": a slot on the move, a node loading.
SOFT_ERRORS = ("TRYAGAIN", "LOADING", "CLUSTERDOWN", "MASTERDOWN",
               "Script attempted to access a non local key", "READONLY")


def transient(exc: BaseException) -> bool:
    if isinstance(exc, TRANSIENT) or client_table_race(exc):
        return True
    return isinstance(exc, redis.ResponseError) and any(word in str(exc) for word in SOFT_ERRORS)


class Gave_up(RuntimeError):
    pass


def keep_trying(call: Callable[[], T], ledger: Ledger, what: str,
                deadline: float | Callable[[], float]) -> T:
    """Runs ``call`` until it succeeds; transient errors are counted and retried until
    ``deadline`` (time.monotonic; a callable is read at each retry, so a workload that halts can
    bring it forward)."""
    while True:
        try:
            return call()
        except Exception as exc:
            if not transient(exc):
                raise
            ledger.note(f"{what}:{type(exc).__name__}")
            if time.monotonic() > (deadline() if callable(deadline) else deadline):
                raise Gave_up(f"{what}: still failing at the deadline: {exc}") from exc
            time.sleep(0.02)


@dataclass
class Plan:
    """A workload: ``jobs`` ids per producer, in batches, on the given queues."""

    queues: Sequence[Queue]
    jobs: int = 300
    batch: int = 5
    retry_every: int = 7  # every n-th claimed job is retried once before it is acked
    lanes: bool = False  # wire=5 producers also use lanes, consumers claim_lane in turn
    deadline_s: float = 90.0


class Crew:
    """One producer and one consumer thread per queue of the plan."""

    def __init__(self, plan: Plan, ledger: Ledger, tag: str) -> None:
        self.plan, self.ledger, self.tag = plan, ledger, tag
        self.deadline = time.monotonic() + plan.deadline_s
        self.producing = threading.Event()
        self.stop = threading.Event()
        self.failures: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        for n, queue in enumerate(plan.queues):
            self.threads.append(threading.Thread(target=self._guard, args=(self.produce, queue, n),
                                                 daemon=True))
            self.threads.append(threading.Thread(target=self._guard, args=(self.consume, queue, n),
                                                 daemon=True))

    def start(self) -> Crew:
        self.producing.set()
        for thread in self.threads:
            thread.start()
        return self

    def _guard(self, body: Callable[[Queue, int], None], queue: Queue, n: int) -> None:
        try:
            body(queue, n)
        except BaseException as exc:
            self.failures.append(exc)

    def produce(self, queue: Queue, n: int) -> None:
        plan = self.plan
        ids = [f"JOB:{self.tag}-w{queue.wire}-p{n}-{i}" for i in range(plan.jobs)]
        lanes = plan.lanes and queue.wire == 5
        for start in range(0, len(ids), plan.batch):
            chunk = ids[start:start + plan.batch]
            if lanes:
                items = [(job_id, b"payload", f"g{i % 3}" if i % 2 else None)
                         for i, job_id in enumerate(chunk)]
                verdicts = keep_trying(lambda items=items: queue.enqueue_many(items),  # type: ignore
                                       self.ledger, "enqueue_many", self.deadline)
            elif start % (2 * plan.batch):
                verdicts = keep_trying(
                    lambda chunk=chunk: queue.enqueue_many([(i, b"payload") for i in chunk]),
                    self.ledger, "enqueue_many", self.deadline)
            else:
                verdicts = [keep_trying(lambda i=i: queue.enqueue(i, b"payload"), self.ledger,
                                        "enqueue", self.deadline) for i in chunk]
            for job_id, verdict in zip(chunk, verdicts, strict=True):
                self.ledger.admit(job_id, verdict)
            if self.stop.is_set():
                return

    def consume(self, queue: Queue, n: int) -> None:
        claimed = 0
        use_lanes = self.plan.lanes and queue.wire == 5
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            lane_turn = use_lanes and claimed % 2 == 1
            claim = queue.claim_lane if lane_turn else queue.claim
            job = keep_trying(lambda claim=claim: claim(lease_ms=LEASE_MS), self.ledger,  # type: ignore
                              "claim", self.deadline)
            if job is None and use_lanes and not lane_turn:
                job = keep_trying(lambda: queue.claim_lane(lease_ms=LEASE_MS), self.ledger,
                                  "claim_lane", self.deadline)
            claimed += 1
            if job is None:
                keep_trying(lambda: queue.promote(), self.ledger, "promote", self.deadline)
                time.sleep(0.005)
                continue
            if job.attempt == 1 and claimed % self.plan.retry_every == 0:
                self.retry(queue, job)
            else:
                self.ack(queue, job)

    def retry(self, queue: Queue, job: Job) -> None:
        try:
            keep_trying(lambda: queue.retry(job, delay_ms=0, error="again", max_attempts=50),
                        self.ledger, "retry", self.deadline)
            self.ledger.retries += 1
        except StaleLease:
            self.ledger.note("retry:stale")  # an earlier try landed: the job is delayed

    def ack(self, queue: Queue, job: Job) -> None:
        try:
            keep_trying(lambda: queue.ack(job), self.ledger, "ack", self.deadline)
            self.ledger.acked(job)
        except StaleLease:
            # A try whose reply was lost (the client retries on its own too) may have landed:
            # then the id has left active and its row is a tombstone (no payload).
            if self.ack_landed(queue, job):
                self.ledger.acked(job, in_doubt=True)
            else:
                self.ledger.note("ack:stale")

    def ack_landed(self, queue: Queue, job: Job) -> bool:
        def look() -> bool:
            row = queue.conn.hgetall(queue.key("job", job.id))
            active = queue.conn.zscore(queue.key("active"), job.id)
            fields = {_text(k): _text(v) for k, v in row.items()}
            return (active is None and bool(fields) and "p" not in fields
                    and fields.get("a") == str(job.attempt))
        return keep_trying(look, self.ledger, "look", self.deadline)

    def finish(self, timeout: float = 60.0) -> None:
        """Waits for the producers, then for the consumers to empty the queues (bounded)."""
        producers = self.threads[0::2]
        end = time.monotonic() + timeout
        for thread in producers:
            thread.join(max(0.0, end - time.monotonic()))
        while time.monotonic() < end and not self.failures:
            counts = [keep_trying(q.counts, self.ledger, "counts", self.deadline)
                      for q in self.plan.queues]
            if all(c["pending"] + c["lanes"] + c["delayed"] == 0 for c in counts):
                break
            time.sleep(0.05)
        self.halt()

    def halt(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        assert not any(t.is_alive() for t in self.threads), "a worker thread is stuck"
        if self.failures:
            raise self.failures[0]


def drain(queues: Sequence[Queue], ledger: Ledger, label: str) -> None:
    """Single-threaded: every lease is recovered, every job claimed and acked; then reckons."""
    for queue in queues:
        while queue.recover(now=LATEST) or queue.promote(now=LATEST):
            pass
        for _ in range(100_000):
            job = queue.claim(lease_ms=LEASE_MS) or (queue.claim_lane(lease_ms=LEASE_MS)
                                                     if queue.wire == 5 else None)
            if job is None:
                break
            queue.ack(job)
            ledger.acked(job)
    reckon(ledger, queues, label)
