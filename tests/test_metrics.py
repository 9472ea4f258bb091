"""Prometheus metrics: the hooks and the plain-handler wrapper count each attempt by its ending,
the depth collector reads a real server, and a running worker serves the sum of its processes
on ``/metrics``."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from echomq import Job, Queue
from echomq.consumer.directives import Done, Reject, RetryIn
from echomq.embedded import free_port
from echomq.ops.metrics import PrometheusHooks, QueueDepths, instrument
from tests.obs_app import producer_of_charge
from tests.test_worker import Workers, wait_until, workers

__all__ = ["workers"]  # the fixture, shared with the worker tests

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def sample(name: str, **labels: str) -> float:
    """A sample of the default registry (this process's metrics); 0 when absent."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def job(attempt: int = 1) -> Job:
    return Job(id="JOB:x", payload=b"", attempt=attempt, fence=1)


def test_the_hooks_count_an_attempt_in_flight_then_by_its_ending() -> None:
    hooks, labels = PrometheusHooks(), {"queue": "hq", "task": "billing.charge"}
    enqueued_ms = int(time.time() * 1000) - 2_000
    with hooks.running("hq", "billing.charge", job(), {}, enqueued_ms) as record:
        assert sample("echomq_jobs_started_total", **labels) == 1
        assert sample("echomq_jobs_in_flight", **labels) == 1
        record.outcome, record.error = "dead", "ValueError: no card"
    assert sample("echomq_jobs_in_flight", **labels) == 0
    assert sample("echomq_jobs_dead_total", **labels) == 1
    assert sample("echomq_jobs_succeeded_total", **labels) == 0
    assert sample("echomq_job_run_seconds_count", **labels) == 1
    assert 2.0 <= sample("echomq_job_wait_seconds_sum", **labels) < 60
    assert sample("echomq_job_wait_seconds_bucket", le="1.0", **labels) == 0
    with hooks.running("hq", "billing.charge", job(attempt=2), {}, enqueued_ms):
        pass  # a retry: its wait is the back-off, not the queue's
    assert sample("echomq_job_wait_seconds_count", **labels) == 1
    assert sample("echomq_jobs_started_total", **labels) == 2


def test_an_exception_escaping_the_hooks_counts_a_retry() -> None:
    labels = {"queue": "hq2", "task": "t"}
    with pytest.raises(KeyError), PrometheusHooks().running("hq2", "t", job(), {}, None):
        raise KeyError("x")
    assert sample("echomq_jobs_retried_total", **labels) == 1
    assert sample("echomq_job_wait_seconds_count", **labels) == 0  # no enqueue time known
    assert sample("echomq_jobs_in_flight", **labels) == 0


def test_a_wrapped_plain_handler_is_counted_retried_then_dead_at_its_last_attempt() -> None:
    def charge(job: Job) -> str:
        if job.payload == b"bad":
            raise ValueError("bad")
        return "done"

    counted = instrument(charge, "pq", max_attempts=2)
    labels = {"queue": "pq", "task": "charge"}
    assert counted(job()) == "done"
    for attempt in (1, 2):
        with pytest.raises(ValueError):
            counted(Job(id="JOB:b", payload=b"bad", attempt=attempt, fence=attempt))
    assert sample("echomq_jobs_started_total", **labels) == 3
    assert sample("echomq_jobs_succeeded_total", **labels) == 1
    assert sample("echomq_jobs_retried_total", **labels) == 1
    assert sample("echomq_jobs_dead_total", **labels) == 1
    assert sample("echomq_job_run_seconds_count", **labels) == 3


def test_a_wrapped_handler_returning_a_directive_is_counted_by_it() -> None:
    def judge(job: Job) -> object:
        return {b"done": Done(b"r"), b"reject": Reject("bad input"),
                b"again": RetryIn(10, "busy", max_attempts=2)}[job.payload]

    counted = instrument(judge, "dq", max_attempts=5)
    for payload, attempt in ((b"done", 1), (b"reject", 1), (b"again", 1), (b"again", 2)):
        counted(Job(id="JOB:d", payload=payload, attempt=attempt, fence=attempt))
    labels = {"queue": "dq", "task": "judge"}
    assert sample("echomq_jobs_succeeded_total", **labels) == 1
    assert sample("echomq_jobs_retried_total", **labels) == 1  # RetryIn at attempt 1 of 2
    assert sample("echomq_jobs_dead_total", **labels) == 2  # Reject, RetryIn at its last


def test_a_wrapped_async_handler_is_timed_to_its_end() -> None:
    async def slow(job: Job) -> None:
        await asyncio.sleep(0.05)

    counted = instrument(slow, "aq", task="slow")
    asyncio.run(counted(job()))
    labels = {"queue": "aq", "task": "slow"}
    assert sample("echomq_jobs_succeeded_total", **labels) == 1
    assert sample("echomq_job_run_seconds_sum", **labels) >= 0.05


# depths -----------------------------------------------------------------------------------


def collected(collector: QueueDepths) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in collector.collect() for s in family.samples}


