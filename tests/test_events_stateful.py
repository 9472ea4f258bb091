"""The events stream is each job's history: random sequences of the Queue's calls on both wires,
every Queue made with ``events=True``, on an explicit clock, and after every step folding each
queue's events from the start gives every job's state as ``Queue.outcome`` reads it — never a
change without its event, nor an event without its change. The two wires' streams are the same
events, field for field (only the stream ids, the server's time, differ), and a refused call
(a stale lease, a duplicate, a bad id) appends nothing.

Housekeeping (recover, promote) runs as the consumer runs it; tampering behind the queue's back
has no event by design, and is left out."""

from __future__ import annotations

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

from echomq import Event, EventKind, Job, KindError, Queue, StaleLease, Verdict
from echomq.embedded import EmbeddedValkey
from echomq.engine.calls import Ack, Release, Retry
from echomq.engine.events import id_ms
from echomq.ops import admin

START = 1_700_000_000_000
IDS = [f"JOB:{i}" for i in range(1, 7)]
WIRES = (5, 6)

# Where each kind of event leaves its job (None: where it was).
PLACE_AFTER: dict[str, str | None] = {
    EventKind.CLAIMED: "active", EventKind.DONE: "done", EventKind.RETRIED: "delayed",
    EventKind.DEAD: "dead", EventKind.RELEASED: "pending", EventKind.RECOVERED: "pending",
    EventKind.PROMOTED: "pending", EventKind.REQUEUED: "pending", EventKind.PURGED: "unknown",
    EventKind.CANCELLED: "cancelled", EventKind.PROGRESS: None,
    EventKind.WAITING: "waiting", EventKind.READY: "pending", EventKind.DEBOUNCED: "delayed",
}


def folded(events: list[Event]) -> dict[str, str]:
    """Each job's state after ``events``, in order, from nothing."""
    states: dict[str, str] = {}
    for change in events:
        if change.kind == EventKind.ENQUEUED:
            states[change.job_id] = "delayed" if change.due_ms is not None else "pending"
            continue
        place = PLACE_AFTER[change.kind]
        if place is not None:
            states[change.job_id] = place
    return states


def fields(event: Event) -> tuple[Any, ...]:
    """What a wire's event says, its stream id aside (and the id's time, which ``at_ms`` is for
    a transition that takes no ``now``: this machine's clock is years before the server's)."""
    at = None if event.at_ms == id_ms(event.id) else event.at_ms
    return (event.kind, event.job_id, event.attempt, at, event.fence, event.lane,
            event.due_ms, event.priority)


