"""The Celery app of the workflows phase: a chord needs a result backend (redis, a database of
its own on the bench's server), which the e2e phase's app does not have."""

import os

from celery import Celery

app = Celery("flows", broker=os.environ.get("BENCH_FLOWS_BROKER", "redis://127.0.0.1:6379/0"),
             backend=os.environ.get("BENCH_FLOWS_BACKEND", "redis://127.0.0.1:6379/1"))
app.conf.update(broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
                task_default_queue="flows")


@app.task(name="flows.noop")
def noop() -> None:
    """Does nothing."""


@app.task(name="flows.collect")
def collect(values: list[object]) -> int:
    """The chord's callback: how many results it was given."""
    return len(values)
