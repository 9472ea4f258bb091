"""The handler of the multi-process queue-limits run (tests/test_queue_limit_workers.py): each
job writes a line to the ledger ``test:ledger`` (one list on the test's server, so every
process's lines are in one order) when it starts and when it ends, and sleeps the payload's
milliseconds between.

A line is ``start|end <id> <pid> <server ms>``. A job's lease is taken before its start line and
given back after its end line, so jobs whose lines overlap in the ledger held their leases at
the same time: counting them can only under-count what the server let run at once.
"""

from __future__ import annotations

import os
import time

from echomq import Job
from echomq.engine.server_time import server_ms
from tests.handlers import conn


def note(what: str, job: Job) -> None:
    at_ms = server_ms(conn())
    conn().rpush("test:ledger", f"{what} {job.id} {os.getpid()} {at_ms}")


def run(job: Job) -> None:
    note("start", job)
    time.sleep(int(job.payload) / 1000)
    note("end", job)
