"""What both consumer shells share — ``echomq.consumer.Consumer`` (threads, blocking) and
``echomq.aio.Consumer`` (asyncio) — so neither imports the other: the queues a consumer serves
and the keys it parks on, its name in a housekeeping token, the log lines a round's outcomes
come to, and ``LoopShell``, how both read their lineup and options. None of it does I/O."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from echomq.consumer.faults import Fault, classify
from echomq.consumer.loop import (
    Clock,
    Lineup,
    LoopCore,
    Settings,
    describe,
    fatal_error,
    first_line,
)
from echomq.engine import calls
from echomq.engine.calls import Job, Outcome, Verdict
from echomq.engine.clients import is_cluster
from echomq.engine.errors import Wire6Unsupported
from echomq.engine.transitions import LANE_CLAIM
from echomq.engine.wire import Wire
from echomq.queue.parking import WATCH_ROLE

if TYPE_CHECKING:
    from echomq.consumer.presence import Announcer

log = logging.getLogger("echomq")


def refuse_unsupported(wire: int, lanes: bool) -> None:
    """Raise Wire6Unsupported("lane_claim") when a lane consumer is asked of a ``wire=6`` queue:
    the lane claim has no native twin, so such a loop would have no way to drain."""
    if lanes and wire == Wire.NATIVE and LANE_CLAIM.native is None:
        raise Wire6Unsupported(LANE_CLAIM.name)


def queue_list(queue_or_queues: Any) -> list[Any]:
    """The queues a consumer serves, in priority order: one queue, or a sequence of them (at
    least one, all distinct by name, of one wire)."""
    queues = list(queue_or_queues) if isinstance(queue_or_queues, list | tuple) \
        else [queue_or_queues]
    if not queues:
        raise ValueError("a consumer needs at least one queue")
    names = [queue.name for queue in queues]
    if len(set(names)) != len(names):
        raise ValueError(f"a queue is listed twice: {names}")
    if len({queue.wire for queue in queues}) != 1:
        raise ValueError("the queues of one consumer must share a wire")
    if len(queues) > 1 and any(is_cluster(queue.conn) for queue in queues):
        raise ValueError("a consumer of several queues parks on all their wake keys with one "
                         "BLPOP, which a cluster refuses across slots: on a cluster, run a "
                         "consumer per queue")
    return queues


def wake_keys(queues: Iterable[Any]) -> list[str]:
    """The wake keys a consumer of ``queues`` parks on (a token on any wakes it)."""
    return [queue.key("wake") for queue in queues]


def park_keys(queues: Sequence[Any]) -> list[str]:
    """What a consumer of ``queues`` parks on: their wake keys first (BLPOP serves the first
    key holding a token), then their watch keys."""
    return [*wake_keys(queues), *(queue.key(WATCH_ROLE) for queue in queues)]


def consumer_name() -> str:
    """This consumer's name in a queue's housekeeping token: host, process and a number."""
    import os
    import socket
    import uuid

    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def log_failure(job: Job, verdict: Verdict, error: str, retry_delay_ms: int) -> None:
    """Say what became of a failed attempt: dead, or retrying after ``retry_delay_ms``."""
    if verdict is Verdict.DEAD:
        log.error("job %s dead after attempt %d: %s", job.id, job.attempt, error)
    else:
        log.warning("job %s failed (attempt %d) and will retry in %d ms: %s", job.id,
                    job.attempt, retry_delay_ms, first_line(error))


def report_settled(outcomes: Sequence[Outcome], verdicts: Sequence[Verdict],
                   on_ack: Callable[[Job], object] | None) -> None:
    """What each outcome of a round came to: ``on_ack`` for an ack that went through, a log line
    for a failure, a warning for an outcome its lease no longer took (STALE)."""
    for outcome, verdict in zip(outcomes, verdicts, strict=True):
        job = outcome.job
        if isinstance(outcome, calls.Ack):
            if verdict is Verdict.ACKED:
                if on_ack is not None:
                    call_hook(on_ack, job, "on_ack")
            else:
                log.warning("stale lease: %s attempt %d finished after its lease was lost; "
                            "the ack was refused", job.id, job.attempt)
        elif isinstance(outcome, calls.Retry):
            error = str(outcome.error)
            if verdict is Verdict.STALE:
                log.warning("stale lease: %s attempt %d failed after its lease was lost (%s)",
                            job.id, job.attempt, first_line(error))
            else:
                log_failure(job, verdict, error, outcome.delay_ms)


def log_guarded(action: Callable[..., object], exc: Exception) -> None:
    """Log a failure of the keeper's work, which the loop itself meets on its next call: a
    transient one as a warning, any other as an error."""
    level = logging.WARNING if classify(exc) is Fault.TRANSIENT else logging.ERROR
    log.log(level, "%s failed: %s", action.__name__.strip("_"), describe(exc))


def warn_lost(jobs: Iterable[Job]) -> None:
    for job in jobs:
        log.warning("stale lease: %s attempt %d was lost before its heartbeat", job.id,
                    job.attempt)


def warn_not_handed_back(exc: Exception) -> None:
    log.warning("could not hand back the jobs in hand (%s); their leases will run out and "
                "recover will put them back", describe(exc))


def log_overrun(job: Job, time_limit_ms: int | None) -> None:
    log.error("job %s attempt %d exceeded its time limit of %d ms", job.id, job.attempt,
              time_limit_ms or 0)


def call_hook(hook: Callable[[Job], object] | None, job: Job, name: str) -> None:
    """Call a user's hook with ``job``; what it raises is logged, never the loop's end."""
    if hook is None:
        return
    try:
        hook(job)
    except Exception:
        log.exception("%s hook failed for %s attempt %d", name, job.id, job.attempt)


class LoopShell:
    """What both consumer shells (this module's ``Consumer`` and ``echomq.aio.Consumer``) read
    the same way from their queues, their lineup and their options; none of it does I/O."""

    queues: list[Any]
    lineup: Lineup
    clock: Clock | None
    on_overrun: Callable[[Job], object] | None
    # The record in the registry of live workers while ``run()`` runs (``announce``); its
    # parks carry its rewrite.
    announcer: Announcer | None = None

    @property
    def core(self) -> LoopCore:
        """The first queue's core (the only one of a consumer of one queue)."""
        return self.lineup.cores[0]

    @property
    def names(self) -> str:
        return ", ".join(queue.name for queue in self.queues)

    @property
    def settings(self) -> Settings:
        return self.lineup.settings

    @property
    def lanes(self) -> bool:
        return self.settings.lanes

    @property
    def lease_ms(self) -> int:
        return self.settings.lease_ms

    @property
    def max_attempts(self) -> int | None:
        return self.settings.max_attempts

    def _pause_after(self, exc: Exception) -> float:
        """How long to wait before the next beat after one failed with ``exc``: a transient
        error backs off (logged); one that cannot heal raises FatalServerError, and any other
        error raises itself."""
        fault = classify(exc)
        if fault is None:
            raise exc
        if fault is Fault.FATAL:
            raise fatal_error(self.names, exc) from exc
        pause = self.core.backoff.failed()
        log.warning("server unavailable (%s); retrying in %.1f s", describe(exc), pause)
        return pause

    def _now(self) -> int | None:
        """The ms clock for a transition: the consumer's own, or None for the server's."""
        return self.clock() if self.clock is not None else None

    def _tell_overrun(self, job: Job) -> None:
        call_hook(self.on_overrun, job, "on_overrun")
