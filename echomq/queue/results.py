"""Reading the results many jobs kept, for both Queues (mixed in): ``results`` is one program,
run by the blocking Queue and awaited by the asyncio one.

A workflow's callback takes its parents' results (a chord's, the whole group's) from their
tombstones. However many there are, one call reads at most ``RESULTS_PAGE`` rows: the reads go
in pages, a pipeline each, so a group of 10,000 children costs ten round trips and never one
command that holds the server for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq.engine.calls import QueueCalls, payload_bytes, text
from echomq.engine.native import checked_id
from echomq.engine.program import Program, Reads, method, op

# The rows one pipeline reads.
RESULTS_PAGE = 1000
# The tombstone's field that says why its result was not kept.
DROPPED = "result_dropped"
# A job's kept result (None: none), and why it was dropped (None: it was not).
Kept = tuple[bytes | None, str | None]


class ResultReads:
    """``results`` for both Queues: written once, as a program."""

    conn: Any
    calls: QueueCalls

    @op
    def results(self, job_ids: Sequence[str]) -> Program[list[bytes | None]]:
        """The result each of ``job_ids`` kept when it was acked, in their order: None for a
        job with no result kept (not done, dead, acked without one, or its tombstone gone).
        Read in pages of ``RESULTS_PAGE`` rows, one pipeline a page."""
        kept = yield from ResultReads.kept_results.program(self, job_ids)
        return [result for result, _ in kept]

    @op
    def kept_results(self, job_ids: Sequence[str]) -> Program[list[Kept]]:
        """``results``, each with why its result was dropped: the tombstone's
        ``result_dropped`` ("memory": acked on a server over its maxmemory, docs/PROTOCOL.md
        "Results under memory pressure"), or None."""
        kept: list[Kept] = []
        for start in range(0, len(job_ids), RESULTS_PAGE):
            page = job_ids[start:start + RESULTS_PAGE]
            reads = [method("hmget", self.calls.key("job", checked_id(job_id)),
                            ["result", DROPPED]) for job_id in page]
            replies = yield Reads(self.conn, reads, raise_on_error=False)
            kept.extend(_kept(reply) for reply in replies)
        return kept


def _kept(reply: Any) -> Kept:
    """A row's ``result`` and ``result_dropped`` as read; a row that is not a hash (an error
    reply) kept none."""
    if reply is None or isinstance(reply, Exception):
        return None, None
    result, dropped = reply
    return (None if result is None else payload_bytes(result),
            None if dropped is None else text(dropped))
