"""echomq: a reliable, fair job queue for Python on Valkey.

Every transition runs on two executors with byte-identical replies: Lua scripts (``wire=5``)
and the trafikey module's native ``EMQ.*`` commands (``wire=6``).
"""

from echomq.consumer import Consumer
from echomq.errors import (
    ArgumentError,
    EchoMQError,
    EvictionPolicyWarning,
    FatalServerError,
    KindError,
    LaneError,
    StaleLease,
    TrafikeyMissing,
    Wire6Unsupported,
)
from echomq.ids import new_job_id
from echomq.queue import Ack, Job, JobOutcome, Queue, Release, Retry, Verdict

__all__ = [
    "Ack",
    "ArgumentError",
    "Consumer",
    "EchoMQError",
    "EvictionPolicyWarning",
    "FatalServerError",
    "Job",
    "JobOutcome",
    "KindError",
    "LaneError",
    "Queue",
    "Release",
    "Retry",
    "StaleLease",
    "TrafikeyMissing",
    "Verdict",
    "Wire6Unsupported",
    "new_job_id",
]
