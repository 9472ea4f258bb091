"""``echomq worker`` over several queues and Apps, as real supervised processes: ``--queue``
repeated serves in priority order and the registry shows every queue served; an App target
serves its own queues, hears ``worker_started``/``worker_stopping``, and an all-async App runs
``--async-concurrency`` jobs in flight per process, never more."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from echomq import Queue
from echomq.consumer.roster import counts_by_queue, live_workers
from tests.test_worker import Workers, wait_until, workers  # noqa: F401


def test_a_worker_serves_two_queues_in_priority_order(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:  # noqa: F811
    high, low = Queue(conn, "high"), Queue(conn, "low")
    low.enqueue_many([(f"JOB:l{n:02}", b"low") for n in range(20)])
    high.enqueue_many([(f"JOB:h{n:02}", b"high") for n in range(10)])
    supervisor = workers("high", "--queue", "low", handler="tests.worker_apps:record")
    assert wait_until(lambda: conn.llen("test:order") == 30, 20), supervisor.log()
    assert conn.lrange("test:order", 0, -1) == [b"high"] * 10 + [b"low"] * 20
    found = live_workers(conn)
    assert [worker.queues for worker in found] == [["high", "low"]]
    assert counts_by_queue(found) == {"high": 1, "low": 1}
    assert supervisor.terminate(within=6) == 0


def test_an_app_serves_its_own_queues_and_hears_its_workers_start_and_stop(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:  # noqa: F811
    high, low = Queue(conn, "high"), Queue(conn, "low")
    low.enqueue_many([(f"JOB:l{n}", b"low") for n in range(3)])
    high.enqueue_many([(f"JOB:h{n}", b"high") for n in range(3)])
    supervisor = workers(None, handler="tests.worker_apps:sync_app")
    assert wait_until(lambda: conn.llen("test:order") == 6, 20), supervisor.log()
    assert conn.lrange("test:order", 0, -1) == [b"high"] * 3 + [b"low"] * 3
    assert wait_until(lambda: conn.hlen("test:acked") == 6, 5), supervisor.log()
    assert high.outcome("JOB:h0").result == low.outcome("JOB:l2").result == b"kept"
    assert supervisor.terminate(within=6) == 0
    hooks = [entry.decode().split(" ") for entry in conn.lrange("test:hooks", 0, -1)]
    assert [hook[0] for hook in hooks] == ["started", "stopping"]
    assert hooks[0][2] == "high,low" and hooks[0][1] == hooks[1][1]


def test_an_all_async_app_runs_its_jobs_in_flight_per_process(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:  # noqa: F811
    queue = Queue(conn, "work")
    queue.enqueue_many([(f"JOB:{n}", b"") for n in range(8)])
    supervisor = workers(None, "--async-concurrency", "3",
                         handler="tests.worker_apps:async_app")
    assert wait_until(lambda: conn.get("test:inflight") == b"3", 20), supervisor.log()
    # Three in flight, and the next five wait for a place: none of them starts.
    assert conn.llen("test:done") == 0 and queue.counts()["pending"] + \
        queue.counts()["active"] == 8
    conn.rpush("test:release", *[1] * 8)
    assert wait_until(lambda: conn.llen("test:done") == 8, 20), supervisor.log()
    assert conn.get("test:peak") == b"3"
    assert supervisor.terminate(within=6) == 0
    assert "concurrency 3" in supervisor.log()


def test_a_handler_target_needs_a_queue() -> None:
    from click.testing import CliRunner

    from echomq.cli.main import main

    result = CliRunner().invoke(main, ["worker", "tests.worker_apps:record"])
    assert result.exit_code == 2 and "--queue" in result.output


def test_the_registry_lists_every_queue_a_worker_serves(conn: redis.Redis) -> None:
    from echomq.consumer.presence import Announcer

    announcer = Announcer(conn, ["high", "low"], 5)
    announcer.beat()
    conn.hset("emq:worker:old:1:1", mapping={"host": "old", "pid": 1, "queue": "low",
                                             "wire": 5, "beat_ms": 1})
    conn.sadd("emq:workers", "emq:worker:old:1:1")
    found = {worker.host: worker for worker in live_workers(conn)}
    assert found["old"].queues == ["low"]  # a record written before it had a list
    mine = next(worker for host, worker in found.items() if host != "old")
    assert mine.queue == "high" and mine.queues == ["high", "low"]
    assert counts_by_queue(list(found.values())) == {"high": 1, "low": 2}


def test_an_apps_queues_lend_the_worker_their_retention_and_attempts(valkey: object) -> None:
    from echomq.embedded import EmbeddedValkey
    from echomq.worker import WorkerSpec, build_consumer
    from tests.worker_apps import SyncApp

    assert isinstance(valkey, EmbeddedValkey)
    app = SyncApp()
    app.queues = {"high": Queue(valkey.client(), "high", retention_ms=1_234, max_attempts=2),
                  "low": Queue(valkey.client(), "low")}
    for limit, expected in ((None, 2), (7, 7)):
        spec = WorkerSpec(handler="tests.worker_apps:sync_app", queue=("high", "low"),
                          url=valkey.url, max_attempts=limit)
        consumer = build_consumer(spec, target=app)
        try:
            high = consumer.queues[0]
            assert (high.retention_ms, high.max_attempts) == (1_234, expected)
            assert consumer.queues[1].name == "low"
        finally:
            consumer.close()
            consumer.queue.conn.close()


@pytest.mark.parametrize(("target", "queue", "said"), [
    ("tests.worker_apps:record", ["--queue", "q"], "a handler"),
    ("tests.worker_apps:sync_app", [], "an App with no async def task"),
])
def test_async_concurrency_is_refused_for_a_target_the_asyncio_consumer_does_not_run(
        target: str, queue: list[str], said: str) -> None:
    from click.testing import CliRunner

    from echomq.cli.main import main

    result = CliRunner().invoke(main, ["worker", target, *queue, "--async-concurrency", "4",
                                       "--url", "redis://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("error: --async-concurrency") and said in lines[0]
    assert lines[1].startswith("hint: ") and "--concurrency" in lines[1]


def test_an_app_hears_its_worker_stop_when_a_job_overran_and_the_process_is_replaced(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:  # noqa: F811
    from echomq import App

    producer = App(conn, "stopping", check_policy=False)
    hang = producer.task(name="hang")(lambda: None)
    supervisor = workers(None, "--time-limit", "0.3", handler="tests.stopping_app:app")
    assert wait_until(lambda: conn.llen("test:hooks") == 1, 20), supervisor.log()
    handle = hang.enqueue()
    assert wait_until(lambda: conn.llen("test:hooks") == 3, 20), supervisor.log()
    hung = int(conn.lindex("test:hung", 0) or 0)
    hooks = [entry.decode() for entry in conn.lrange("test:hooks", 0, -1)]
    assert hooks[:2] == [f"started {hung} periodic=True", f"stopping {hung} periodic=False"]
    assert hooks[2].startswith("started ") and hooks[2] != hooks[0]  # its replacement
    outcome = handle.outcome()
    assert outcome.state == "dead" and "time limit" in (outcome.error or "")
    assert supervisor.terminate(within=6) == 0
