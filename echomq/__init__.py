"""echomq: a reliable, fair job queue for Python on Valkey.

Every transition runs on two executors with byte-identical replies: Lua scripts (``wire=5``)
and the trafikey module's native ``EMQ.*`` commands (``wire=6``).
"""

from echomq.consumer import Consumer
from echomq.directives import Done, Reject, RetryIn
from echomq.errors import (
    ArgumentError,
    EchoMQError,
    EvictionPolicyWarning,
    FatalServerError,
    FenceError,
    ItemError,
    KindError,
    LaneError,
    StaleLease,
    TaskFailed,
    TrafikeyMissing,
    Wire6Unsupported,
)
from echomq.ids import new_job_id
from echomq.queue import Ack, Job, JobOutcome, Queue, Release, Retry, Verdict
from echomq.tasks import App, Backoff, RetryAfter, Task, TaskHandle

__all__ = [
    "Ack",
    "App",
    "ArgumentError",
    "Backoff",
    "Consumer",
    "Done",
    "EchoMQError",
    "EvictionPolicyWarning",
    "FatalServerError",
    "FenceError",
    "ItemError",
    "Job",
    "JobOutcome",
    "KindError",
    "LaneError",
    "Queue",
    "Reject",
    "Release",
    "Retry",
    "RetryAfter",
    "RetryIn",
    "StaleLease",
    "Task",
    "TaskFailed",
    "TaskHandle",
    "TrafikeyMissing",
    "Verdict",
    "Wire6Unsupported",
    "new_job_id",
]
