"""A batch of a task's calls (``task.enqueue_many``, ``aenqueue_many``): one command on the wire
for the whole batch, a handle per call in order whose result a worker gives, the calls checked
before anything is sent, each call's hooks, and the asyncio twin on the App's asyncio client —
both wires, redis-py and valkey-py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from echomq import App, Consumer, Verdict
from tests.task_functions import add

BOUND_S = 60.0  # a bound on waiting for results, never a speed


@pytest.fixture
def conn(library_conn: Any) -> Any:
    return library_conn


class Enqueues:
    """Hooks noting each enqueue, and giving each job a header."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @contextmanager
    def enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> Iterator[None]:
        headers["n"] = str(len(self.seen))
        yield
        self.seen.append(task)

    @contextmanager
    def running(self, *args: Any) -> Iterator[Any]:
        from echomq.tasks.hooks import RunRecord
        yield RunRecord()


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def app(request: pytest.FixtureRequest, conn: Any) -> App:
    app = App(conn, "default", wire=request.param, hooks=Enqueues())
    app.task(name="add", keep_result=True)(add)
    return app


def transitions_sent(conn: Any) -> dict[str, int]:
    stats = conn.info("commandstats")
    return {name[len("cmdstat_"):]: int(value["calls"]) for name, value in stats.items()
            if name == "cmdstat_evalsha" or name.startswith("cmdstat_emq.")}


def drain(app: App) -> None:
    consumer = Consumer(app.queue, app.handler)
    try:
        consumer.drain()
    finally:
        consumer.close()


def test_a_batch_is_one_command_and_a_handle_per_call(app: App, conn: Any) -> None:
    task = app.tasks["add"]
    task.enqueue_many([(0, 0)])  # the script loaded (wire 5), the queue registered
    conn.config_resetstat()
    handles = task.enqueue_many([(1, 2), [3, 4], task.s(5, b=6), task.s(7, 8).set(priority=9)])
    assert transitions_sent(conn) == {"evalsha" if app.wire == 5 else "emq.enqueue_many": 1}
    assert [handle.verdict for handle in handles] == [Verdict.ENQUEUED] * 4
    assert len({handle.id for handle in handles}) == 4
    assert conn.zrange(app.queue.key("pending"), 0, 0) == [handles[3].id.encode()]  # prio 9
    drain(app)
    assert [handle.result(timeout=BOUND_S) for handle in handles] == [3, 7, 11, 15]
    assert app.hooks.seen == ["add"] * 5  # type: ignore[attr-defined]


def test_job_ids_duplicates_and_options(app: App, conn: Any) -> None:
    task = app.tasks["add"]
    handles = task.enqueue_many([task.s(1, 1).set(job_id="JOB:same"),
                                 task.s(2, 2).set(job_id="JOB:same")])
    assert [(h.id, h.verdict) for h in handles] == [("JOB:same", Verdict.ENQUEUED),
                                                     ("JOB:same", Verdict.DUPLICATE)]
    later = task.with_options(delay_ms=60_000, priority=3, queue="other").enqueue_many([(1, 2)])
    other = app.queue_named("other")
    assert other.counts()["delayed"] == 1
    assert conn.hget(other.key("job", later[0].id), "priority") == b"3"
    assert task.enqueue_many([]) == []


def test_bad_calls_send_nothing(app: App, conn: Any) -> None:
    task = app.tasks["add"]
    conn.config_resetstat()
    with pytest.raises(TypeError):
        task.enqueue_many([(1, 2), (1, 2, 3)])
    with pytest.raises(TypeError):
        task.enqueue_many([(1, 2), {"a": 1}])
    with pytest.raises(ValueError, match="job_id"):
        task.with_options(job_id="JOB:x").enqueue_many([(1, 2)])
    with pytest.raises(ValueError, match="after="):
        task.with_options(after=["JOB:p"]).enqueue_many([(1, 2)])
    other = App(conn, "default").task(name="other")(add)
    with pytest.raises(ValueError, match="other"):
        task.enqueue_many([other.s(1, 2)])
    assert transitions_sent(conn) == {}
    assert app.hooks.seen == []  # type: ignore[attr-defined]


def test_the_asyncio_twin(app: App, conn: Any) -> None:
    task = app.tasks["add"]

    async def body() -> list[int | None]:
        handles = await task.aenqueue_many([(1, 1), task.s(2, b=2)])
        assert [handle.verdict for handle in handles] == [Verdict.ENQUEUED] * 2
        await asyncio.to_thread(drain, app)
        return [await handle.aresult(timeout=BOUND_S) for handle in handles]

    assert asyncio.run(body()) == [2, 4]
