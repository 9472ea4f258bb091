"""The queue: ``Queue`` (blocking) and ``echomq.aio.Queue`` (asyncio) over the engine's calls, with
lanes, job ids, the wake and wait machinery and the connections workers use.

Names load on first use (PEP 562): ``from echomq.queue import Queue``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from echomq._lazy import lazy_face

if TYPE_CHECKING:
    from echomq.queue.blocking import Ack, Job, JobOutcome, Queue, Release, Retry, Verdict

__all__ = ["Ack", "Job", "JobOutcome", "Queue", "Release", "Retry", "Verdict"]

__getattr__, __dir__ = lazy_face(__name__, dict.fromkeys(__all__, "echomq.queue.blocking"), __all__)
