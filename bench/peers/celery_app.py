"""The Celery app of the benchmark (Redis broker, no result backend: Celery's default)."""

import os

from celery import Celery

app = Celery("bench", broker=os.environ.get("BENCH_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
                task_default_queue="bench")


@app.task(name="noop")
def noop() -> None:
    """Does nothing."""
