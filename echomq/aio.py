"""The asyncio face of echomq: ``Queue`` on ``redis.asyncio`` or ``valkey.asyncio`` and the
``Consumer`` that serves it, with the same names, calls and semantics as ``echomq.Queue`` and
``echomq.Consumer``."""

from __future__ import annotations

from echomq.consumer.aio import Consumer
from echomq.engine.async_executors import AsyncExecutor, async_executor_for
from echomq.engine.calls import Job, Verdict
from echomq.engine.events import Event, EventKind
from echomq.queue.aio import Queue

__all__ = ["AsyncExecutor", "Consumer", "Event", "EventKind", "Job", "Queue", "Verdict",
           "async_executor_for"]
