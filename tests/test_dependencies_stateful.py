"""Dependencies under every move a queue makes, as a Hypothesis state machine against a real
server on both wires: jobs admitted plain or waiting on others (fan-in, chains, each policy),
claims, acks, retries to dead, crashes (leases expired and recovered), promotions and cancels.
A model written apart from both executors says where each job must be; after every step the
server agrees for every job, so no waiting job is ever released twice, none is missed, and a
death or a cancel reaches every job down the line."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
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
from echomq.engine.calls import text
from tests.conftest import start_server

LEASE_MS = 1_000
MAX_ATTEMPTS = 2
LIVE = ("pending", "active", "delayed", "waiting")


@dataclass
class Modelled:
    """One job as the model sees it."""

    state: str
    policy: str = "fail"
    waits: set[str] = field(default_factory=set)
    dependents: list[str] = field(default_factory=list)
    attempts: int = 0
    flagged: bool = False


class Model:
    """Where each job must be, by the rules of docs/PROTOCOL.md "Dependencies"."""

    def __init__(self) -> None:
        self.jobs: dict[str, Modelled] = {}
        self.released: dict[str, int] = {}  # how often each waiting job left waiting

    def admit_after(self, job_id: str, parents: list[str], policy: str) -> str:
        job = self.jobs[job_id] = Modelled("waiting", policy)
        for parent in parents:
            if job.state != "waiting":
                break
            if parent != job_id:
                self._named(job_id, parent)
        if job.state == "waiting" and not job.waits:
            self._release(job_id)
        return {"waiting": "WAITING", "pending": "READY", "dead": "DEAD",
                "cancelled": "CANCELLED"}[job.state]

    def _named(self, job_id: str, parent: str) -> None:
        """``parent`` named by the waiting ``job_id``: waited for while live, else its end
        applies at once."""
        found = self.jobs.get(parent)
        state = "done" if found is None else found.state
        if found is not None and state in LIVE:
            if job_id not in found.dependents:
                found.dependents.append(job_id)
                self.jobs[job_id].waits.add(parent)
        elif state == "dead":
            self._parent_died(job_id)
        elif state == "cancelled":
            self._end(job_id, "cancelled")

    def ended(self, job_id: str, outcome: str) -> None:
        """``job_id`` ended so (done, dead or cancelled): the jobs waiting on it move."""
        self.jobs[job_id].state = outcome
        work = [(job_id, outcome)]
        while work:
            parent, how = work.pop(0)
            for dependent in self.jobs[parent].dependents:
                job = self.jobs[dependent]
                if job.state != "waiting":
                    continue
                if how == "cancelled":
                    job.state = "cancelled"
                    work.append((dependent, "cancelled"))
                elif how == "dead" and job.policy == "fail":
                    job.state = "dead"
                    work.append((dependent, "dead"))
                elif how == "dead" and job.policy == "continue":
                    self._release(dependent)
                else:
                    job.waits.discard(parent)
                    if not job.waits:
                        self._release(dependent)

    def _parent_died(self, job_id: str) -> None:
        policy = self.jobs[job_id].policy
        if policy == "fail":
            self._end(job_id, "dead")
        elif policy == "continue":
            self._release(job_id)

    def _end(self, job_id: str, outcome: str) -> None:
        self.ended(job_id, outcome)

    def _release(self, job_id: str) -> None:
        self.jobs[job_id].state = "pending"
        self.released[job_id] = self.released.get(job_id, 0) + 1


class DependencyMachine(RuleBasedStateMachine):
    wire = 5
    server: EmbeddedValkey

    def __init__(self) -> None:
        super().__init__()
        self.conn = self.server.client()
        self.conn.flushall()
        self.queue = Queue(self.conn, "deps", wire=self.wire, max_attempts=MAX_ATTEMPTS)
        self.model = Model()
        self.leases: dict[str, Job] = {}
        self.now = 1_000_000
        self.ids = (f"JOB:{n}" for n in itertools.count())

    def teardown(self) -> None:
        self.conn.close()

    def tick(self) -> int:
        self.now += 10
        return self.now

    def known(self) -> list[str]:
        return sorted(self.model.jobs)

    @rule()
    def enqueue(self) -> None:
        job_id = next(self.ids)
        assert self.queue.enqueue(job_id, b"x", now=self.tick()) is Verdict.ENQUEUED
        self.model.jobs[job_id] = Modelled("pending")

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data(), policy=st.sampled_from(["fail", "fail", "ignore", "continue"]))
    def enqueue_after(self, data: st.DataObject, policy: str) -> None:
        parents = data.draw(st.lists(st.sampled_from(self.known()), min_size=1, max_size=4),
                            label="parents")
        job_id = next(self.ids)
        verdict = self.queue.enqueue_after(job_id, b"y", after=parents, policy=policy,
                                           now=self.tick())
        expected = self.model.admit_after(job_id, parents, policy)
        assert verdict.value == expected, (job_id, parents, policy)

    @rule()
    def claim(self) -> None:
        job = self.queue.claim(LEASE_MS, now=self.tick())
        if job is None:
            assert not [j for j, m in self.model.jobs.items() if m.state == "pending"]
            return
        modelled = self.model.jobs[job.id]
        assert modelled.state == "pending", (job.id, modelled)
        modelled.state, modelled.attempts = "active", modelled.attempts + 1
        self.leases[job.id] = job

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data(), ok=st.booleans())
    def settle(self, data: st.DataObject, ok: bool) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.leases)), label="settled")
        job = self.leases.pop(job_id)
        modelled = self.model.jobs[job_id]
        if ok:
            verdict = self.queue.ack(job, retention_ms=600_000, result=b"r")
        else:
            verdict = self.queue.retry(job, delay_ms=0, error="boom", now=self.tick())
        if modelled.flagged:
            assert verdict is Verdict.CANCELLED
            self.model.ended(job_id, "cancelled")
        elif ok:
            assert verdict is Verdict.ACKED
            self.model.ended(job_id, "done")
        elif modelled.attempts >= MAX_ATTEMPTS:
            assert verdict is Verdict.DEAD
            self.model.ended(job_id, "dead")
        else:
            assert verdict is Verdict.RETRYING
            modelled.state = "delayed"

    @rule()
    def promote(self) -> None:
        self.queue.promote(now=self.tick())
        for modelled in self.model.jobs.values():
            if modelled.state == "delayed":
                modelled.state = "pending"

    @precondition(lambda self: bool(self.leases))
    @rule()
    def crash(self) -> None:
        """Every worker lost: the leases expire and recover takes them back."""
        self.now += LEASE_MS * 2
        self.queue.recover(now=self.now)
        for job_id in sorted(self.leases):
            modelled = self.model.jobs[job_id]
            if modelled.flagged:
                self.model.ended(job_id, "cancelled")
            elif modelled.attempts >= MAX_ATTEMPTS:
                self.model.ended(job_id, "dead")
            else:
                modelled.state = "pending"
        self.leases.clear()

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.known()), label="cancelled")
        modelled = self.model.jobs[job_id]
        verdict = self.queue.cancel(job_id, retention_ms=600_000, now=self.tick())
        if modelled.state == "active":
            assert verdict is Verdict.CANCELLING
            modelled.flagged = True
        elif modelled.state in ("pending", "delayed", "waiting"):
            assert verdict is Verdict.CANCELLED
            self.model.ended(job_id, "cancelled")
        else:
            assert verdict.value in ("DONE", "DEAD", "CANCELLED"), verdict

    @invariant()
    def every_job_is_where_the_model_says(self) -> None:
        for job_id, modelled in self.model.jobs.items():
            assert self.queue.outcome(job_id).state == modelled.state, (job_id, modelled)

    @invariant()
    def no_job_left_waiting_twice(self) -> None:
        assert all(count == 1 for count in self.model.released.values())
        waiting = {text(m) for m in self.conn.zrange("emq:{deps}:waiting", 0, -1)}
        assert waiting == {j for j, m in self.model.jobs.items() if m.state == "waiting"}


@pytest.fixture(scope="module")
def machine_server() -> Iterator[EmbeddedValkey]:
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("wire", [5, 6], ids=["wire5", "wire6"])
def test_dependencies_agree_with_the_model(machine_server: EmbeddedValkey, wire: int) -> None:
    machine: Any = type(f"DependencyMachine{wire}", (DependencyMachine,),
                        {"wire": wire, "server": machine_server})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=60, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))
