"""echomq: a reliable, fair job queue for Python on Valkey.

Every transition runs on two executors with byte-identical replies: Lua scripts
(``Wire.SCRIPTS``, ``wire=5``) and the trafikey module's native ``EMQ.*`` commands
(``Wire.NATIVE``, ``wire=6``). By default (``Wire.AUTO``, ``wire="auto"``) a queue runs each
transition on its native command where the server has trafikey, on its script otherwise.

The names below are loaded on first use (PEP 562), so importing one module of the package
(``echomq.engine.transitions``, say) loads only what that module imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from echomq._lazy import lazy_face

if TYPE_CHECKING:
    from echomq.consumer.blocking import Consumer
    from echomq.consumer.cancelling import cancel_requested
    from echomq.consumer.directives import Done, Reject, RetryIn
    from echomq.engine.errors import (
        ArgumentError,
        EchoMQError,
        EvictionPolicyWarning,
        FatalServerError,
        FenceError,
        ItemError,
        KindError,
        LaneError,
        ResultDropped,
        StaleLease,
        TaskFailed,
        TrafikeyMissing,
        Wire6Unsupported,
    )
    from echomq.engine.events import Event, EventKind
    from echomq.engine.partial import PartialAdmission
    from echomq.engine.wire import Wire
    from echomq.queue.blocking import Ack, Job, JobOutcome, Queue, Release, Retry, Verdict
    from echomq.queue.ids import new_job_id
    from echomq.queue.limits import QueueLimits
    from echomq.tasks import (
        App,
        Backoff,
        Cancelled,
        RetryAfter,
        Task,
        TaskHandle,
        UnknownJob,
        WorkflowHandle,
        chain,
        chord,
        group,
    )
    from echomq.tasks.reporting import progress
    from echomq.tasks.steps import astep, step

# Each public name, and the module it lives in.
_HOMES = {
    "Consumer": "echomq.consumer.blocking",
    "cancel_requested": "echomq.consumer.cancelling",
    **dict.fromkeys(("Done", "Reject", "RetryIn"), "echomq.consumer.directives"),
    **dict.fromkeys(("ArgumentError", "EchoMQError", "EvictionPolicyWarning", "FatalServerError",
                     "FenceError", "ItemError", "KindError", "LaneError", "ResultDropped",
                     "StaleLease", "TaskFailed", "TrafikeyMissing", "Wire6Unsupported"),
                    "echomq.engine.errors"),
    **dict.fromkeys(("Event", "EventKind"), "echomq.engine.events"),
    "PartialAdmission": "echomq.engine.partial",
    "new_job_id": "echomq.queue.ids",
    "QueueLimits": "echomq.queue.limits",
    **dict.fromkeys(("Ack", "Job", "JobOutcome", "Queue", "Release", "Retry", "Verdict"),
                    "echomq.queue.blocking"),
    **dict.fromkeys(("App", "Backoff", "Cancelled", "RetryAfter", "Task", "TaskHandle",
                     "UnknownJob", "WorkflowHandle", "chain", "chord", "group"), "echomq.tasks"),
    "progress": "echomq.tasks.reporting",
    **dict.fromkeys(("step", "astep"), "echomq.tasks.steps"),
    "Wire": "echomq.engine.wire",
}

__all__ = [
    "Ack",
    "App",
    "ArgumentError",
    "Backoff",
    "Cancelled",
    "Consumer",
    "Done",
    "EchoMQError",
    "Event",
    "EventKind",
    "EvictionPolicyWarning",
    "FatalServerError",
    "FenceError",
    "ItemError",
    "Job",
    "JobOutcome",
    "KindError",
    "LaneError",
    "PartialAdmission",
    "Queue",
    "QueueLimits",
    "Reject",
    "Release",
    "ResultDropped",
    "Retry",
    "RetryAfter",
    "RetryIn",
    "StaleLease",
    "Task",
    "TaskFailed",
    "TaskHandle",
    "TrafikeyMissing",
    "UnknownJob",
    "Verdict",
    "Wire",
    "Wire6Unsupported",
    "WorkflowHandle",
    "astep",
    "cancel_requested",
    "chain",
    "chord",
    "group",
    "new_job_id",
    "progress",
    "step",
]


__getattr__, __dir__ = lazy_face(__name__, _HOMES, __all__)