class EventMachine(RuleBasedStateMachine):
    def __init__(self, conn: redis.Redis) -> None:
        super().__init__()
        conn.flushall()
        self.conn = conn
        self.queues = {wire: Queue(conn, f"evented{wire}", wire=wire, events=True,
                                   check_policy=False) for wire in WIRES}
        self.now = START
        self.admitted: set[str] = set()
        self.leases: list[dict[int, Job]] = []  # each lease handed out, per wire
        self.died: set[str] = set()  # ids seen dead (perhaps requeued or purged since)

    # both wires, the same call ---------------------------------------------------------------

    def both(self, call: Any) -> Any:
        """``call(queue, wire)`` on both wires: the same answer (or the same error type)."""
        answers = {}
        for wire, queue in self.queues.items():
            try:
                answers[wire] = ("ok", call(queue, wire))
            except StaleLease:
                answers[wire] = ("stale", None)
        assert answers[5] == answers[6], answers
        return answers[5][1]

    def lease_of(self, jobs: dict[int, Job | None]) -> None:
        if jobs[5] is None:
            assert jobs[6] is None
            return
        assert jobs[6] is not None and (jobs[5].id, jobs[5].attempt) == (jobs[6].id,
                                                                         jobs[6].attempt)
        self.leases.append({5: jobs[5], 6: jobs[6]})

    def pick(self, data: st.DataObject) -> dict[int, Job]:
        """A lease handed out: a current one most often (its job active, under its fence)."""
        queue = self.queues[5]
        current = [lease for lease in self.leases
                   if queue.outcome(lease[5].id).state == "active"
                   and int(self.conn.hget(queue.key("job", lease[5].id), "f") or 0)
                   == lease[5].fence]
        pool = current if current and data.draw(st.integers(0, 3), label="stale") else self.leases
        lease: dict[int, Job] = data.draw(st.sampled_from(pool), label="lease")
        return lease

    # rules -----------------------------------------------------------------------------------

    @rule(step=st.sampled_from([0, 1, 1_000, 30_000, 120_000]))
    def tick(self, step: int) -> None:
        self.now += step

    @rule(job_id=st.sampled_from(IDS), delay_ms=st.sampled_from([0, 0, 1_000, 60_000]))
    def enqueue(self, job_id: str, delay_ms: int) -> None:
        verdict = self.both(lambda q, _: q.enqueue(job_id, b"p", delay_ms=delay_ms, now=self.now))
        if verdict is Verdict.ENQUEUED:
            self.admitted.add(job_id)

    @rule(lease_ms=st.sampled_from([1_000, 30_000]))
    def claim(self, lease_ms: int) -> None:
        found: dict[int, Job | None] = {}
        for wire, queue in self.queues.items():
            found[wire] = queue.claim(lease_ms, now=self.now)
        self.lease_of(found)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), verdict=st.sampled_from(["ack", "result", "retry", "release"]),
          claim=st.sampled_from([0, 0, 1, 2]))
    def settle(self, data: st.DataObject, verdict: str, claim: int) -> None:
        """One outcome for a lease (current or not), then up to ``claim`` leases, in one call."""
        lease = self.pick(data)
        outcome = {"ack": lambda j: Ack(j), "result": lambda j: Ack(j, b"r"),
                   "retry": lambda j: Retry(j, delay_ms=500, error="boom", max_attempts=2),
                   "release": lambda j: Release(j)}[verdict]
        answers = {wire: queue.settle([outcome(lease[wire])], claim=claim, lease_ms=30_000,
                                      now=self.now) for wire, queue in self.queues.items()}
        assert answers[5][0] == answers[6][0], answers
        for got5, got6 in zip(answers[5][1], answers[6][1], strict=True):
            self.lease_of({5: got5, 6: got6})

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        lease = self.pick(data)
        self.both(lambda q, wire: q.ack(lease[wire]))

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), max_attempts=st.sampled_from([1, 3]))
    def retry(self, data: st.DataObject, max_attempts: int) -> None:
        lease = self.pick(data)
        self.both(lambda q, wire: q.retry(lease[wire], delay_ms=1_000, error="x",
                                          max_attempts=max_attempts, now=self.now))

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def progress(self, data: st.DataObject) -> None:
        lease = self.pick(data)
        self.both(lambda q, wire: q.set_progress(lease[wire], b"half"))

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def extend(self, data: st.DataObject) -> None:
        lease = self.pick(data)
        self.both(lambda q, wire: q.extend(lease[wire], lease_ms=30_000, now=self.now))

    @rule()
    def housekeeping(self) -> None:
        self.both(lambda q, _: q.recover_due(now=self.now, max_attempts=3))

    @rule(job_id=st.sampled_from(IDS), really=st.integers(0, 3))
    def cancel(self, job_id: str, really: int) -> None:
        if really:  # a cancel now and then: a queue's jobs mostly run
            return
        self.both(lambda q, _: q.cancel(job_id, now=self.now))

    @precondition(lambda self: self.died)
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        """An operator's requeue (scripts, whatever the wire): evented, as the queue has a
        stream."""
        job_id = data.draw(st.sampled_from(sorted(self.died)), label="dead")
        self.both(lambda q, _: admin.requeue(q.conn, q.name, job_id, now=self.now))

    @precondition(lambda self: self.died)
    @rule()
    def purge(self) -> None:
        self.both(lambda q, _: admin.purge(q.conn, q.name, limit=1))

    @rule(job_id=st.sampled_from(["JOB:bad id", "nope"]))
    def refused(self, job_id: str) -> None:
        """A call refused before or by the server appends nothing."""
        before = {wire: queue.latest_events(1) for wire, queue in self.queues.items()}
        for queue in self.queues.values():
            with pytest.raises(KindError):
                queue.enqueue(job_id, b"p", now=self.now)
        assert {wire: queue.latest_events(1) for wire, queue in self.queues.items()} == before

    # the invariants --------------------------------------------------------------------------

    def history(self, wire: int) -> list[Event]:
        return self.queues[wire].events(count=100_000)

    @invariant()
    def the_fold_of_the_events_is_each_jobs_state(self) -> None:
        for wire, queue in self.queues.items():
            history = self.history(wire)
            states = folded(history)
            self.died |= {job_id for job_id, state in states.items() if state == "dead"}
            for job_id in self.admitted | set(states):
                assert states.get(job_id, "unknown") == queue.outcome(job_id).state, (
                    wire, job_id, states, history)

    @invariant()
    def both_wires_append_the_same_events(self) -> None:
        five, six = self.history(5), self.history(6)
        assert [fields(e) for e in five] == [fields(e) for e in six], (five, six)
        for events in (five, six):  # ids in order: the stream's, increasing
            assert [e.id for e in events] == sorted(
                (e.id for e in events), key=lambda i: tuple(map(int, i.split("-"))))


