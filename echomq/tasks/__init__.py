"""The task layer: typed functions enqueued by name, run by any ``Consumer`` through
``App.handler``. See ``echomq.tasks.app``."""

from echomq.tasks.app import App, Task, TaskCall
from echomq.tasks.canvas import Chain, Chord, Group, TaskSignature, chain, chord, group
from echomq.tasks.handle import Cancelled, TaskHandle, UnknownJob
from echomq.tasks.hooks import RunRecord, TaskHooks
from echomq.tasks.retry import Backoff, RetryAfter, RetryPolicy
from echomq.tasks.workflow import WorkflowHandle

__all__ = ["App", "Backoff", "Cancelled", "Chain", "Chord", "Group", "RetryAfter", "RetryPolicy",
           "RunRecord", "Task", "TaskCall", "TaskHandle", "TaskHooks", "TaskSignature",
           "UnknownJob", "WorkflowHandle", "chain", "chord", "group"]
