"""The task layer's producer side from asyncio code: ``aenqueue`` admits what a real consumer
runs, a handle's ``aresult`` (and ``aoutcome``, ``acancel``, ``aprogress``) answers as
``result`` does, on an asyncio client of the App's own per event loop (or the one it was
given), and the wait blocks on the server while the event loop goes on — on redis-py and
valkey-py, both wires."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
import redis.cluster

from echomq import App, Cancelled, Consumer, TaskFailed, Verdict
from echomq.engine.clients import async_twin
from echomq.tasks.handle import TaskHandle
from tests.task_functions import add, broken

BOUND_S = 60.0  # a loaded machine: a bound on waiting, never a speed


@pytest.fixture
def conn(library_conn: Any) -> Any:
    """Every test here runs on a redis-py client and on a valkey-py one."""
    return library_conn


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def app(request: pytest.FixtureRequest, conn: Any) -> App:
    app = App(conn, "default", wire=request.param)
    app.task(name="add", keep_result=True)(add)
    app.task(name="broken", no_retry=(RuntimeError,))(broken)

    @app.task(name="forget", keep_result=False)
    def forget() -> int:
        return 1

    return app


def drain(app: App) -> int:
    consumer = Consumer(app.queue, app.handler)
    try:
        return consumer.drain()
    finally:
        consumer.close()


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def enqueued(app: App, task: str, *args: Any) -> TaskHandle[Any]:
    """A handle of ``task`` run with ``args``, admitted by ``aenqueue`` in an event loop of its
    own (gone once admitted)."""
    handle: TaskHandle[Any] = asyncio.run(app.tasks[task].aenqueue(*args))
    return handle


def test_an_aenqueued_task_runs_and_aresult_gives_its_value(app: App) -> None:
    handle = enqueued(app, "add", 2, 3)
    assert handle.verdict is Verdict.ENQUEUED
    assert drain(app) == 1
    assert asyncio.run(handle.aresult(timeout=BOUND_S)) == 5
    assert handle.result(timeout=BOUND_S) == 5  # the blocking twin agrees


def test_aresult_of_a_dead_task_raises_task_failed(app: App) -> None:
    handle = enqueued(app, "broken", "disk on fire")
    drain(app)
    with pytest.raises(TaskFailed, match="disk on fire"):
        asyncio.run(handle.aresult(timeout=BOUND_S))


def test_acancel_ends_a_waiting_job_and_aresult_raises_cancelled(app: App) -> None:
    async def cancelled() -> None:
        handle = await app.tasks["add"].aenqueue(1, 1)
        assert (await handle.aoutcome()).state == "pending"
        assert await handle.acancel() is Verdict.CANCELLED
        with pytest.raises(Cancelled):
            await handle.aresult(timeout=BOUND_S)
        assert await handle.aprogress() is None

    asyncio.run(cancelled())
    assert drain(app) == 0


def test_aresult_of_a_job_not_done_in_time_raises_timeout_error(app: App) -> None:
    handle = enqueued(app, "add", 1, 2)
    with pytest.raises(TimeoutError):
        asyncio.run(handle.aresult(timeout=0.2))


def test_aresult_of_no_such_job_raises_lookup_error(app: App) -> None:
    handle = TaskHandle("JOB:never", app.queue, app.tasks["add"], Verdict.ENQUEUED)
    with pytest.raises(LookupError):  # after the timeout: a job unknown now may be admitted
        asyncio.run(handle.aresult(timeout=0.2))


def test_aresult_of_a_task_keeping_no_result_is_none_once_done(app: App) -> None:
    handle = enqueued(app, "forget")
    drain(app)
    assert asyncio.run(handle.aresult(timeout=BOUND_S)) is None


def test_with_options_aenqueue_of_an_admitted_job_id_is_a_duplicate(app: App) -> None:
    async def twice() -> list[Verdict]:
        call = app.tasks["add"].with_options(job_id="JOB:once", priority=5)
        return [(await call.aenqueue(1, 2)).verdict, (await call.aenqueue(1, 2)).verdict]

    assert asyncio.run(twice()) == [Verdict.ENQUEUED, Verdict.DUPLICATE]
    assert drain(app) == 1


def test_aenqueue_checks_the_arguments_before_anything_is_sent(app: App) -> None:
    with pytest.raises(TypeError):
        asyncio.run(app.tasks["add"].aenqueue(1))
    assert app.queue.counts()["pending"] == 0


def test_each_asyncio_run_gets_its_own_client_closed_as_its_loop_ends(app: App,
                                                                      conn: Any) -> None:
    baseline = len(conn.client_list())
    clients = []

    async def round_trip(a: int) -> int | None:
        handle = await app.tasks["add"].aenqueue(a, a)
        clients.append((await app.aqueues.queue_named(app.queue.name)).conn)
        await asyncio.to_thread(drain, app)
        value: int | None = await handle.aresult(timeout=BOUND_S)
        return value

    assert asyncio.run(round_trip(1)) == 2
    until(lambda: len(conn.client_list()) == baseline, "the first loop's client closed")
    assert asyncio.run(round_trip(2)) == 4
    assert clients[0] is not clients[1]
    until(lambda: len(conn.client_list()) == baseline, "the second loop's client closed")


def test_aclose_closes_the_running_loops_client_and_the_next_call_makes_another(
        app: App) -> None:
    async def closed_between() -> None:
        first = (await app.tasks["add"].aenqueue(1, 1)).id
        made = (await app.aqueues.queue_named(app.queue.name)).conn
        await app.aclose()
        second = (await app.tasks["add"].aenqueue(2, 2)).id
        assert (await app.aqueues.queue_named(app.queue.name)).conn is not made
        assert first != second

    asyncio.run(closed_between())
    assert drain(app) == 2


def test_the_event_loop_runs_while_aresult_waits_on_the_server(app: App, conn: Any) -> None:
    """The job is only run once a coroutine has seen, on the same loop, aresult's wait blocked
    on the server: a wait that blocked the loop would never let it look."""

    async def blocked_on_the_server() -> None:
        while not any(client.get("cmd") == "blmove"
                      for client in await asyncio.to_thread(conn.client_list)):
            await asyncio.sleep(0.01)

    async def waited() -> int | None:
        handle = await app.tasks["add"].aenqueue(20, 22)
        waiting = asyncio.create_task(handle.aresult(timeout=BOUND_S))
        await asyncio.wait_for(blocked_on_the_server(), BOUND_S)
        assert not waiting.done()
        worker = threading.Thread(target=drain, args=(app,))
        worker.start()
        try:
            return await waiting
        finally:
            await asyncio.to_thread(worker.join)

    assert asyncio.run(waited()) == 42


def test_an_app_given_an_asyncio_client_uses_it_and_leaves_it_open(conn: Any) -> None:
    async def on_given() -> None:
        given = async_twin(conn)
        app = App(conn, "given", aconn=given)
        app.task(name="add", keep_result=True)(add)
        handle = await app.tasks["add"].aenqueue(3, 4)
        assert (await app.aqueues.queue_named("given")).conn is given
        await asyncio.to_thread(drain, app)
        assert await handle.aresult(timeout=BOUND_S) == 7
        await app.aclose()
        assert await given.ping()
        await given.aclose()

    asyncio.run(on_given())


def test_an_app_on_a_cluster_client_without_aconn_is_told_what_to_pass() -> None:
    cluster = object.__new__(redis.cluster.RedisCluster)  # never connected: nothing is sent
    app = App(cluster, "default", check_policy=False)
    app.task(name="add")(add)
    with pytest.raises(TypeError, match=r"aconn=redis\.asyncio\.RedisCluster"):
        asyncio.run(app.tasks["add"].aenqueue(1, 2))


def test_aenqueue_goes_through_the_apps_hooks(conn: Any) -> None:
    seen: list[tuple[str, str]] = []

    class Noting:
        @contextmanager
        def enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> Iterator[None]:
            headers["via"] = "aenqueue"
            yield
            seen.append((queue, task))

        @contextmanager
        def running(self, *args: Any) -> Iterator[Any]:
            yield None

    app = App(conn, "hooked", hooks=[Noting()])
    app.task(name="add")(add)
    asyncio.run(app.tasks["add"].aenqueue(1, 2))
    assert seen == [("hooked", "add")]
    job = app.queue.claim()
    assert job is not None and b"aenqueue" in bytes(job.payload)

