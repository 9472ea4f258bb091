"""Handlers for the worker-process tests that watch which process ran what.

``serve``: ``b"hang"`` notes the process in ``test:hung`` (a list) and never returns; anything
else notes ``job id -> pid`` in ``test:served``.
"""

from __future__ import annotations

import os
import threading

from echomq import Job
from tests.handlers import conn


def serve(job: Job) -> None:
    if job.payload == b"hang":
        conn().rpush("test:hung", os.getpid())
        threading.Event().wait()
    conn().hset("test:served", job.id, os.getpid())
