"""A test's clock: every transition sent without a ``now`` of its own reads it, so delays,
retry back-offs, leases and schedules fall due when the test says so, not when the machine gets
round to it."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from echomq.engine.native import use_clock


class Clock:
    """Milliseconds that move only when ``advance`` moves them, starting at ``start_ms`` (the
    server's clock when the plugin makes it). Inside ``with clock:`` (the ``echomq_clock``
    fixture's test) every transition this process sends without a ``now`` of its own (an
    enqueue's delay, a claim's lease, a retry's back-off, recover and promote) reads it instead
    of the server's clock."""

    def __init__(self, start_ms: int) -> None:
        self.ms = start_ms
        self._replaced: list[Callable[[], int] | None] = []

    def __call__(self) -> int:
        return self.ms

    def advance(self, seconds: float) -> int:
        """Move the clock ``seconds`` on (never back); the new time in ms."""
        if seconds < 0:
            raise ValueError(f"a clock moves forward only, not by {seconds} s")
        self.ms += round(seconds * 1000)
        return self.ms

    def __enter__(self) -> Clock:
        self._replaced.append(use_clock(self))
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        use_clock(self._replaced.pop())
