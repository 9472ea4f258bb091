"""What a handler may return to say how its job is settled, beyond "return to ack, raise to
retry".

``Done(result)`` acks and keeps ``result`` with the job's tombstone (``Ack(job, result=...)``);
``RetryIn(delay_ms, error, max_attempts)`` fails the attempt and asks for that delay (dead once
the attempts reach ``max_attempts``; None: the consumer's); ``Reject(error)`` sends the job dead
at once, without another attempt. Any other return value acks as before, and an exception retries
after the consumer's ``retry_delay_ms``. The consumer's core (``echomq.consumer.loop``) turns each
into
the outcome it sends, the same on both shells.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Done:
    """Ack the job, keeping ``result`` (None: nothing) with its tombstone."""

    result: bytes | None = None

    def __post_init__(self) -> None:
        if self.result is not None and not isinstance(self.result, bytes):
            raise TypeError(f"Done(result) takes bytes or None, not {type(self.result).__name__}")


@dataclass(frozen=True)
class RetryIn:
    """Fail this attempt and run the job again after ``delay_ms``; dead once its attempts reach
    ``max_attempts`` (None: the consumer's, else the queue's)."""

    delay_ms: int
    error: str
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.delay_ms, bool) or not isinstance(self.delay_ms, int) \
                or self.delay_ms < 0:
            raise ValueError(f"RetryIn(delay_ms) must be a non-negative int, got "
                             f"{self.delay_ms!r}")
        if self.max_attempts is not None and (isinstance(self.max_attempts, bool) or
                                              not isinstance(self.max_attempts, int) or
                                              self.max_attempts < 1):
            raise ValueError(f"RetryIn(max_attempts) must be a positive int or None, got "
                             f"{self.max_attempts!r}")


@dataclass(frozen=True)
class Reject:
    """Send the job dead now with ``error``: no further attempt (for input that can never
    succeed)."""

    error: str


Directive = Done | RetryIn | Reject
