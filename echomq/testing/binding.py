"""An App of the user's own, pointed at a test's server for the length of a test."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from echomq.tasks.app import App
from echomq.tasks.twins import AsyncQueues


@contextmanager
def bound(app: App, conn: Any) -> Iterator[App]:
    """``app`` sending everything on ``conn`` inside the block, and on its own connection again
    after it: its queues (the same names, made again on ``conn``), its tasks' enqueues and
    handles, its asyncio side (a twin of ``conn`` per event loop) and its periodic schedules'
    marks. The tasks, options and hooks stay the app's; ``limits=`` given when the app was made
    are not written to ``conn`` (``app.set_limits`` inside the block does)."""
    kept = (app.conn, app.queues, app.queue, app.aqueues, app.scheduler.entries)
    app.conn, app.queues = conn, {}
    try:
        for name in kept[1]:
            app.queue_named(name)
        app.queue = app.queues[kept[2].name]
        app.aqueues = AsyncQueues(conn, None, kept[3].options)
        app.scheduler.entries = [dataclasses.replace(entry, queue=app.queue_named(entry.queue.name))
                                 for entry in kept[4]]
        yield app
    finally:
        app.conn, app.queues, app.queue, app.aqueues, app.scheduler.entries = kept
