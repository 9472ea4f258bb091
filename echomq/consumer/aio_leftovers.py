"""What an asyncio consumer's parks leave behind them: calls a stop abandoned (a cancelled
``BLPOP`` that unwinds in its own time), the clients they ran on, and the little tasks that
close those clients or hand a popped token back. ``Leftovers`` holds them all, so that the
consumer's close ends every one before the event loop does: a client closed after its loop has
gone would fail in its finaliser ("Event loop is closed")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import Any

Closing = Callable[[], Coroutine[Any, Any, None]]

# How long a close waits for an abandoned call to unwind once its client is closed.
UNWIND_S = 0.5
# How many times a drain looks again for what the calls it ended left behind.
DRAIN_PASSES = 4


class Leftovers:
    """Abandoned calls (each with what closes its client) and tasks started on their behalf."""

    def __init__(self) -> None:
        self._calls: dict[asyncio.Future[Any], Closing | None] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def close_after(self, call: asyncio.Future[Any], close: Closing | None) -> None:
        """``call`` was abandoned: once it has unwound its outcome is consumed and ``close``
        (if any) runs; ``drain`` ends both sooner."""
        self._calls[call] = close
        call.add_done_callback(self._unwound)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in a task of its own that ``drain`` awaits (with no loop running, it
        is dropped: the client it would close goes with its loop)."""
        try:
            task = asyncio.get_running_loop().create_task(work)
        except RuntimeError:
            work.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Close the client of every abandoned call still running (which ends the call), wait
        a little for those calls to unwind, then for every task spawned to finish; again while
        what unwound left more (a park cancelled while it opened its lines abandons them as it
        unwinds), a few times at most."""
        for _ in range(DRAIN_PASSES):
            if not self._calls and not self._tasks:
                return
            calls, self._calls = self._calls, {}
            for call, close in calls.items():
                call.cancel()
                if close is not None:
                    with suppress(Exception):
                        await close()
            if calls:
                await asyncio.wait(list(calls), timeout=UNWIND_S)
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _unwound(self, call: asyncio.Future[Any]) -> None:
        if not call.cancelled():
            call.exception()
        if call in self._calls:
            close = self._calls.pop(call)
            if close is not None:
                self.spawn(close())
