"""Tasks end to end: a real Consumer on ``app.handler`` (and ``echomq worker module:app``
processes) settling by the directives, results read back with ``handle.result``."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from echomq import App, Backoff, Consumer, RetryAfter, TaskFailed, aio
from echomq.embedded import EmbeddedValkey
from echomq.engine.calls import MAX_RESULT_BYTES
from echomq.tasks.envelope import Envelope, encode
from tests.task_functions import add, broken
from tests.test_readme import fenced_blocks

ROOT = Path(__file__).resolve().parent.parent
NOW = 1_700_000_000_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def app(request: pytest.FixtureRequest, conn: redis.Redis) -> App:
    app = App(conn, "default", wire=request.param, max_attempts=3,
              backoff=Backoff(first_ms=1_000, factor=2, max_ms=60_000, jitter=0),
              draw=lambda: 0.0)

    app.task(name="add", keep_result=True)(add)

    @app.task(name="when", keep_result=True)
    def when(day: datetime.date) -> datetime.date:
        return day + datetime.timedelta(days=1)

    app.task(name="broken", keep_result=True)(broken)

    @app.task(name="later")
    def later() -> None:
        raise RetryAfter(7)

    @app.task(name="forget", keep_result=False)
    def forget() -> int:
        return 1

    @app.task
    def plain(a: int) -> dict[str, int]:
        return {"twice": a * 2}

    return app


def task_named(app: App, ending: str) -> Any:
    """The app's task whose name ends so (a bare ``@app.task`` is named module.qualname)."""
    return next(task for task in app.tasks.values() if task.name.endswith(ending))


def drain(app: App, *, clock: int | None = None) -> int:
    consumer = Consumer(app.queue, app.handler, clock=(lambda: clock) if clock else None)
    try:
        return consumer.drain()
    finally:
        consumer.close()


def test_a_kept_result_comes_back_typed(app: App) -> None:
    handle = app.tasks["add"].enqueue(2, 3)
    dated = app.tasks["when"].enqueue(datetime.date(2026, 2, 28))
    assert drain(app) == 2
    assert handle.result(timeout=5) == 5
    assert dated.result(timeout=5) == datetime.date(2026, 3, 1)
    assert handle.outcome().state == "done"


def test_a_plain_tasks_result_comes_back(app: App) -> None:
    handle = task_named(app, ".plain").enqueue(21)
    assert drain(app) == 1
    assert handle.result(timeout=5) == {"twice": 42}


def test_a_task_that_keeps_no_result_gives_none_once_done(app: App) -> None:
    handle = app.tasks["forget"].enqueue()
    drain(app)
    assert handle.result(timeout=60) is None
    assert handle.outcome().state == "done" and handle.outcome().result == b""


def test_result_of_a_task_keeping_none_waits_for_its_end_on_the_server(
        app: App, conn: redis.Redis, valkey: EmbeddedValkey) -> None:
    """The waiter's client has no socket timeout, so its wait blocks in slices of 60 s and no
    timeout is given: before the first slice ends, only the ended token the ack leaves can wake
    it (the join allows half of that)."""
    started, gate = threading.Event(), threading.Event()

    def gated() -> int:
        started.set()
        assert gate.wait(30)
        return 1

    app.task(name="gated", keep_result=False)(gated)
    client = valkey.client(socket_timeout=None)
    producer = App(client, app.queue.name, wire=app.wire)
    handle = producer.task(name="gated", keep_result=False)(gated).enqueue()
    returned: list[tuple[object, bool]] = []
    waiter = threading.Thread(target=lambda: returned.append((handle.result(), gate.is_set())),
                              daemon=True)
    try:
        waiter.start()
        worker = threading.Thread(target=drain, args=(app,))
        worker.start()
        assert started.wait(10)
        assert returned == [] and handle.outcome().state == "active"
        gate.set()
        worker.join(30)
        waiter.join(30)
        assert returned == [(None, True)]
        assert conn.exists(app.queue.key("ended", handle.id))
    finally:
        gate.set()
        client.close()


def test_result_of_a_dead_task_keeping_none_raises(app: App) -> None:
    @app.task(name="doomed", keep_result=False, max_attempts=1)
    def doomed() -> None:
        raise RuntimeError("no way")

    handle = doomed.enqueue()
    drain(app)
    with pytest.raises(TaskFailed, match="RuntimeError: no way"):
        handle.result(timeout=5)


