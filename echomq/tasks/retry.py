"""A task's retry policy: how many attempts, how long between them, which errors never retry.

The computation is pure (the random draw for jitter is passed in), so a test states the delay
of each attempt exactly; the App turns its answer into the directive the consumer carries out.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from echomq.engine.calls import DEFAULT_MAX_ATTEMPTS

Draw = Callable[[], float]  # a number in [0, 1): random.random, or a fixed one in tests


class RetryAfter(Exception):
    """Raised by a task to be run again after ``seconds`` (a rate limit's Retry-After, say),
    whatever its back-off says. It still counts an attempt: at the last one the job is dead."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"RetryAfter needs a finite number of seconds >= 0, not {seconds}")
        super().__init__(reason or f"retry asked for in {seconds:g} s")
        self.seconds = seconds
        self.reason = reason

    @property
    def delay_ms(self) -> int:
        return round(self.seconds * 1000)


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off: ``first_ms * factor ** (attempt - 1)``, at most ``max_ms``, then
    lowered by up to ``jitter`` of itself at random, so failures that happened together (a
    dependency down for everyone) do not come back together."""

    first_ms: int = 1_000
    factor: float = 2.0
    max_ms: int = 5 * 60 * 1000
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.first_ms < 0 or self.max_ms < self.first_ms:
            raise ValueError("Backoff needs 0 <= first_ms <= max_ms")
        if self.factor < 1:
            raise ValueError("Backoff needs factor >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("Backoff needs 0 <= jitter <= 1")

    def delay_ms(self, attempt: int, draw: Draw = random.random) -> int:
        """The delay before the run after failed ``attempt`` (1 for the first run)."""
        exponent = max(0, attempt - 1)
        ceiling = self.max_ms if exponent >= 64 else min(
            self.max_ms, self.first_ms * self.factor ** exponent)
        return round(ceiling * (1 - self.jitter * draw()))


DEFAULT_BACKOFF = Backoff()


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` runs at most; ``backoff`` between them; an exception that is an instance
    of one of ``no_retry`` sends the job dead at once."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = DEFAULT_BACKOFF
    no_retry: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")

    def retries(self, exc: BaseException) -> bool:
        return not isinstance(exc, self.no_retry)

    def delay_ms(self, exc: BaseException, attempt: int, draw: Draw = random.random) -> int:
        """How long before the next run after ``exc`` ended ``attempt``: the task's own ask
        (RetryAfter), else the back-off."""
        if isinstance(exc, RetryAfter):
            return exc.delay_ms
        return self.backoff.delay_ms(attempt, draw)

    def last(self, attempt: int) -> bool:
        """Whether ``attempt`` was the last one the policy allows."""
        return attempt >= self.max_attempts
