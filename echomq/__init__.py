"""echomq: a reliable, fair job queue for Python on Valkey.

Every transition runs on two executors with byte-identical replies: Lua scripts
(``Wire.SCRIPTS``, ``wire=5``) and the trafikey module's native ``EMQ.*`` commands
(``Wire.NATIVE``, ``wire=6``).

The names below are loaded on first use (PEP 562), so importing one module of the package
(``echomq.transitions``, say) loads only what that module imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from echomq.wire import Wire

# Each public name, and the module it lives in.
_HOMES = {
    "Consumer": "echomq.consumer",
    **dict.fromkeys(("Done", "Reject", "RetryIn"), "echomq.directives"),
    **dict.fromkeys(("ArgumentError", "EchoMQError", "EvictionPolicyWarning", "FatalServerError",
                     "FenceError", "ItemError", "KindError", "LaneError", "StaleLease",
                     "TaskFailed", "TrafikeyMissing", "Wire6Unsupported"), "echomq.errors"),
    "new_job_id": "echomq.ids",
    **dict.fromkeys(("Ack", "Job", "JobOutcome", "Queue", "Release", "Retry", "Verdict"),
                    "echomq.queue"),
    **dict.fromkeys(("App", "Backoff", "RetryAfter", "Task", "TaskHandle"), "echomq.tasks"),
    "Wire": "echomq.wire",
}

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
    "Wire",
    "Wire6Unsupported",
    "new_job_id",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then kept here); a submodule
    (``echomq.aio``, ``echomq.embedded``) imported as ``import echomq.aio`` would."""
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
