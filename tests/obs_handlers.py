"""Handlers the metrics and tracing tests run inside worker processes.

``work``: the payload says what the job does: ``b"ok"`` returns; ``b"fail"`` raises;
``b"hold"`` notes its process in ``test:held`` (a list), then blocks until the test pushes to
``test:release`` (one token per held job).
"""

from __future__ import annotations

import os

from echomq import Job
from tests.handlers import conn


def work(job: Job) -> None:
    if job.payload == b"fail":
        raise RuntimeError(f"{job.id} failed on purpose")
    if job.payload == b"hold":
        conn().rpush("test:held", os.getpid())
        if conn().blpop(["test:release"], timeout=60) is None:
            raise TimeoutError("never released")
