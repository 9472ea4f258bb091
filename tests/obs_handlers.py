"""Handlers the metrics and tracing tests run inside worker processes.

``work``: the payload says what the job does: ``b"ok"`` returns; ``b"fail"`` raises;
``b"hold"`` notes its process in ``test:held`` (a list), then blocks until the test pushes to
``test:release`` (one token per held job).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from echomq import Job
from echomq.ops.tracing import TracingHooks
from tests.handlers import conn


def work(job: Job) -> None:
    if job.payload == b"fail":
        raise RuntimeError(f"{job.id} failed on purpose")
    if job.payload == b"hold":
        conn().rpush("test:held", os.getpid())
        if conn().blpop(["test:release"], timeout=60) is None:
            raise TimeoutError("never released")


# traces -----------------------------------------------------------------------------------
# A worker's spans go to the file named by ECHOMQ_TEST_SPANS, one JSON object a line, for the
# test process to read.


class FileSpanExporter(SpanExporter):
    """Writes each finished span as a line of JSON: name, kind, ids, status, attributes, events."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as sink:
            for span in spans:
                sink.write(json.dumps(span_record(span)) + "\n")
        return SpanExportResult.SUCCESS


def span_record(span: ReadableSpan) -> dict[str, Any]:
    context, parent = span.get_span_context(), span.parent
    return {"name": span.name, "kind": span.kind.name, "trace_id": context.trace_id,
            "span_id": context.span_id, "parent_id": parent.span_id if parent else None,
            "status": span.status.status_code.name, "status_text": span.status.description,
            "attributes": dict(span.attributes or {}),
            "events": [{"name": event.name, **dict(event.attributes or {})}
                       for event in span.events]}


def worker_tracer() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(
        FileSpanExporter(os.environ.get("ECHOMQ_TEST_SPANS", os.devnull))))
    return provider


TRACING = TracingHooks(worker_tracer())


def traced(job: Job) -> None:
    """A task layer in miniature: the payload is JSON ``{task, headers, enqueued_ms, fail}``;
    the attempt runs in the hooks' block, failed (dead) when ``fail`` says so."""
    envelope = json.loads(job.payload)
    with TRACING.running(job.lane or "traced", envelope["task"], job, envelope["headers"],
                         envelope["enqueued_ms"]) as record:
        if envelope["fail"]:
            record.outcome, record.error = "dead", "RuntimeError: no card\n  File \"t.py\", line 1"

