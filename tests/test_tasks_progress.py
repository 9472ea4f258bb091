"""``echomq.progress`` inside a running task, on both wires and both clients: sync and async
tasks under both handlers report through their job's lease, ``TaskHandle.progress()`` decodes
the last report (after the job is done too), a stale holder is refused, and outside a task the
call is a clear RuntimeError."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

import echomq
from echomq import App, Job, Queue, StaleLease
from echomq.consumer.directives import Done
from echomq.tasks.envelope import decode_result
from tests import test_tasks

conn = test_tasks.conn
wire = test_tasks.wire


def make_app(conn: redis.Redis, wire: int, serializer: str = "json") -> App:
    app = App(conn, "default", wire=wire, serializer=serializer)

    @app.task(name="steps", keep_result=True)
    def steps(n: int) -> int:
        for done in range(1, n + 1):
            echomq.progress({"done": done, "of": n})
        return n

    @app.task(name="async_steps", keep_result=True)
    async def async_steps(n: int) -> int:
        for done in range(1, n + 1):
            await asyncio.sleep(0)
            echomq.progress([done, n])
        return n

    @app.task(name="report_late")
    def report_late() -> str:
        try:
            echomq.progress("late")
        except StaleLease:
            return "stale"
        return "recorded"

    return app


@pytest.fixture
def app(conn: redis.Redis, wire: int) -> App:
    return make_app(conn, wire)


def claimed(queue: Queue) -> Job:
    job = queue.claim(lease_ms=30_000)
    assert job is not None
    return job


def settle(queue: Queue, job: Job, directive: Any) -> None:
    assert isinstance(directive, Done)
    queue.ack(job, result=directive.result, retention_ms=60_000)


def test_a_sync_task_reports_and_the_handle_reads_the_last_report(app: App) -> None:
    handle = app.tasks["steps"].enqueue(3)
    assert handle.progress() is None
    job = claimed(app.queue)
    directive = app.handler(job)
    assert handle.progress() == {"done": 3, "of": 3}  # while the job is still leased
    settle(app.queue, job, directive)
    assert handle.result(timeout=10) == 3
    assert handle.progress() == {"done": 3, "of": 3}  # kept with the tombstone
    assert app.queue.outcome(handle.id).progress == b'{"value":{"done":3,"of":3}}'


def test_an_async_task_reports_under_the_plain_handler(app: App) -> None:
    handle = app.tasks["async_steps"].enqueue(2)
    job = claimed(app.queue)
    settle(app.queue, job, app.handler(job))
    assert handle.progress() == [2, 2]


def test_async_and_threaded_tasks_report_under_the_async_handler(app: App) -> None:
    on_loop = app.tasks["async_steps"].enqueue(4)
    in_thread = app.tasks["steps"].enqueue(5)

    async def run_both() -> list[Any]:
        jobs = [claimed(app.queue) for _ in range(2)]
        return list(await asyncio.gather(*(app.async_handler(job) for job in jobs)))

    directives = asyncio.run(run_both())
    assert all(isinstance(directive, Done) for directive in directives)
    assert on_loop.progress() == [4, 4]
    assert in_thread.progress() == {"done": 5, "of": 5}


def test_a_holder_whose_lease_was_taken_again_is_refused(app: App) -> None:
    handle = app.tasks["report_late"].enqueue()
    stale = claimed(app.queue)
    app.queue.set_progress(stale, b"first")
    assert app.queue.recover(now=stale_deadline(app.queue, stale)) == 1
    again = claimed(app.queue)
    assert again.fence != stale.fence
    assert returned(app.handler(stale)) == "stale"  # the task caught StaleLease
    assert app.queue.outcome(handle.id).progress == b"first"
    assert returned(app.handler(again)) == "recorded"
    assert handle.progress() == "late"


def returned(directive: Any) -> Any:
    assert isinstance(directive, Done)
    return decode_result(directive.result).value


def stale_deadline(queue: Queue, job: Job) -> int:
    deadline = queue.conn.zscore(queue.key("active"), job.id)
    assert deadline is not None
    return int(deadline)


def test_msgpack_reports_are_decoded_too(conn: redis.Redis, wire: int) -> None:
    app = make_app(conn, wire, serializer="msgpack")
    handle = app.tasks["steps"].enqueue(2)
    job = claimed(app.queue)
    settle(app.queue, job, app.handler(job))
    raw = app.queue.outcome(handle.id).progress
    assert raw is not None and not raw.startswith(b"{")
    assert handle.progress() == {"done": 2, "of": 2}


def test_progress_outside_a_task_is_a_runtime_error(app: App) -> None:
    with pytest.raises(RuntimeError, match=r"inside a function of @app.task"):
        echomq.progress("nowhere")


def test_a_task_called_directly_has_no_job_to_report_on(app: App) -> None:
    with pytest.raises(RuntimeError, match=r"echomq.progress\(\) reports on the job"):
        app.tasks["steps"](1)
