"""Bookkeeping of a workload: what producers were told was admitted, what consumers acked, and
the final reckoning against what the server still holds.

A job counts as **admitted** once its enqueue returned ENQUEUED or DUPLICATE to its producer, and
as **acked** once its ack returned ACKED to its consumer. At the end every admitted job must be
acked exactly once or still present (pending, a lane, active, delayed, dead); otherwise it is lost.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from echomq import Job, Queue, Verdict


@dataclass
class Ledger:
    admitted: set[str] = field(default_factory=set)
    acks: list[tuple[str, int]] = field(default_factory=list)
    # Acks whose reply was lost (connection dropped) and that a later look found had landed.
    acks_in_doubt: list[tuple[str, int]] = field(default_factory=list)
    retries: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, job_id: str, verdict: Verdict) -> None:
        assert verdict in (Verdict.ENQUEUED, Verdict.DUPLICATE), verdict
        with self.lock:
            self.admitted.add(job_id)

    def acked(self, job: Job, *, in_doubt: bool = False) -> None:
        with self.lock:
            (self.acks_in_doubt if in_doubt else self.acks).append((job.id, job.attempt))

    def note(self, kind: str) -> None:
        with self.lock:
            self.errors[kind] += 1


def present_ids(queues: Iterable[Queue]) -> dict[str, str]:
    """Every job id the queues hold, with where: pending, active, delayed, dead or lane:<g>;
    a sharded queue's, read on each of its shards."""
    where: dict[str, str] = {}
    for shard in (shard for queue in queues for shard in queue.shard_queues):
        for role in ("pending", "active", "delayed", "dead"):
            for member in shard.conn.zrange(shard.key(role), 0, -1):
                where[_text(member)] = role
        for group in shard.lane_depths():
            for member in shard.conn.lrange(shard.key("lane", lane=group), 0, -1):
                where[_text(member)] = f"lane:{group}"
    return where


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class Reckoning:
    enqueued: int
    acked: int
    acked_in_doubt: int
    present: int
    lost: list[str]
    acked_twice: list[str]
    acked_and_present: list[str]

    def line(self, label: str) -> str:
        return (f"[{label}] enqueued={self.enqueued} acked={self.acked} "
                f"acked_in_doubt={self.acked_in_doubt} still_present={self.present} "
                f"lost={len(self.lost)} acked_twice={len(self.acked_twice)}")


def reckon(ledger: Ledger, queues: Iterable[Queue], label: str) -> Reckoning:
    """Compares the ledger with the server and prints the counts; the caller asserts on them."""
    where = present_ids(queues)
    by_id = Counter(job_id for job_id, _ in [*ledger.acks, *ledger.acks_in_doubt])
    acked = set(by_id)
    result = Reckoning(
        enqueued=len(ledger.admitted),
        acked=len(ledger.acks),
        acked_in_doubt=len(ledger.acks_in_doubt),
        present=len(ledger.admitted & set(where)),
        lost=sorted(ledger.admitted - acked - set(where)),
        acked_twice=sorted(job_id for job_id, n in by_id.items() if n > 1),
        # An acked job back in a zset or lane would be run twice.
        acked_and_present=sorted(job_id for job_id in acked if where.get(job_id) not in
                                 (None, "dead")),
    )
    print(result.line(label), f"retried={ledger.retries}", dict(ledger.errors) or "")
    return result


def assert_nothing_lost(result: Reckoning) -> None:
    assert not result.lost, f"lost jobs: {result.lost[:20]}"
    assert not result.acked_twice, f"acked by two attempts: {result.acked_twice[:20]}"
    assert not result.acked_and_present, f"acked yet still queued: {result.acked_and_present[:20]}"
    assert result.enqueued > 0
