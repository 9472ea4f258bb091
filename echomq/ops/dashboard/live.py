"""The dashboard's live view of a queue's events: ``GET api/queues/{name}/events``.

Without ``since`` it answers the newest ``count`` events (where the page starts); with it, the
events after that id, waiting up to ``block_ms`` (at most ``BLOCK_CAP_MS``) for one — a long
poll, read on an asyncio client of the dashboard's server so that a waiting page holds no
thread (a cluster client, which has no asyncio twin, waits in Starlette's thread pool). The
answer is ``{"enabled", "events", "last"}``: whether the queue has an events stream, the events
oldest first, and the id to pass as ``since`` next.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from starlette.concurrency import run_in_threadpool

from echomq import aio
from echomq.engine.clients import async_twin
from echomq.engine.events import last_id
from echomq.engine.program import Invoke, Program, adrive, drive, method
from echomq.engine.transitions import EVENTS_ROLE
from echomq.queue.blocking import Queue
from echomq.queue.events import FIRST_ID, EventReads
from echomq.queue.methods import QueueMethods

BLOCK_CAP_MS = 10_000
MAX_COUNT = 1000


def bounded(raw: str | None, default: int, low: int, high: int) -> int:
    """A query parameter as an integer within [low, high]; ``default`` when absent or not one."""
    try:
        return min(max(int(raw), low), high) if raw is not None else default
    except ValueError:
        return default


def query_of(params: Any) -> tuple[str | None, int, int]:
    """``since``, ``count`` (1 to MAX_COUNT, 100 by default) and ``block_ms`` (0 to
    BLOCK_CAP_MS, 0 by default) of a request's query."""
    return (params.get("since"), bounded(params.get("count"), 100, 1, MAX_COUNT),
            bounded(params.get("block_ms"), 0, 0, BLOCK_CAP_MS))


def live_read(queue: QueueMethods, since: str | None, count: int,
              block_ms: int) -> Program[dict[str, Any]]:
    """The answer of the live view, as one program for either client."""
    if since is None:
        events = yield from EventReads.latest_events.program(queue, count)
    else:
        events = yield from EventReads.events.program(queue, since, count, block_ms)
    last = last_id(events, FIRST_ID if since is None else since)
    enabled = yield Invoke(queue.conn, method("exists", queue.key(EVENTS_ROLE)))
    return {"enabled": bool(enabled), "events": [asdict(event) for event in events],
            "last": last}


async def events_answer(conn: Any, name: str, since: str | None, count: int,
                        block_ms: int) -> dict[str, Any]:
    """``live_read`` of queue ``name`` on ``conn``'s server."""
    try:
        client = async_twin(conn)
    except TypeError:  # a cluster client: its blocking read waits in a thread
        queue = Queue(conn, name, check_policy=False)
        return await run_in_threadpool(drive, live_read(queue, since, count, block_ms))
    try:
        twin = aio.Queue(client, name, check_policy=False)
        return await adrive(live_read(twin, since, count, block_ms))
    finally:
        await client.aclose()
