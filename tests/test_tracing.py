"""OpenTelemetry: the enqueue's producer span, its context carried in the job's headers, and the
attempt's consumer span its child, in this process and across a real worker process."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from echomq import Job, Queue
from echomq.ops.tracing import TracingHooks
from tests.json_lines import written_records
from tests.obs_app import producer_of_charge
from tests.test_worker import Workers, wait_until, workers

__all__ = ["workers"]  # the fixture, shared with the worker tests


@pytest.fixture
def exported() -> Iterator[tuple[TracingHooks, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield TracingHooks(provider), exporter
    provider.shutdown()


def job(attempt: int = 1, lane: str | None = None) -> Job:
    return Job(id="JOB:t", payload=b"", attempt=attempt, lane=lane, fence=1)


def by_kind(spans: tuple[ReadableSpan, ...], kind: SpanKind) -> ReadableSpan:
    [found] = [span for span in spans if span.kind == kind]
    return found


def test_the_attempt_span_is_a_child_of_the_enqueue_span_through_the_headers(
        exported: tuple[TracingHooks, InMemorySpanExporter]) -> None:
    hooks, exporter = exported
    headers: dict[str, str] = {}
    with hooks.enqueuing("mail", "send_welcome", headers):
        pass
    assert "traceparent" in headers
    with hooks.running("mail", "send_welcome", job(lane="tenant-a"), headers, 0) as record:
        record.outcome = "succeeded"
    spans = exporter.get_finished_spans()
    producer, consumer = by_kind(spans, SpanKind.PRODUCER), by_kind(spans, SpanKind.CONSUMER)
    assert producer.name == "send send_welcome" and consumer.name == "process send_welcome"
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.context.trace_id == producer.context.trace_id
    assert dict(consumer.attributes or {}) == {
        "messaging.system": "echomq", "messaging.destination.name": "mail",
        "messaging.operation.type": "process", "echomq.task": "send_welcome",
        "messaging.message.id": "JOB:t", "echomq.attempt": 1, "echomq.lane": "tenant-a",
        "echomq.outcome": "succeeded"}
    assert consumer.status.status_code == StatusCode.UNSET


def test_a_failed_attempt_is_an_error_with_its_exception_recorded(
        exported: tuple[TracingHooks, InMemorySpanExporter]) -> None:
    hooks, exporter = exported
    with hooks.running("mail", "t", job(2), {}, 0) as record:
        record.outcome, record.error = "retried", "ValueError: bad address\n  File \"m.py\""
    [span] = exporter.get_finished_spans()
    assert span.parent is None  # no context in the headers: a root span
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "ValueError: bad address"
    [event] = span.events
    assert event.name == "exception" and dict(event.attributes or {}) == {
        "exception.type": "ValueError", "exception.message": "bad address",
        "exception.stacktrace": "  File \"m.py\""}
    assert (span.attributes or {})["echomq.outcome"] == "retried"


def test_an_exception_escaping_the_attempt_is_recorded(
        exported: tuple[TracingHooks, InMemorySpanExporter]) -> None:
    hooks, exporter = exported
    with pytest.raises(KeyboardInterrupt), hooks.running("mail", "t", job(), {}, 0):
        raise KeyboardInterrupt
    [span] = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    [event] = span.events
    assert (event.attributes or {})["exception.type"] == "KeyboardInterrupt"
    assert "raise KeyboardInterrupt" in str((event.attributes or {})["exception.stacktrace"])


@pytest.fixture
def spans_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the worker processes this test starts write their consumer spans to."""
    path = tmp_path / "spans.jsonl"
    monkeypatch.setenv("ECHOMQ_TEST_SPANS", str(path))
    return path


def worker_spans(supervisor: Workers, spans_file: Path, count: int) -> list[dict[str, Any]]:
    """The spans the worker processes wrote, once there are ``count``; the workers stopped
    cleanly after."""
    assert wait_until(lambda: len(written_records(spans_file)) == count, 20), supervisor.log()
    assert supervisor.terminate(within=10) == 0
    return written_records(spans_file)


def test_a_worker_process_continues_the_trace_of_the_enqueue(
        conn: redis.Redis, workers: Callable[..., Workers], spans_file: Path,
        exported: tuple[TracingHooks, InMemorySpanExporter]) -> None:
    hooks, exporter = exported
    queue = Queue(conn, "traced")
    for job_id, fail in (("JOB:ok", False), ("JOB:bad", True)):
        headers: dict[str, str] = {}
        with hooks.enqueuing("traced", f"task-{job_id}", headers):
            envelope = {"task": f"task-{job_id}", "headers": headers, "fail": fail,
                        "enqueued_ms": int(time.time() * 1000)}
            queue.enqueue(job_id, json.dumps(envelope))
    supervisor = workers("traced", handler="tests.obs_handlers:traced")
    written = worker_spans(supervisor, spans_file, 2)

    producers = {span.name: span for span in exporter.get_finished_spans()}
    consumers = {span["name"]: span for span in written}
    for job_id in ("JOB:ok", "JOB:bad"):
        producer, consumer = producers[f"send task-{job_id}"], consumers[f"process task-{job_id}"]
        assert consumer["kind"] == "CONSUMER"
        assert consumer["trace_id"] == producer.context.trace_id
        assert consumer["parent_id"] == producer.context.span_id
    assert consumers["process task-JOB:ok"]["status"] == "UNSET"
    assert consumers["process task-JOB:bad"]["status"] == "ERROR"
    assert consumers["process task-JOB:bad"]["events"][0]["exception.message"] == "no card"


def test_a_task_enqueued_by_an_app_is_traced_into_its_worker_process(
        conn: redis.Redis, workers: Callable[..., Workers], spans_file: Path,
        exported: tuple[TracingHooks, InMemorySpanExporter]) -> None:
    hooks, exporter = exported
    charge = producer_of_charge(conn, [hooks])
    ok, bad = charge.enqueue(100), charge.enqueue(-5)
    supervisor = workers("billing", handler="tests.obs_app:app")
    written = worker_spans(supervisor, spans_file, 3)

    sent = {span.context.span_id: span for span in exporter.get_finished_spans()}
    assert {span.name for span in sent.values()} == {"send billing.charge"}
    attempts = {(span["attributes"]["messaging.message.id"], span["attributes"]["echomq.attempt"]):
                span for span in written}
    assert set(attempts) == {(ok.id, 1), (bad.id, 1), (bad.id, 2)}
    for span in attempts.values():
        parent = sent[span["parent_id"]]  # each attempt a child of its enqueue
        assert span["trace_id"] == parent.context.trace_id
        assert span["name"] == "process billing.charge" and span["kind"] == "CONSUMER"
    assert attempts[(ok.id, 1)]["parent_id"] != attempts[(bad.id, 1)]["parent_id"]
    assert attempts[(bad.id, 1)]["parent_id"] == attempts[(bad.id, 2)]["parent_id"]
    assert [attempts[key]["attributes"]["echomq.outcome"] for key in sorted(attempts)] == \
        sorted_outcomes(ok.id, bad.id)
    failed = attempts[(bad.id, 2)]
    assert failed["status"] == "ERROR"
    assert failed["events"][0]["exception.type"] == "ValueError"
    assert failed["events"][0]["exception.message"] == "cannot charge -5 cents"


def sorted_outcomes(ok: str, bad: str) -> list[str]:
    outcomes = {(ok, 1): "succeeded", (bad, 1): "retried", (bad, 2): "dead"}
    return [outcomes[key] for key in sorted(outcomes)]