STATEFUL = settings(max_examples=40, stateful_step_count=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_the_events_fold_to_every_jobs_state_on_both_wires(valkey: EmbeddedValkey) -> None:
    conn = valkey.client()
    try:
        run_state_machine_as_test(lambda: EventMachine(conn), settings=STATEFUL)
    finally:
        conn.flushall()
        conn.close()


def test_every_kind_of_event_folds_to_its_state(valkey: EmbeddedValkey) -> None:
    """One run through every kind on both wires, the invariants checked after each step."""
    conn = valkey.client()
    machine = EventMachine(conn)
    steps = [
        lambda: machine.enqueue(job_id="JOB:1", delay_ms=0),
        lambda: machine.enqueue(job_id="JOB:2", delay_ms=1_000),
        lambda: machine.claim(lease_ms=1_000),                          # JOB:1 claimed
        lambda: machine.both(lambda q, w: q.set_progress(machine.leases[-1][w], b"1/2")),
        lambda: machine.tick(120_000),
        lambda: machine.housekeeping(),                                 # recovered, promoted
        lambda: machine.claim(lease_ms=30_000),
        lambda: machine.both(lambda q, w: q.settle([Release(machine.leases[-1][w])],
                                                   now=machine.now)),   # released
        lambda: machine.claim(lease_ms=30_000),
        lambda: machine.both(lambda q, w: q.retry(machine.leases[-1][w], max_attempts=1,
                                                  now=machine.now)),    # dead
        lambda: machine.both(lambda q, _: admin.requeue(q.conn, q.name, machine.leases[-1][5].id,
                                                        now=machine.now)),  # requeued
        lambda: machine.claim(lease_ms=30_000),
        lambda: machine.both(lambda q, w: q.ack(machine.leases[-1][w])),  # done
        lambda: machine.claim(lease_ms=30_000),
        lambda: machine.both(lambda q, w: q.cancel(machine.leases[-1][w].id, now=machine.now)),
        lambda: machine.both(lambda q, w: q.retry(machine.leases[-1][w], now=machine.now)),
        lambda: machine.enqueue(job_id="JOB:3", delay_ms=0),
        lambda: machine.cancel(job_id="JOB:3", really=0),               # cancelled, waiting
        lambda: machine.enqueue(job_id="JOB:4", delay_ms=0),
        lambda: machine.claim(lease_ms=30_000),
        lambda: machine.both(lambda q, w: q.retry(machine.leases[-1][w], delay_ms=0,
                                                  max_attempts=2, now=machine.now)),  # retried
        lambda: machine.housekeeping(),
        lambda: machine.claim(lease_ms=30_000),
        lambda: machine.both(lambda q, w: q.retry(machine.leases[-1][w], max_attempts=2,
                                                  now=machine.now)),    # dead
        lambda: machine.purge(),                                        # purged
        lambda: machine.both(lambda q, _: q.enqueue_after(
            "JOB:5", b"p", after=["JOB:4"], now=machine.now)),          # waiting, JOB:4 purged
        lambda: machine.both(lambda q, _: q.enqueue_after(
            "JOB:6", b"p", after=["JOB:5"], now=machine.now)),          # waiting on JOB:5
        lambda: machine.claim(lease_ms=30_000),
        lambda: machine.both(lambda q, w: q.ack(machine.leases[-1][w])),  # done; JOB:6 ready
        lambda: machine.both(lambda q, _: q.enqueue(
            "JOB:7", b"p", debounce="save", debounce_ms=1_000, now=machine.now)),
        lambda: machine.both(lambda q, _: q.enqueue(
            "JOB:8", b"p", debounce="save", debounce_ms=1_000, now=machine.now)),  # debounced
    ]
    try:
        for step in steps:
            step()
            machine.the_fold_of_the_events_is_each_jobs_state()
            machine.both_wires_append_the_same_events()
        kinds = {event.kind for event in machine.history(5)}
        assert kinds == set(EventKind), set(EventKind) - kinds
    finally:
        machine.teardown()
        conn.flushall()
        conn.close()