def test_result_waits_for_a_worker_without_polling(app: App) -> None:
    handle = app.tasks["add"].enqueue(20, 22)
    got: list[int | None] = []
    waiter = threading.Thread(target=lambda: got.append(handle.result(timeout=10)))
    waiter.start()
    drain(app)
    waiter.join(10)
    assert got == [42]


def test_result_times_out_while_the_job_waits(app: App) -> None:
    handle = app.tasks["add"].enqueue(1, 1)
    with pytest.raises(TimeoutError, match="pending"):
        handle.result(timeout=0.05)


def test_a_failing_task_goes_dead_after_its_attempts_with_its_traceback(app: App) -> None:
    handle = app.tasks["broken"].enqueue("disk on fire")
    for attempt in range(3):
        drain(app, clock=NOW + attempt * 60_000)
        app.queue.promote(now=NOW + attempt * 60_000 + 59_000)
    with pytest.raises(TaskFailed) as failed:
        handle.result(timeout=5)
    assert failed.value.attempts == 3
    head, trace = failed.value.error.split("\n", 1)
    assert head == "RuntimeError: disk on fire" and "raise RuntimeError(reason)" in trace


def test_the_back_off_sets_when_the_retry_is_due(app: App, conn: redis.Redis) -> None:
    handle = app.tasks["broken"].enqueue("x")
    drain(app, clock=NOW)
    assert conn.zscore(app.queue.key("delayed"), handle.id) == NOW + 1_000
    app.queue.promote(now=NOW + 1_000)
    drain(app, clock=NOW + 1_000)
    assert conn.zscore(app.queue.key("delayed"), handle.id) == NOW + 1_000 + 2_000


def test_retry_after_sets_its_own_delay(app: App, conn: redis.Redis) -> None:
    handle = app.tasks["later"].enqueue()
    drain(app, clock=NOW)
    assert conn.zscore(app.queue.key("delayed"), handle.id) == NOW + 7_000
    assert handle.outcome().state == "delayed"


def test_arguments_that_cannot_fit_go_dead_at_the_first_attempt(app: App) -> None:
    # Written by another producer: enqueue itself refuses them (tests/test_enqueue_checks.py).
    envelope = Envelope(task="add", args=["two", 3], queue=app.queue.name)
    app.queue.enqueue("JOB:typo", encode(envelope, "json"))
    handle = app.handle("JOB:typo")
    drain(app)
    with pytest.raises(TaskFailed, match="argument 'a'") as failed:
        handle.result(timeout=5)
    assert failed.value.attempts == 1


def test_a_delayed_task_runs_once_due(app: App) -> None:
    handle = app.tasks["add"].with_options(delay_ms=5_000).enqueue(1, 2)
    assert handle.outcome().state == "delayed"
    assert drain(app) == 0
    app.queue.promote(now=app.queue.conn.time()[0] * 1000 + 6_000)
    assert drain(app) == 1
    assert handle.result(timeout=5) == 3


def test_a_task_at_a_time_waits_in_the_delayed_set(app: App, conn: redis.Redis) -> None:
    at = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    handle = app.tasks["add"].with_options(at=at).enqueue(1, 2)
    assert conn.zscore(app.queue.key("delayed"), handle.id) == at.timestamp() * 1000
    assert handle.outcome().state == "delayed"


def test_a_delayed_enqueue_is_idempotent_too(app: App) -> None:
    call = app.tasks["add"].with_options(job_id="JOB:sum", delay_ms=5_000)
    assert call.enqueue(1, 2).verdict.value == "ENQUEUED"
    assert call.enqueue(1, 2).verdict.value == "DUPLICATE"


# worker processes ------------------------------------------------------------------------------

def run_worker(valkey: EmbeddedValkey, tmp_path: Path, *options: str,
               target: str = "tests.tasks_app:app") -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "echomq", "worker", target, *options]
    env = {**os.environ, "ECHOMQ_URL": valkey.url}
    with (tmp_path / "worker.log").open("wb") as sink:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)


@pytest.fixture
def producer(valkey: EmbeddedValkey, conn: redis.Redis) -> Iterator[App]:
    from tests import tasks_app
    tasks_app.app.conn = conn
    for queue in tasks_app.app.queues.values():
        queue.conn = conn
    yield tasks_app.app


