"""A job's progress on both wires and both clients: recorded by the current lease only, bounded
in size with the server's words, read back by the outcome, and kept in the tombstone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from echomq import ArgumentError, Job, Queue, StaleLease
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.engine.calls import MAX_PROGRESS_BYTES
from echomq.engine.clients import async_twin
from tests import test_queue
from tests.test_queue import NOW, commands_sent, executor_transition

conn = test_queue.conn
queue = test_queue.queue


def lease(queue: Queue, job_id: str = "JOB:1", *, now: int = NOW) -> Job:
    queue.enqueue(job_id, b"p", now=now)
    job = queue.claim(now=now)
    assert job is not None and job.id == job_id
    return job


def test_the_current_lease_records_its_progress(queue: Queue) -> None:
    job = lease(queue)
    assert queue.outcome(job.id).progress is None
    queue.set_progress(job, b"\x00one of three\r\n")
    queue.set_progress(job, "two of three")
    outcome = queue.outcome(job.id)
    assert (outcome.state, outcome.progress) == ("active", b"two of three")


def test_the_last_progress_is_read_back_after_the_ack(queue: Queue) -> None:
    job = lease(queue)
    queue.set_progress(job, b"99%")
    queue.ack(job, retention_ms=60_000)
    outcome = queue.outcome(job.id)
    assert (outcome.state, outcome.progress) == ("done", b"99%")


def test_a_stale_holder_gets_stale_lease_and_changes_nothing(queue: Queue) -> None:
    first = lease(queue)
    queue.set_progress(first, b"first holder")
    assert queue.recover(now=NOW + 60_000) == 1  # its lease expired: the job runs again
    second = queue.claim(now=NOW + 60_000)
    assert second is not None and second.fence != first.fence
    with pytest.raises(StaleLease):
        queue.set_progress(first, b"late")
    assert queue.outcome(first.id).progress == b"first holder"
    queue.set_progress(second, b"second holder")
    queue.ack(second)
    with pytest.raises(StaleLease):  # an acked lease is no longer current either
        queue.set_progress(second, b"after the ack")
    assert queue.outcome(first.id).progress == b"second holder"


def test_no_lease_at_all_is_stale(queue: Queue) -> None:
    with pytest.raises(StaleLease):
        queue.set_progress(Job("JOB:none", b"", 1, fence=1), b"x")
    assert queue.conn.exists(queue.key("job", "JOB:none")) == 0


def test_a_progress_over_the_cap_gets_the_same_error_from_client_and_server(
        queue: Queue) -> None:
    job = lease(queue)
    too_long = b"x" * (MAX_PROGRESS_BYTES + 1)
    before = commands_sent(queue.conn)
    with pytest.raises(ArgumentError) as client_side:
        queue.set_progress(job, too_long)
    assert commands_sent(queue.conn) == before
    keys = [queue.key("active"), queue.key("job", job.id)]
    with pytest.raises(ArgumentError) as server_side:
        queue.executor.call(queue.conn, executor_transition("progress"), keys,
                            [job.id, str(job.fence), too_long])
    assert str(client_side.value) == str(server_side.value) == \
        f"EMQSIZE progress must be at most {MAX_PROGRESS_BYTES} bytes"
    assert queue.outcome(job.id).progress is None
    queue.set_progress(job, b"x" * MAX_PROGRESS_BYTES)
    assert queue.outcome(job.id).progress == b"x" * MAX_PROGRESS_BYTES


def test_a_stale_holder_over_the_cap_is_refused_for_its_size(queue: Queue) -> None:
    keys = [queue.key("active"), queue.key("job", "JOB:none")]
    with pytest.raises(ArgumentError, match="EMQSIZE progress"):
        queue.executor.call(queue.conn, executor_transition("progress"), keys,
                            ["JOB:none", "1", b"x" * (MAX_PROGRESS_BYTES + 1)])


@pytest.mark.parametrize("wire", [5, 6])
def test_the_async_queue_records_progress(conn: redis.Redis, valkey: EmbeddedValkey,
                                          wire: int) -> None:
    async def main() -> tuple[Any, Any]:
        client = async_twin(conn)
        try:
            queue = AsyncQueue(client, "emails", wire=wire)
            await queue.enqueue("JOB:1", b"p", now=NOW)
            job = await queue.claim(now=NOW)
            assert job is not None
            await queue.set_progress(job, b"half")
            await queue.ack(job)
            try:
                await queue.set_progress(job, b"late")
            except StaleLease:
                stale = True
            else:
                stale = False
            return (await queue.outcome("JOB:1")).progress, stale
        finally:
            await client.aclose()

    assert asyncio.run(main()) == (b"half", True)
