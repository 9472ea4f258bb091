"""Prometheus metrics of echomq workers: what ran, how long it took, what waits on the server.

Per queue and task (labels ``queue``, ``task``), counted in the process that runs the job:

- ``echomq_jobs_started_total``, ``echomq_jobs_succeeded_total``, ``echomq_jobs_retried_total``,
  ``echomq_jobs_dead_total``, ``echomq_jobs_cancelled_total``: attempts begun, and how each ended
  (retried: failed with attempts left; dead: failed for good; cancelled: its job was cancelled
  while it ran);
- ``echomq_job_run_seconds``: a histogram of how long an attempt ran;
- ``echomq_job_wait_seconds``: a histogram of enqueue to the start of a job's first attempt
  (tasks only: a plain job does not carry its enqueue time), by the worker's clock against the
  producer's; a delay asked at enqueue is part of it;
- ``echomq_jobs_in_flight``: attempts running now.

Per queue and state, read from the server at scrape time by ``QueueDepths``:
``echomq_queue_depth{queue, state}`` for pending, active, delayed, dead and lanes (the jobs
waiting in the queue's lanes), ``echomq_jobs_expired_total{queue}`` (the jobs a claim found past
their deadline and ended dead, ``expired``: counted by the server, as no worker ran them) and
``echomq_server_up`` (0 when the last read failed).

``PrometheusHooks`` counts a task's attempts (the task layer's hooks); ``instrument`` wraps a plain
handler. ``echomq worker --metrics-port P`` serves them (counting an App's tasks with
``PrometheusHooks`` added to its hooks when it has none, a plain handler wrapped): its worker
processes write their counts to files in a directory of the supervisor's (prometheus_client's
multiprocess mode, so a scrape sums every process, including those that were replaced), and the
supervisor serves the sum with the depths on ``/metrics``. In one process of your own,
``prometheus_client.start_http_server`` serves the default registry, where these metrics live.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from echomq.consumer.directives import Reject, RetryIn
from echomq.consumer.loop import error_text
from echomq.engine.clients import twins
from echomq.engine.errors import MetricsUnavailable
from echomq.ops.admin import queue_names
from echomq.ops.piddirs import pid_directory
from echomq.queue.blocking import Job, recorded_queue
from echomq.queue.connection import redis_from_url
from echomq.tasks.hooks import (
    CANCELLED,
    DEAD,
    RETRIED,
    SUCCEEDED,
    RunRecord,
    cancelled_wins,
    failures_recorded,
)

__all__ = ["PrometheusHooks", "QueueDepths", "counted_app", "instrument", "serving"]

log = logging.getLogger("echomq")

LABELS = ("queue", "task")
DEPTH_STATES = ("pending", "active", "delayed", "dead", "lanes")
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
               900.0)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
                14_400.0, 86_400.0)

STARTED = Counter("echomq_jobs_started", "Attempts begun", LABELS)
SUCCEEDED_TOTAL = Counter("echomq_jobs_succeeded", "Attempts that succeeded", LABELS)
RETRIED_TOTAL = Counter("echomq_jobs_retried", "Attempts that failed with attempts left", LABELS)
DEAD_TOTAL = Counter("echomq_jobs_dead", "Attempts that failed for good: the job is dead", LABELS)
RUN_SECONDS = Histogram("echomq_job_run_seconds", "How long an attempt ran", LABELS,
                        buckets=RUN_BUCKETS)
WAIT_SECONDS = Histogram("echomq_job_wait_seconds", "From enqueue to the start of an attempt",
                         LABELS, buckets=WAIT_BUCKETS)
IN_FLIGHT = Gauge("echomq_jobs_in_flight", "Attempts running now", LABELS,
                  multiprocess_mode="livesum")
CANCELLED_TOTAL = Counter("echomq_jobs_cancelled",
                          "Attempts whose job was cancelled while they ran", LABELS)
_ENDINGS = {SUCCEEDED: SUCCEEDED_TOTAL, RETRIED: RETRIED_TOTAL, DEAD: DEAD_TOTAL,
            CANCELLED: CANCELLED_TOTAL}


class PrometheusHooks:
    """Task hooks that count each attempt of a task and time it (the module's metrics)."""

    def enqueuing(self, queue: str, task: str,
                  headers: dict[str, str]) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def running(self, queue: str, task: str, job: Job, headers: Mapping[str, str],
                enqueued_ms: int | None) -> Iterator[RunRecord]:
        """Count the attempt started and in flight; on exit, its run time and its ending. An
        exception that escapes the block is a failed attempt, retried unless the record says
        otherwise."""
        labels = (queue, task)
        STARTED.labels(*labels).inc()
        if enqueued_ms is not None and job.attempt == 1:  # a retry's wait is its back-off
            WAIT_SECONDS.labels(*labels).observe(max(0.0, time.time() - enqueued_ms / 1000))
        record = RunRecord()
        started = time.perf_counter()
        in_flight = IN_FLIGHT.labels(*labels)
        in_flight.inc()
        try:
            with failures_recorded(record):
                yield record
        finally:
            in_flight.dec()
            RUN_SECONDS.labels(*labels).observe(time.perf_counter() - started)
            _ENDINGS.get(record.outcome, RETRIED_TOTAL).labels(*labels).inc()


_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def instrument(handler: _Handler, queue: str, *, task: str | None = None,
               max_attempts: int | None = None) -> _Handler:
    """``handler`` (plain or ``async def``) counted and timed like a task, labelled ``queue``
    and ``task`` (default: the handler's name). A raise, or a returned ``RetryIn``, is
    retried, or dead when the job's attempt reached ``max_attempts`` (the directive's, else
    this one; None: never counted dead); a returned ``Reject`` is dead."""
    label: str = task or getattr(handler, "__name__", None) or type(handler).__name__
    hooks = PrometheusHooks()

    def returned(job: Job, value: object, record: RunRecord) -> object:
        record.outcome, record.error = _judged(job, value, max_attempts)
        cancelled_wins(record)
        return value

    def raised(job: Job, exc: BaseException, record: RunRecord) -> None:
        dead = max_attempts is not None and job.attempt >= max_attempts
        record.outcome, record.error = DEAD if dead else RETRIED, error_text(exc)
        cancelled_wins(record)

    if inspect.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def counted_async(job: Job) -> object:
            with hooks.running(queue, label, job, {}, None) as record:
                try:
                    return returned(job, await handler(job), record)
                except BaseException as exc:
                    raised(job, exc, record)
                    raise
        return counted_async  # type: ignore[return-value]

    @functools.wraps(handler)
    def counted(job: Job) -> object:
        with hooks.running(queue, label, job, {}, None) as record:
            try:
                return returned(job, handler(job), record)
            except BaseException as exc:
                raised(job, exc, record)
                raise
    return counted  # type: ignore[return-value]


def _judged(job: Job, value: object, max_attempts: int | None) -> tuple[str, str | None]:
    """How a handler's return ends its attempt: a directive as the consumer settles it (a
    ``RetryIn`` at its last attempt is dead), anything else succeeded."""
    if isinstance(value, Reject):
        return DEAD, value.error
    if isinstance(value, RetryIn):
        limit = value.max_attempts if value.max_attempts is not None else max_attempts
        return (DEAD if limit is not None and job.attempt >= limit else RETRIED), value.error
    return SUCCEEDED, None


def counted_app(app: Any) -> bool:
    """Make ``app`` (an ``echomq.App``) count its tasks' attempts: add ``PrometheusHooks`` to
    its hooks unless it has them already. False for a target with no hooks to add to."""
    hook_list, add_hooks = getattr(app, "hook_list", None), getattr(app, "add_hooks", None)
    if not callable(hook_list) or not callable(add_hooks):
        return False
    if not any(isinstance(hook, PrometheusHooks) for hook in hook_list()):
        add_hooks(PrometheusHooks())
    return True


# depths -----------------------------------------------------------------------------------


class QueueDepths(Collector):
    """Depths of queues read from the server at each scrape: ``queues``, or (None) every queue in
    the server's registry of queues. Costs one SMEMBERS and two pipelined round trips per queue
    (``Queue.counts``), whatever the number of jobs. A failed read is logged and reported as
    ``echomq_server_up 0``, never as a failed scrape."""

    def __init__(self, conn: Any, queues: Iterable[str] | None = None) -> None:
        self.conn = conn
        self.queues = None if queues is None else list(queues)

    def describe(self) -> Iterable[Metric]:
        # names only: registering reads nothing
        return [_depth_family(), _up_family(), _expired_family()]

    def collect(self) -> Iterable[Metric]:
        depths, up, expired = _depth_family(), _up_family(), _expired_family()
        try:
            for name, counts in self.read().items():
                for state in DEPTH_STATES:
                    depths.add_metric([name, state], counts[state])
                expired.add_metric([name], counts["expired"])
        except twins(RedisError) as exc:
            log.warning("queue depths not read: %s", exc)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [depths, up, expired]

    def read(self) -> dict[str, dict[str, int]]:
        """Each queue's counts by state, and the jobs it ended expired, by queue name."""
        names = queue_names(self.conn) if self.queues is None else self.queues
        found = {}
        for name in names:
            queue = recorded_queue(self.conn, name, check_policy=False)
            found[name] = {**queue.counts(), "expired": queue.expired_count()}
        return found


def _depth_family() -> GaugeMetricFamily:
    return GaugeMetricFamily("echomq_queue_depth", "Jobs in a queue by state (lanes: waiting in "
                             "the queue's lanes)", labels=["queue", "state"])


def _expired_family() -> CounterMetricFamily:
    return CounterMetricFamily("echomq_jobs_expired", "Jobs a claim found past their deadline "
                               "and ended dead with the error expired", labels=["queue"])


def _up_family() -> GaugeMetricFamily:
    return GaugeMetricFamily("echomq_server_up", "1 when the last scrape read the server's "
                             "queue depths, 0 when it failed")


# serving a supervisor's workers -----------------------------------------------------------


def multiprocess_registry(directory: str, depths: Collector | None = None) -> CollectorRegistry:
    """A registry summing the metrics that processes wrote to ``directory``, with ``depths``."""
    registry = CollectorRegistry(auto_describe=True)
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    if depths is not None:
        registry.register(depths)
    return registry


@contextlib.contextmanager
def serving(url: str | Any, port: int, addr: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``/metrics`` on ``addr:port`` while the block runs: the sum of what the worker
    processes write to the directory yielded (each must have ``PROMETHEUS_MULTIPROC_DIR`` set
    to it before it imports prometheus_client, which picks its storage then), and the depths
    of the server's queues. The directory is new and is removed after; one left by a process
    killed outright is removed by the next ``serving`` (``echomq.ops.piddirs``). ``url``: the
    server's URL, or a client to it (closed after)."""
    directory = pid_directory("echomq-metrics-")
    conn = redis_from_url(url) if isinstance(url, str) else url  # or a client, closed after
    try:
        server, thread = _listen(addr, port, multiprocess_registry(directory, QueueDepths(conn)))
        log.info("metrics on http://%s:%d/metrics", addr, port)
        try:
            yield directory
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
    finally:
        conn.close()
        shutil.rmtree(directory, ignore_errors=True)


def _listen(addr: str, port: int, registry: CollectorRegistry) -> tuple[Any, Any]:
    try:
        return start_http_server(port, addr, registry)
    except OSError as exc:
        raise MetricsUnavailable(f"cannot serve metrics on {addr}:{port}: "
                                 f"{exc.strerror or exc}") from exc


def process_ended(pid: int, directory: str) -> None:
    """Drop an ended process's in-flight gauge from the sum (its counts stay)."""
    multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]