def test_a_worker_process_runs_an_apps_tasks(valkey: EmbeddedValkey, producer: App,
                                             tmp_path: Path) -> None:
    process = run_worker(valkey, tmp_path, "--queue", "urgent", "--queue", "tasks",
                         "--concurrency", "2")
    try:
        handles = [producer.tasks["add"].enqueue(n, n) for n in range(20)]
        shout = producer.tasks["urgent"].enqueue("hi")
        broken = producer.tasks["broken"].enqueue("no")
        assert [handle.result(timeout=20) for handle in handles] == [2 * n for n in range(20)]
        assert shout.result(timeout=20) == "HI"
        with pytest.raises(TaskFailed, match="RuntimeError: no") as failed:
            broken.result(timeout=20)
        assert failed.value.attempts == 2
        worker_pid = producer.tasks["pid"].enqueue().result(timeout=20)
        assert worker_pid != os.getpid()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)


def test_a_result_over_the_cap_goes_dead_with_the_reason_and_the_worker_goes_on(
        app: App) -> None:
    @app.task(name="huge", keep_result=True)
    def huge() -> str:
        return "x" * MAX_RESULT_BYTES

    too_big = huge.enqueue()
    fine = app.tasks["add"].enqueue(1, 2)
    assert drain(app) == 2
    with pytest.raises(TaskFailed, match="at most 524288 are kept") as failed:
        too_big.result(timeout=5)
    assert failed.value.attempts == 1
    assert fine.result(timeout=5) == 3


@pytest.mark.parametrize("kind", ["surrogate", "cycle", "huge int"])
def test_a_result_the_serializer_cannot_write_goes_dead_at_once(app: App, conn: redis.Redis,
                                                                kind: str) -> None:
    packed = App(conn, "default", wire=app.wire, serializer="msgpack", max_attempts=3)

    @packed.task(name="unwritable", keep_result=True)
    def unwritable(kind: str) -> Any:
        if kind == "surrogate":
            return "\ud800"
        if kind == "cycle":
            held: list[Any] = []
            held.append(held)
            return held
        return 2**70

    handle = unwritable.enqueue(kind)
    assert drain(packed) == 1
    with pytest.raises(TaskFailed, match="cannot be kept as its result") as failed:
        handle.result(timeout=5)
    assert failed.value.attempts == 1


def test_async_tasks_run_side_by_side_on_the_asyncio_consumer(app: App,
                                                              valkey: EmbeddedValkey) -> None:
    in_flight = 4
    started: list[int] = []
    gate: dict[str, asyncio.Event] = {}

    @app.task(name="gathered", keep_result=True)
    async def gathered(n: int) -> int:
        started.append(n)
        if len(started) == in_flight:
            gate["all"].set()
        await gate["all"].wait()  # only ends once every job has started: none ran alone
        return n * 10

    handles = [gathered.enqueue(n) for n in range(in_flight)]

    async def serve() -> int:
        gate["all"] = asyncio.Event()
        conn = aioredis.Redis(port=valkey.port)
        queue = aio.Queue(conn, app.queue.name, wire=app.wire)
        consumer = aio.Consumer(queue, app.async_handler, concurrency=in_flight)
        try:
            return await asyncio.wait_for(consumer.drain(), 10)
        finally:
            await conn.aclose()

    assert asyncio.run(serve()) == in_flight
    assert [handle.result(timeout=5) for handle in handles] == [0, 10, 20, 30]


def test_a_task_keeping_none_on_the_asyncio_consumer_leaves_its_ended_token(
        app: App, conn: redis.Redis, valkey: EmbeddedValkey) -> None:
    @app.task(name="quiet", keep_result=False)
    async def quiet() -> int:
        return 1

    handle = quiet.enqueue()

    async def serve() -> int:
        client = aioredis.Redis(port=valkey.port)
        consumer = aio.Consumer(aio.Queue(client, app.queue.name, wire=app.wire),
                                app.async_handler)
        try:
            return await asyncio.wait_for(consumer.drain(), 10)
        finally:
            await client.aclose()

    assert asyncio.run(serve()) == 1
    assert conn.exists(app.queue.key("ended", handle.id))
    assert handle.result(timeout=5) is None


