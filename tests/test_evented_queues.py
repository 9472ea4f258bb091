"""Queues made with ``events=True``, end to end on both wires and both shells: every call of a
transition that reports its changes declares ``<base>events`` and its changes come back from
``Queue.events`` in order; a Queue without the flag sends what it always sent; the App, its
workers and the operator's tools carry the flag."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from echomq import App, EventKind, Job, KindError, Queue, StaleLease, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.engine import transitions as t
from echomq.engine.calls import Ack, QueueCalls, Release, Retry
from echomq.engine.clients import async_twin
from echomq.ops import admin
from echomq.worker.build import queue_options
from echomq.worker.spec import WorkerSpec

NOW = 1_700_000_000_000


@pytest.fixture
def conn(library_conn: Any) -> Any:
    return library_conn


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def queue(conn: Any, wire: int) -> Iterator[Queue]:
    yield Queue(conn, "billing", wire=wire, events=True, check_policy=False)


def said(queue: Queue) -> list[tuple[str, str, int]]:
    return [(event.kind, event.job_id, event.attempt) for event in queue.events(count=1000)]


def test_every_evented_call_declares_the_events_key_and_a_plain_one_does_not() -> None:
    evented, plain = QueueCalls("q", events=True), QueueCalls("q")
    for transition in t.TRANSITIONS:
        keys = t.keys_for(plain.base, transition, "JOB:1", "g")
        with_events = t.keys_for(evented.base, transition, "JOB:1", "g", events=True)
        assert with_events == ([*keys, plain.base + "events"] if transition.events else keys)
    assert list(evented.enqueue("JOB:1", b"p", None, NOW)[1])[-1] == evented.base + "events"
    assert list(plain.enqueue("JOB:1", b"p", None, NOW)[1]) == t.keys_for(
        plain.base, t.ENQUEUE, "JOB:1")


def test_a_life_cycle_is_told_in_order(queue: Queue) -> None:
    assert queue.enqueue("JOB:1", b"p", now=NOW) is Verdict.ENQUEUED
    job = queue.claim(now=NOW + 1)
    assert job is not None
    queue.retry(job, delay_ms=500, error="boom", now=NOW + 2)
    assert queue.promote(now=NOW + 600) == 1
    again = queue.claim(now=NOW + 601)
    assert again is not None
    queue.ack(again)
    events = queue.events()
    assert [(e.kind, e.attempt, e.at_ms) for e in events[:4]] == [
        (EventKind.ENQUEUED, 0, NOW), (EventKind.CLAIMED, 1, NOW + 1),
        (EventKind.RETRIED, 1, NOW + 2), (EventKind.PROMOTED, 1, NOW + 600)]
    assert events[1].fence == job.fence and events[2].due_ms == NOW + 502
    assert [(e.kind, e.fence) for e in events[4:]] == [(EventKind.CLAIMED, again.fence),
                                                      (EventKind.DONE, again.fence)]
    assert {e.job_id for e in events} == {"JOB:1"}


def test_settle_tells_its_items_then_its_leases(queue: Queue) -> None:
    for n in range(4):
        queue.enqueue(f"JOB:{n}", b"p", now=NOW)
    held = queue.claim_many(3, now=NOW)
    _, leased = queue.settle([Ack(held[0]), Retry(held[1], delay_ms=0, max_attempts=1),
                              Release(held[2])], claim=2, now=NOW + 5)
    told = [(e.kind, e.job_id, e.attempt, e.fence) for e in queue.events()[-(3 + len(leased)):]]
    assert told == [(EventKind.DONE, "JOB:0", 1, held[0].fence),
                    (EventKind.DEAD, "JOB:1", 1, held[1].fence),
                    (EventKind.RELEASED, "JOB:2", 0, held[2].fence),
                    *((EventKind.CLAIMED, job.id, job.attempt, job.fence) for job in leased)]
    assert leased  # the lease part ran after the items


def test_refusals_duplicates_and_replays_append_nothing(queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    queue.ack(job)
    before = queue.events()
    assert queue.enqueue("JOB:1", b"p", now=NOW) is Verdict.DUPLICATE
    assert queue.claim(now=NOW) is None
    assert queue.ack(job) is Verdict.ACKED  # sent again: the replay answers as the first time
    with pytest.raises(StaleLease):
        queue.ack(Job(job.id, b"", job.attempt, fence=job.fence + 100))
    with pytest.raises(KindError):
        queue.enqueue("not an id", b"p", now=NOW)
    assert queue.events() == before


def test_a_plain_queue_sends_what_it_always_sent(conn: Any, wire: int) -> None:
    plain = Queue(conn, "plain", wire=wire, check_policy=False)
    conn.config_resetstat()
    plain.enqueue("JOB:1", b"p", now=NOW)
    job = plain.claim(now=NOW)
    assert job is not None
    plain.ack(job)
    assert conn.exists(plain.key("events")) == 0
    assert "cmdstat_xadd" not in conn.info("commandstats")


def test_the_asyncio_queue_appends_and_reads_the_same(conn: Any, wire: int) -> None:
    async def main() -> list[tuple[str, str, int]]:
        client = async_twin(conn)
        try:
            queue = AsyncQueue(client, "billing", wire=wire, events=True, check_policy=False)
            await queue.enqueue("JOB:1", b"p", now=NOW)
            job = await queue.claim(now=NOW)
            assert job is not None
            await queue.ack(job)
            return [(e.kind, e.job_id, e.attempt) for e in await queue.events()]
        finally:
            await client.aclose()

    assert asyncio.run(main()) == [(EventKind.ENQUEUED, "JOB:1", 0),
                                   (EventKind.CLAIMED, "JOB:1", 1),
                                   (EventKind.DONE, "JOB:1", 1)]


def test_an_apps_queues_and_its_workers_follow_its_flag(conn: redis.Redis) -> None:
    evented, plain = App(conn, "jobs", events=True), App(conn, "jobs")
    assert evented.queue_named("other").emits_events and evented.queue.emits_events
    assert not plain.queue.emits_events
    spec = WorkerSpec(handler="x:app", queue="jobs", url=None)
    assert queue_options(spec, evented, "jobs").get("events") is True
    assert queue_options(spec, evented, "not-its-own").get("events") is True
    assert "events" not in queue_options(spec, plain, "jobs")
    flagged = WorkerSpec(handler="x:handle", queue="jobs", url=None, events=True)
    assert queue_options(flagged, lambda job: None, "jobs")["events"] is True
    assert WorkerSpec.from_json(flagged.to_json()).events is True


def test_an_operators_changes_are_told_on_an_evented_queue(conn: Any, wire: int,
                                                          queue: Queue) -> None:
    queue.enqueue("JOB:1", b"p", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    queue.retry(job, max_attempts=1, now=NOW)
    assert admin.requeue(conn, queue.name, "JOB:1", now=NOW + 1)
    assert said(queue)[-2:] == [(EventKind.DEAD, "JOB:1", 1), (EventKind.REQUEUED, "JOB:1", 0)]
    again = queue.claim(now=NOW + 2)
    assert again is not None
    queue.retry(again, max_attempts=1, now=NOW + 2)
    assert admin.purge(conn, queue.name, limit=10) == 1
    assert said(queue)[-1][:2] == (EventKind.PURGED, "JOB:1")
    assert not admin.has_events(conn, "no-stream")
