"""OpenTelemetry traces of tasks: a producer span around each enqueue, a consumer span around
each attempt, the second a child of the first although they run in different processes.

``TracingHooks`` are task hooks (``App(..., hooks=[TracingHooks()])``). At enqueue, a span
``send <task>`` (kind PRODUCER) is started and its context written into the job's envelope
headers by the configured propagator (W3C ``traceparent``/``tracestate`` by default). In the
worker, the attempt runs inside a span ``process <task>`` (kind CONSUMER) whose parent is the
context read back from those headers; a failed attempt (as the task layer records it, or an
exception escaping the attempt) sets the span's status to ERROR with the error's first line and
records it as an ``exception`` event. The spans carry the OpenTelemetry
messaging attributes (``messaging.system`` "echomq", ``messaging.destination.name`` the queue,
``messaging.operation.type``, ``messaging.message.id`` the job id) and ``echomq.task``,
``echomq.attempt``, ``echomq.lane`` and ``echomq.outcome``.

Needs the ``otel`` extra (``pip install echomq[otel]``). The spans go to the tracer provider
given, else the global one: configure an SDK ``TracerProvider`` with an exporter in every
producer and worker process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from echomq.queue.blocking import Job
from echomq.tasks.hooks import RunRecord, failures_recorded

__all__ = ["TracingHooks"]

SYSTEM = "echomq"


class TracingHooks:
    """Task hooks that trace each enqueue and each attempt, the attempt a child of its enqueue."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("echomq", tracer_provider=tracer_provider)

    @contextlib.contextmanager
    def enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> Iterator[None]:
        """A producer span around the enqueue; its context goes into ``headers``."""
        with self.tracer.start_as_current_span(f"send {task}", kind=SpanKind.PRODUCER,
                                               attributes=_attributes(queue, task, "send")):
            propagate.inject(headers)
            yield

    @contextlib.contextmanager
    def running(self, queue: str, task: str, job: Job, headers: Mapping[str, str],
                enqueued_ms: int | None) -> Iterator[RunRecord]:
        """A consumer span around the attempt, a child of the context in ``headers`` (a root
        span when they carry none); ends with the attempt's outcome and error."""
        attributes = {**_attributes(queue, task, "process"), "messaging.message.id": job.id,
                      "echomq.attempt": job.attempt}
        if job.lane is not None:
            attributes["echomq.lane"] = job.lane
        record = RunRecord()
        # Failures are recorded from the record alone, so an exception is not recorded twice.
        with self.tracer.start_as_current_span(
                f"process {task}", context=propagate.extract(dict(headers)),
                kind=SpanKind.CONSUMER, attributes=attributes, record_exception=False,
                set_status_on_exception=False) as span:
            try:
                with failures_recorded(record):
                    yield record
            finally:
                _ended(span, record)


def _attributes(queue: str, task: str, operation: str) -> dict[str, AttributeValue]:
    return {"messaging.system": SYSTEM, "messaging.destination.name": queue,
            "messaging.operation.type": operation, "echomq.task": task}


def _ended(span: Span, record: RunRecord) -> None:
    """Mark the span with how the attempt ended; a failure as an ERROR status and an
    ``exception`` event (type, message and the frames the error text keeps)."""
    span.set_attribute("echomq.outcome", record.outcome)
    if record.error is None:
        return
    head, _, stack = record.error.partition("\n")
    kind, _, message = head.partition(": ")  # "Type: message", or "Type" alone
    span.set_status(Status(StatusCode.ERROR, head))
    span.add_event("exception", {"exception.type": kind, "exception.message": message,
                                 "exception.stacktrace": stack})