def test_result_waits_past_the_connections_socket_timeout(app: App,
                                                          valkey: EmbeddedValkey) -> None:
    client = valkey.client(socket_timeout=0.3)
    producer = App(client, app.queue.name, wire=app.wire)
    producer.task(name="add", keep_result=True)(app.tasks["add"].function)
    handle = producer.tasks["add"].enqueue(1, 2)
    try:
        with pytest.raises(TimeoutError, match=r"still pending after 0\.8 s"):
            handle.result(timeout=0.8)
        finished: list[int | None] = []
        waiter = threading.Thread(target=lambda: finished.append(handle.result()))
        waiter.start()
        drain(app)
        waiter.join(10)
        assert finished == [3]
    finally:
        client.close()


def test_the_readmes_queue_underneath_example_runs_too(tmp_path: Path) -> None:
    # tests/test_readme.py runs the quickstart's first block (the tasks); this one runs the
    # second, the raw Queue example it used to lead with.
    underneath = fenced_blocks("python")[1]
    assert "q.enqueue(job_id, b\"hello\")" in underneath
    script = tmp_path / "underneath.py"
    script.write_text(underneath.replace("...", "pass"))
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path, timeout=120)


def test_a_worker_runs_an_all_async_app_with_jobs_in_flight_together(
        valkey: EmbeddedValkey, conn: redis.Redis, tmp_path: Path) -> None:
    from tests import tasks_app
    producer = App(conn, tasks_app.async_app.queue.name)
    producer.task(name="rendezvous", keep_result=True)(tasks_app.rendezvous.function)
    process = run_worker(valkey, tmp_path, "--concurrency", "1", "--async-concurrency", "4",
                         target="tests.tasks_app:async_app")
    try:
        handles = [producer.tasks["rendezvous"].enqueue("four", 4) for _ in range(4)]
        assert [handle.result(timeout=30) for handle in handles] == [1, 1, 1, 1]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)


def mixed_producer(conn: redis.Redis) -> App:
    """The producer's side of ``tests.tasks_app:mixed_app``: its tasks, on the test's server."""
    from tests import tasks_app
    producer = App(conn, tasks_app.mixed_app.queue.name, max_attempts=1)
    for name, task in tasks_app.mixed_app.tasks.items():
        producer.task(name=name, keep_result=task.keep_result)(task.function)
    return producer


def test_a_worker_runs_a_mixed_apps_async_tasks_together_and_its_plain_ones_beside_them(
        valkey: EmbeddedValkey, conn: redis.Redis, tmp_path: Path) -> None:
    """One process, six jobs in flight at once: three async runs, and three plain ones each in
    a thread of its own, each return 1 only if all six had started before any returned."""
    producer = mixed_producer(conn)
    process = run_worker(valkey, tmp_path, "--concurrency", "1", "--async-concurrency", "6",
                         target="tests.tasks_app:mixed_app")
    try:
        handles = [producer.tasks[name].enqueue("six", 6)
                   for name in ["rendezvous", "rendezvous_in_thread"] * 3]
        assert [handle.result(timeout=30) for handle in handles] == [1] * 6, \
            (tmp_path / "worker.log").read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)


def test_a_plain_task_past_its_time_limit_in_a_mixed_app_has_its_process_replaced_once_the_rest_end(
        valkey: EmbeddedValkey, conn: redis.Redis, tmp_path: Path) -> None:
    """The plain task cannot be cancelled, so its process is replaced: first the async job in
    flight beside it runs to its end (it waits for the hung job to go dead, three seconds into
    its own time limit of six), then a fresh process serves the next job."""
    producer = mixed_producer(conn)
    process = run_worker(valkey, tmp_path, "--concurrency", "1", "--async-concurrency", "4",
                         "--time-limit", "6", target="tests.tasks_app:mixed_app")
    log = lambda: (tmp_path / "worker.log").read_text()  # noqa: E731
    try:
        hung = producer.tasks["hang"].enqueue()
        started = conn.blpop(["test:hung"], timeout=30)
        assert started is not None, log()
        hung_pid = int(started[1])
        outlast = producer.tasks["outlast"].with_options(delay_ms=3_000).enqueue(hung.id)
        assert outlast.result(timeout=30) == hung_pid, log()
        assert outlast.outcome().attempts == 1
        ended = hung.outcome()
        assert ended.state == "dead" and "TimeLimitExceeded" in (ended.error or "")
        assert producer.tasks["pid"].enqueue().result(timeout=30) not in (hung_pid, None), log()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)