def depth(found: Samples, queue: str, state: str) -> float | None:
    return found.get(("echomq_queue_depth", frozenset({"queue": queue, "state": state}.items())))


def test_the_depth_collector_reads_every_registered_queue_by_state(conn: redis.Redis) -> None:
    queue = Queue(conn, "depths")
    queue.enqueue_many([(f"JOB:{n}", b"") for n in range(5)])
    queue.enqueue_many([("JOB:l1", b"", "tenant-a"), ("JOB:l2", b"", "tenant-b")])
    active = queue.claim()
    delayed, dead = queue.claim(), queue.claim()
    assert active and delayed and dead
    queue.retry(delayed, delay_ms=60_000)
    queue.retry(dead, max_attempts=1)
    Queue(conn, "drained").enqueue("JOB:d", b"")
    drained = Queue(conn, "drained").claim()
    assert drained is not None
    Queue(conn, "drained").ack(drained)

    found = collected(QueueDepths(conn))
    expected = {"pending": 2, "active": 1, "delayed": 1, "dead": 1, "lanes": 2}
    assert {state: depth(found, "depths", state) for state in expected} == expected
    assert {state: depth(found, "drained", state) for state in expected} == dict.fromkeys(
        expected, 0)  # a drained queue stays listed
    assert found[("echomq_server_up", frozenset())] == 1


def test_the_depth_collector_reports_a_server_it_cannot_reach_without_failing() -> None:
    found = collected(QueueDepths(redis.Redis(port=free_port(), socket_connect_timeout=1)))
    assert found == {("echomq_server_up", frozenset()): 0}


# a running worker -------------------------------------------------------------------------


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scraped(port: int, name: str, **labels: str) -> float:
    try:
        return scrape(port).get((name, frozenset(labels.items())), 0.0)
    except OSError:
        return -1.0  # not serving yet


