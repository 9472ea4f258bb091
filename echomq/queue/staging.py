"""Ending abandoned staging, for both Queues (mixed in): ``sweep_staging`` is one program, run by
the blocking Queue and awaited by the asyncio one, and housekeeping (``recover_due``) runs it
after recover and promote.

A staged admission (``echomq.queue.graphs``) admits every job waiting and held open (its row's
``hold``) before it seals any; a client that dies between steps leaves its unsealed jobs held in
``<base>waiting`` for ever, and every job waiting on them. A job held ``staging_timeout_ms``
after its admission (its score in ``<base>waiting``) was abandoned: the sweep cancels it with the
cancel transition (``CANCEL``), whose end hook cancels the jobs waiting on it, so the whole
half-admitted graph ends cancelled. A sealed job (no ``hold``) is never touched, however long it
waits for its parents. No transition of its own: a page of the oldest jobs past the deadline
(``ZRANGEBYSCORE ... LIMIT``), their ``hold`` fields in one pipeline, the cancels in one more
(docs/PROTOCOL.md "Staged admission").

The deadline: staging a chord of 100,000 children takes 17-31 s on ``wire=5`` on a shared
2-core machine (docs/PROTOCOL.md "Staged admission"), so ten minutes is twenty times the longest
staging measured; a client whose admission is slower than the deadline has its held jobs
cancelled under it (sealing a cancelled job answers NOTWAITING), so a queue that admits bigger
graphs on slower machines sets it higher. A round walks at most ``SWEEP_STEPS`` pages, and the
next round goes on where it stopped, so sealed jobs waiting long (a chain's) never hide a held
job behind them for good.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq.engine.calls import QueueCalls, Verdict, text
from echomq.engine.execution import ExecutorMethods
from echomq.engine.program import Invoke, Program, Reads, method, op
from echomq.engine.server_time import time_ms
from echomq.queue.bounds import HOUSEKEEPING_STEP

# How long (ms) a job may stay held after its admission before the sweep cancels it.
STAGING_TIMEOUT_MS = 600_000
# The most pages of HOUSEKEEPING_STEP jobs past the deadline one sweep reads.
SWEEP_STEPS = 10


def held_ids(ids: Sequence[Any], holds: Sequence[Any]) -> list[str]:
    """The ids among ``ids`` whose row still has ``hold`` (``holds``, a reply of HGET each)."""
    return [text(job_id) for job_id, hold in zip(ids, holds, strict=True) if hold is not None]


def checked_timeout(staging_timeout_ms: int | None) -> int | None:
    """``staging_timeout_ms`` if None or a positive int; ValueError otherwise."""
    if staging_timeout_ms is not None and (
            isinstance(staging_timeout_ms, bool) or not isinstance(staging_timeout_ms, int)
            or staging_timeout_ms <= 0):
        raise ValueError(f"staging_timeout_ms must be a positive int or None, "
                         f"not {staging_timeout_ms!r}")
    return staging_timeout_ms


class StagingSweep:
    """``sweep_staging`` for both Queues: written once, as a program."""

    conn: Any
    calls: QueueCalls
    executor: ExecutorMethods
    # The deadline (ms) of a held job; None: this queue holds no staged jobs (a sharded
    # queue's shards: graphs are refused there), so nothing is swept.
    staging_timeout_ms: int | None = STAGING_TIMEOUT_MS
    # Where the next sweep starts among the jobs past the deadline (the last one stopped at
    # its bound of pages with more to read).
    _swept_to: int = 0

    @op
    def sweep_staging(self, *, now: int | None = None, limit: int = HOUSEKEEPING_STEP,
                      steps: int = SWEEP_STEPS) -> Program[int]:
        """Cancel the jobs admitted to ``<base>waiting`` ``staging_timeout_ms`` or more before
        ``now`` (None: the server's clock) that are still held (never sealed: their admission
        was abandoned between steps), with the jobs waiting on them; how many of the jobs read
        were cancelled. At most ``steps`` pages of ``limit`` jobs past the deadline are read, in
        admission order, from where the last sweep stopped. A queue without a deadline
        (``staging_timeout_ms`` None) sends nothing."""
        if self.staging_timeout_ms is None:
            return 0
        waiting = self.calls.key("waiting")
        if now is None:
            now = time_ms((yield Invoke(self.conn, method("time"))))
        cutoff = now - self.staging_timeout_ms
        cancelled, offset = 0, self._swept_to
        for _ in range(steps):
            ids = yield Reads(self.conn, [method("zrangebyscore", waiting, "-inf", cutoff,
                                                 start=offset, num=limit)])
            ids = ids[0]
            held = yield from self._held(ids)
            cancelled += yield from self._cancelled(held, now)
            offset += len(ids) - len(held)  # the sealed ones stay where they were
            if len(ids) < limit:
                self._swept_to = 0
                return cancelled
        self._swept_to = offset
        return cancelled

    def _held(self, ids: Sequence[Any]) -> Program[list[str]]:
        if not ids:
            return []
        holds = yield Reads(self.conn, [method("hget", self.calls.key("job", text(job_id)),
                                               "hold") for job_id in ids])
        return held_ids(ids, holds)

    def _cancelled(self, held: Sequence[str], now: int) -> Program[int]:
        if not held:
            return 0
        replies = yield from ExecutorMethods.call_many.program(
            self.executor, self.conn, [self.calls.cancel(job_id, None, now) for job_id in held])
        return sum(Verdict.of(reply) is Verdict.CANCELLED for reply in replies)
