"""A sharded queue against a model of one plain queue, under random sequences of enqueue,
enqueue_many, claim, ack, retry, cancel, recover and promote on an explicit clock, on both wires.
The shards are an implementation detail the model never sees: after every step each admitted id
is in exactly one state, on the shard its id routes to, the same as the model's; an id is
admitted once (a second admission is DUPLICATE, live or tombstoned); the counts are the
model's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from echomq import Job, Queue, Verdict
from echomq.embedded import EmbeddedValkey

START = 1_700_000_000_000
LEASE_MS = 1_000
MAX_ATTEMPTS = 2
SHARDS = 3
IDS = [f"JOB:{n}" for n in range(10)]
ROLES = ("pending", "active", "delayed", "dead")


@dataclass
class Model:
    """One plain queue: where each id is, the lease each active job holds."""

    state: dict[str, str] = field(default_factory=dict)
    leases: dict[str, Job] = field(default_factory=dict)
    deadlines: dict[str, int] = field(default_factory=dict)
    due: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)

    def ids_in(self, state: str) -> list[str]:
        return sorted(job_id for job_id, where in self.state.items() if where == state)

    def admit(self, job_id: str) -> Verdict:
        if job_id in self.state:
            return Verdict.DUPLICATE
        self.state[job_id] = "pending"
        self.attempts[job_id] = 0
        return Verdict.ENQUEUED


class ShardedMachine(RuleBasedStateMachine):
    def __init__(self, conn: redis.Redis, wire: int) -> None:
        super().__init__()
        conn.flushall()
        self.conn = conn
        self.queue = Queue(conn, "model", shards=SHARDS, wire=wire, max_attempts=MAX_ATTEMPTS,
                           check_policy=False)
        self.model = Model()
        self.now = START

    @rule(job_id=st.sampled_from(IDS))
    def enqueue(self, job_id: str) -> None:
        expected = self.model.admit(job_id)
        assert self.queue.enqueue(job_id, b"x", now=self.now) is expected

    @rule(ids=st.lists(st.sampled_from(IDS), min_size=1, max_size=6))
    def enqueue_many(self, ids: list[str]) -> None:
        expected = [self.model.admit(job_id) for job_id in ids]
        assert self.queue.enqueue_many([(job_id, b"x") for job_id in ids],
                                       now=self.now) == expected

    @rule()
    def claim(self) -> None:
        job = self.queue.claim(LEASE_MS, now=self.now)
        if not self.model.ids_in("pending"):
            assert job is None
            return
        assert job is not None and self.model.state[job.id] == "pending"
        self.model.attempts[job.id] += 1
        assert job.attempt == self.model.attempts[job.id]
        self.model.state[job.id] = "active"
        self.model.leases[job.id] = job
        self.model.deadlines[job.id] = self.now + LEASE_MS

    def _leased(self, data: st.DataObject) -> Job:
        return self.model.leases[data.draw(st.sampled_from(self.model.ids_in("active")))]

    @precondition(lambda self: self.model.ids_in("active"))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        job = self._leased(data)
        assert self.queue.ack(job) is Verdict.ACKED
        self.model.state[job.id] = "done"
        del self.model.leases[job.id]

    @precondition(lambda self: self.model.ids_in("active"))
    @rule(data=st.data(), delay_ms=st.integers(0, 3_000))
    def retry(self, data: st.DataObject, delay_ms: int) -> None:
        job = self._leased(data)
        del self.model.leases[job.id]
        if self.model.attempts[job.id] >= MAX_ATTEMPTS:
            expected, self.model.state[job.id] = Verdict.DEAD, "dead"
        else:
            expected, self.model.state[job.id] = Verdict.RETRYING, "delayed"
            self.model.due[job.id] = self.now + delay_ms
        assert self.queue.retry(job, delay_ms=delay_ms, error="boom", now=self.now) is expected

    @rule(job_id=st.sampled_from(IDS))
    def cancel(self, job_id: str) -> None:
        where = self.model.state.get(job_id, "unknown")
        if where == "active":
            return  # a leased job's cancel ends with its holder (tests/stateful_cancel.py)
        expected = {"pending": Verdict.CANCELLED, "delayed": Verdict.CANCELLED,
                    "cancelled": Verdict.CANCELLED, "done": Verdict.DONE, "dead": Verdict.DEAD,
                    "unknown": Verdict.UNKNOWN}[where]
        assert self.queue.cancel(job_id, now=self.now) is expected
        if where in ("pending", "delayed"):
            self.model.state[job_id] = "cancelled"

    @rule(ms=st.integers(1, 2_500))
    def recover_and_promote(self, ms: int) -> None:
        self.now += ms
        expired = [job_id for job_id in self.model.ids_in("active")
                   if self.model.deadlines[job_id] <= self.now]
        for job_id in expired:
            del self.model.leases[job_id]
            used = self.model.attempts[job_id] >= MAX_ATTEMPTS
            self.model.state[job_id] = "dead" if used else "pending"
        assert self.queue.recover(now=self.now) == len(expired)
        due = [job_id for job_id in self.model.ids_in("delayed")
               if self.model.due[job_id] <= self.now]
        for job_id in due:
            self.model.state[job_id] = "pending"
        assert self.queue.promote(now=self.now) == len(due)

    @invariant()
    def every_job_is_in_one_state_on_its_shard(self) -> None:
        seen: dict[str, list[tuple[int, str]]] = {}
        for index, shard in enumerate(self.queue.shard_queues):
            for role in ROLES:
                for member in self.conn.zrange(shard.key(role), 0, -1):
                    seen.setdefault(member.decode(), []).append((index, role))
        for job_id, places in seen.items():
            assert places == [(self.queue.shard_of(job_id), self.model.state[job_id])]
        live = {job_id for job_id, where in self.model.state.items() if where in ROLES}
        assert set(seen) == live

    @invariant()
    def the_counts_are_the_models(self) -> None:
        counts = self.queue.counts()
        assert {role: counts[role] for role in ROLES} == {
            role: len(self.model.ids_in(role)) for role in ROLES}

    @invariant()
    def each_outcome_is_the_models(self) -> None:
        for job_id in IDS:
            assert self.queue.outcome(job_id).state == self.model.state.get(job_id, "unknown")


STATEFUL = settings(max_examples=60, stateful_step_count=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.mark.parametrize("wire", [5])
def test_a_sharded_queue_is_one_plain_queue_to_its_users(valkey: EmbeddedValkey,
                                                        wire: int) -> None:
    conn: Any = valkey.client()
    try:
        run_state_machine_as_test(lambda: ShardedMachine(conn, wire), settings=STATEFUL)
    finally:
        conn.flushall()
        conn.close()