def test_a_worker_serves_the_counts_of_all_its_processes_summed(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    port, queue = free_port(), Queue(conn, "scraped")
    supervisor = workers("scraped", "--concurrency", "2", "--prefetch", "1",
                         "--max-attempts", "2", "--retry-delay-ms", "10", "--metrics-port",
                         str(port), handler="tests.obs_handlers:work")
    labels = {"queue": "scraped", "task": "tests.obs_handlers:work"}

    def count(name: str) -> float:
        return scraped(port, name, **labels)

    # Two jobs held at once: one in each process, both in flight in one scrape.
    queue.enqueue_many([("JOB:h1", b"hold"), ("JOB:h2", b"hold")])
    assert wait_until(lambda: conn.llen("test:held") == 2, 20), supervisor.log()
    assert len(set(conn.lrange("test:held", 0, -1))) == 2  # two processes
    assert count("echomq_jobs_in_flight") == 2
    conn.rpush("test:release", "1", "1")
    queue.enqueue_many([*((f"JOB:ok{n}", b"ok") for n in range(5)), ("JOB:f", b"fail")])
    assert wait_until(lambda: count("echomq_jobs_dead_total") == 1
                      and count("echomq_jobs_succeeded_total") == 7, 20), supervisor.log()

    found = scrape(port)

    def value(name: str, **more: str) -> float:
        return found.get((name, frozenset({**labels, **more}.items())), 0.0)

    assert value("echomq_jobs_started_total") == 9  # 2 held, 5 ok, the failing one twice
    assert value("echomq_jobs_retried_total") == 1
    assert value("echomq_job_run_seconds_count") == 9
    assert value("echomq_jobs_in_flight") == 0
    assert found[("echomq_queue_depth", frozenset({"queue": "scraped",
                                                   "state": "dead"}.items()))] == 1
    assert found[("echomq_server_up", frozenset())] == 1
    assert supervisor.terminate(within=10) == 0


def test_a_killed_worker_process_leaves_the_in_flight_sum_but_not_the_counts(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    port, queue = free_port(), Queue(conn, "killed")
    supervisor = workers("killed", "--prefetch", "1", "--metrics-port", str(port),
                         handler="tests.obs_handlers:work")
    labels = {"queue": "killed", "task": "tests.obs_handlers:work"}
    queue.enqueue("JOB:ok", b"ok")
    assert wait_until(lambda: scraped(port, "echomq_jobs_succeeded_total", **labels) == 1,
                      20), supervisor.log()
    queue.enqueue("JOB:h", b"hold")
    assert wait_until(lambda: conn.llen("test:held") == 1, 20), supervisor.log()
    assert scraped(port, "echomq_jobs_in_flight", **labels) == 1
    os.kill(int(conn.lpop("test:held") or 0), signal.SIGKILL)
    assert wait_until(lambda: scraped(port, "echomq_jobs_in_flight", **labels) == 0, 20), \
        supervisor.log()
    assert scraped(port, "echomq_jobs_started_total", **labels) == 2
    assert scraped(port, "echomq_jobs_succeeded_total", **labels) == 1
    assert supervisor.terminate(within=10) == 0


def test_a_metrics_port_in_use_stops_the_worker_before_it_starts_saying_why(
        workers: Callable[..., Workers]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        supervisor = workers("q", "--metrics-port", str(port))
        assert supervisor.exit_code(within=20) == 1
    lines = supervisor.log().strip().splitlines()
    assert len(lines) == 1, lines
    assert f"cannot serve metrics on 127.0.0.1:{port}" in lines[0] and "in use" in lines[0]


def test_a_worker_of_an_app_counts_each_task_by_name_through_its_hooks(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    charge = producer_of_charge(conn)
    port = free_port()
    supervisor = workers("billing", "--concurrency", "2", "--metrics-port", str(port),
                         handler="tests.obs_app:app")
    handles = [charge.enqueue(cents) for cents in (100, 250, -5)]
    assert [handle.id for handle in handles]
    labels = {"queue": "billing", "task": "billing.charge"}
    assert wait_until(lambda: scraped(port, "echomq_jobs_dead_total", **labels) == 1
                      and scraped(port, "echomq_jobs_succeeded_total", **labels) == 2, 20), \
        supervisor.log()
    found = scrape(port)
    counted = {name: value for (name, labels_), value in found.items()
               if name.startswith("echomq_jobs_") and labels_ == frozenset(labels.items())}
    assert counted == {"echomq_jobs_started_total": 4, "echomq_jobs_succeeded_total": 2,
                       "echomq_jobs_retried_total": 1, "echomq_jobs_dead_total": 1,
                       "echomq_jobs_in_flight": 0}
    assert found[("echomq_job_wait_seconds_count", frozenset(labels.items()))] == 3
    # the App's hooks count it, not a wrapper of the handler as well
    assert not [key for key in found if ("task", "tests.obs_app:app") in key[1]]
    assert supervisor.terminate(within=10) == 0



def test_counted_app_adds_the_metrics_hooks_once_after_the_apps_own(conn: redis.Redis) -> None:
    from echomq import App
    from echomq.ops.metrics import counted_app
    from echomq.tasks.hooks import NoHooks

    class Own:
        """The App's own hooks (doing nothing)."""

        enqueuing, running = NoHooks.enqueuing, NoHooks.running

    bare = App(conn, "bare", check_policy=False)
    assert not bare.observed and counted_app(bare) and counted_app(bare)
    assert [type(hook) for hook in bare.hook_list()] == [PrometheusHooks] and bare.observed
    hooked = App(conn, "hooked", hooks=[Own()], check_policy=False)
    counted_app(hooked)
    assert [type(hook) for hook in hooked.hook_list()] == [Own, PrometheusHooks]
    assert not counted_app(object())  # nothing to add hooks to


@pytest.mark.parametrize("target", ["tests.tasks_app:plain_app", "tests.tasks_app:app"],
                         ids=["blocking", "asyncio"])
def test_a_worker_of_an_app_without_hooks_counts_its_tasks_all_the_same(
        conn: redis.Redis, workers: Callable[..., Workers], target: str) -> None:
    """``--metrics-port`` alone is enough: the worker adds the metrics' hooks to an App that
    has none, on either consumer (an App of plain tasks, or one with async tasks too)."""
    from echomq import App
    from tests import task_functions

    app_queue = "plain-tasks" if target.endswith("plain_app") else "tasks"
    producer = App(conn, app_queue, check_policy=False)
    add = producer.task(name="add", keep_result=True)(task_functions.add)
    port = free_port()
    supervisor = workers(None, "--metrics-port", str(port), handler=target)
    assert [add.enqueue(n, 1).result(timeout=20) for n in range(3)] == [1, 2, 3], \
        supervisor.log()
    labels = {"queue": app_queue, "task": "add"}
    assert wait_until(lambda: scraped(port, "echomq_jobs_succeeded_total", **labels) == 3,
                      20), supervisor.log()
    found = scrape(port)
    assert found[("echomq_jobs_started_total", frozenset(labels.items()))] == 3
    assert found[("echomq_job_run_seconds_count", frozenset(labels.items()))] == 3
    assert found[("echomq_job_wait_seconds_count", frozenset(labels.items()))] == 3
    assert "no task hooks" not in supervisor.log()
    assert supervisor.terminate(within=10) == 0


@pytest.mark.parametrize("run", ["handler", "async_handler"])
def test_a_job_no_task_of_the_app_can_run_is_counted_dead_under_a_fixed_label(
        conn: redis.Redis, run: str) -> None:
    from echomq import App
    from echomq.tasks.envelope import Envelope, encode

    app = App(conn, f"strays-{run}", hooks=[PrometheusHooks()], check_policy=False)
    app.task(name="known")(lambda: None)
    queue = app.queue.name
    unknown = {"queue": queue, "task": "<unknown>"}
    unreadable = {"queue": "<unknown>", "task": "<unknown>"}
    before = {name: sample(name, **unreadable)
              for name in ("echomq_jobs_started_total", "echomq_jobs_dead_total")}
    strays = [encode(Envelope(task=f"gone.v{n}", args=[], queue=queue), "json") for n in range(3)]
    app.queue.enqueue_many([(f"JOB:s{n}", payload) for n, payload in enumerate(strays)])
    app.queue.enqueue("JOB:garbled", b"not an envelope")

    for _ in range(4):
        claimed = app.queue.claim()
        assert claimed is not None
        outcome = getattr(app, run)(claimed)
        if run == "async_handler":
            outcome = asyncio.run(outcome)
        assert isinstance(outcome, Reject)

    # however many task names strays carry, they share one label: the series stay bounded
    assert sample("echomq_jobs_started_total", **unknown) == 3
    assert sample("echomq_jobs_dead_total", **unknown) == 3
    assert sample("echomq_jobs_in_flight", **unknown) == 0
    assert not [s for family in REGISTRY.collect() for s in family.samples
                if s.labels.get("task", "").startswith("gone.")]
    assert sample("echomq_jobs_started_total", **unreadable) == \
        before["echomq_jobs_started_total"] + 1
    assert sample("echomq_jobs_dead_total", **unreadable) == \
        before["echomq_jobs_dead_total"] + 1


def metrics_directories(parent: Path) -> list[Path]:
    return sorted(parent.glob("echomq-metrics-*"))


def test_the_metrics_directory_of_a_sigkilled_supervisor_is_removed_by_the_next_one(
        conn: redis.Redis, workers: Callable[..., Workers], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the supervisors' temporary directory
    port, queue = free_port(), Queue(conn, "orphaned")
    labels = {"queue": "orphaned", "task": "tests.obs_handlers:work"}
    first = workers("orphaned", "--metrics-port", str(port), handler="tests.obs_handlers:work")
    queue.enqueue("JOB:ok", b"ok")
    assert wait_until(lambda: scraped(port, "echomq_jobs_succeeded_total", **labels) == 1,
                      20), first.log()
    left = metrics_directories(scratch)
    assert len(left) == 1 and any(left[0].iterdir())  # the worker wrote its counts there
    first.process.kill()
    first.process.wait()
    assert wait_until(lambda: not first.group(), 20)  # its workers ended with it
    assert metrics_directories(scratch) == left  # nothing removed it

    port = free_port()
    second = workers("orphaned", "--metrics-port", str(port),
                     handler="tests.obs_handlers:work")
    assert wait_until(lambda: scraped(port, "echomq_server_up") == 1, 20), second.log()
    now = metrics_directories(scratch)
    assert len(now) == 1 and now != left
    assert second.terminate(within=10) == 0
    assert metrics_directories(scratch) == []
