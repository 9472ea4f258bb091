"""``app.handle(job_id)``: the handle of a job admitted earlier, made from its id alone (in a web
request after the one that enqueued it, in another process), reading and controlling the job
as the handle ``enqueue`` returned does; an id the queue never admitted raises at once."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import redis

from echomq import App, Cancelled, KindError, UnknownJob, Verdict
from echomq.consumer.directives import Done


@dataclasses.dataclass
class Size:
    width: int
    height: int


def made_app(conn: redis.Redis) -> App:
    app = App(conn, "images", check_policy=False)

    @app.task(name="measure")
    def measure(width: int, height: int) -> Size:
        return Size(width, height)

    return app


@pytest.fixture
def app(conn: redis.Redis) -> App:
    return made_app(conn)


def run_one(app: App) -> None:
    """One job claimed, run by the App's handler and acked with its result."""
    job = app.queue.claim(lease_ms=30_000)
    assert job is not None
    directive = app.handler(job)
    assert isinstance(directive, Done)
    assert app.queue.ack(job, result=directive.result) is Verdict.ACKED


def test_a_handle_from_the_id_reads_the_job_another_app_enqueued(conn: redis.Redis,
                                                                   app: App) -> None:
    job_id = app.tasks["measure"].enqueue(640, 480).id
    later = made_app(conn)  # another request's (or process's) App, knowing only the id
    handle = later.handle(job_id)
    assert (handle.id, handle.queue.name, handle.verdict) == (job_id, "images", None)
    assert handle.outcome().state == "pending" and handle.progress() is None
    run_one(app)
    assert handle.outcome().state == "done"
    assert handle.result(timeout=0) == {"width": 640, "height": 480}  # as decoded
    typed = later.handle(job_id, task=later.tasks["measure"])
    assert typed.result(timeout=0) == Size(640, 480)  # the task's return hint


def test_a_handle_from_the_id_cancels_the_job(app: App) -> None:
    job_id = app.tasks["measure"].enqueue(1, 2).id
    handle = app.handle(job_id)
    assert handle.cancel() is Verdict.CANCELLED
    assert app.queue.outcome(job_id).state == "cancelled"
    with pytest.raises(Cancelled):
        handle.result(timeout=0)


def test_an_id_never_admitted_raises_at_once_naming_the_id_and_the_queue(
        conn: redis.Redis, app: App) -> None:
    blocked = conn.info("commandstats").get("cmdstat_blmove", {}).get("calls", 0)
    with pytest.raises(UnknownJob, match=r"^no job JOB:never on queue images: never admitted"
                       ) as raised:
        app.handle("JOB:never")
    assert (raised.value.job_id, raised.value.queue) == ("JOB:never", "images")
    assert isinstance(raised.value, LookupError)
    job_id = app.tasks["measure"].enqueue(1, 2).id
    with pytest.raises(UnknownJob, match="on queue elsewhere"):
        app.handle(job_id, queue="elsewhere")  # admitted, but to another queue
    # Looked up, never waited for: no blocking read reached the server.
    assert conn.info("commandstats").get("cmdstat_blmove", {}).get("calls", 0) == blocked
    with pytest.raises(KindError):
        app.handle("not-a-job-id")


def test_the_async_twins_read_the_same_job(app: App) -> None:
    job_id = app.tasks["measure"].enqueue(3, 4).id
    run_one(app)

    async def read() -> tuple[str, Size]:
        handle = await app.ahandle(job_id, task=app.tasks["measure"])
        state = (await handle.aoutcome()).state
        value = await handle.aresult(timeout=0)
        assert value is not None
        with pytest.raises(UnknownJob, match="JOB:never on queue images"):
            await app.ahandle("JOB:never")
        await app.aclose()
        return state, value

    assert asyncio.run(read()) == ("done", Size(3, 4))
