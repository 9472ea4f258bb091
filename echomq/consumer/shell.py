"""What both consumer shells share — ``echomq.consumer.Consumer`` (threads, blocking) and
``echomq.aio.Consumer`` (asyncio) — so neither imports the other: the queues a consumer serves
and the keys it parks on, its name in a housekeeping token, the log lines a round's outcomes
come to, and ``LoopShell``, how both read their lineup and options, which call on a queue
performs an action of the beat program (``echomq.consumer.beat``: the blocking shell makes it,
the asyncio one awaits it) and how both perform its notices. None of it does I/O."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from echomq.consumer.actions import (
    Action,
    ClaimLane,
    Dropped,
    Extend,
    Failed,
    LostLeases,
    NotHandedBack,
    OnQueue,
    PauseCheck,
    Report,
    SendAhead,
    Settle,
    StopAsked,
    TakeToken,
    TellOverrun,
    Unparked,
)
from echomq.consumer.cancelling import CancelFlags
from echomq.consumer.core import LoopCore
from echomq.consumer.faults import Fault, classify
from echomq.consumer.loop import Lineup
from echomq.consumer.settings import (
    Clock,
    Settings,
    describe,
    fatal_error,
    first_line,
    park_socket_timeout,
)
from echomq.consumer.spread import shards_of
from echomq.engine import calls, cluster_once
from echomq.engine.calls import Job, Outcome, Verdict
from echomq.engine.clients import is_cluster, private_twin
from echomq.engine.errors import LayoutError, Wire6Unsupported
from echomq.engine.program import Program
from echomq.engine.rows import LAYOUT, LAYOUT_KEY, Layout, recorded_layout
from echomq.engine.transitions import LANE_CLAIM
from echomq.engine.wire import Wire
from echomq.queue.connection import socket_timeout_of
from echomq.queue.methods import QueueMethods
from echomq.queue.parking import (
    TOKEN_ROLE,
    WATCH_ROLE,
    Sighting,
    queue_reads,
    sighting_of,
    token_taken,
)

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
    return queues


def wake_keys(queues: Iterable[Any]) -> list[str]:
    """The wake keys a consumer of ``queues`` parks on (a token on any wakes it)."""
    return [queue.key("wake") for queue in queues]


def park_keys(queues: Sequence[Any]) -> list[str]:
    """What a consumer of ``queues`` parks on: their wake keys first (BLPOP serves the first
    key holding a token), then their watch keys."""
    return [*wake_keys(queues), *(queue.key(WATCH_ROLE) for queue in queues)]


def queue_park_reads(pipe: Any, queues: Sequence[Any], *, ready: bool, lanes: bool) -> None:
    """Queue on ``pipe`` the reads of every queue's heads before a park (``ready``: with the
    jobs waiting counted)."""
    for queue in queues:
        queue_reads(pipe, queue.key, ready=ready, lanes=lanes)


def sightings_of(replies: Sequence[Any], queues: int) -> list[Sighting]:
    """A Sighting of each of ``queues`` queues from the replies of ``queue_park_reads``."""
    per_queue = len(replies) // queues
    return [sighting_of(replies[n * per_queue:(n + 1) * per_queue]) for n in range(queues)]


def consumer_name() -> str:
    """This consumer's name in a queue's housekeeping token: host, process and a number."""
    import os
    import socket
    import uuid

    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def take_token(conn: Any, key: str, holder: str, interval_ms: int,
               layout_key: str | None = None) -> Any:
    """Ask for the queue's housekeeping token ``key`` for ``holder``, held ``interval_ms``
    (``SET NX PX GET``): the reply is what ``token_taken`` reads (awaitable on an asyncio
    client). One consumer a housekeeping interval runs recover + promote; the others skip.
    With ``layout_key`` on a server that is not a cluster, the queue's recorded row layout is
    read in the same round trip (a pipeline of the ``SET`` and a ``GET``): the reply is then the
    list of both (``token_reply``).

    On a cluster it is asked of its slot's node once (``echomq.engine.cluster_once``): a node that
    is down fails it at once. The client's own retries would hold the consumer's loop for
    seconds, and with it every other shard it serves."""
    if not is_cluster(conn):
        if layout_key is None:
            return conn.set(key, holder, nx=True, px=interval_ms, get=True)
        pipe = conn.pipeline(transaction=False)
        pipe.set(key, holder, nx=True, px=interval_ms, get=True)
        pipe.get(layout_key)
        return pipe.execute()
    command = ("SET", key, holder, "NX", "PX", interval_ms, "GET")
    if inspect.iscoroutinefunction(conn.execute_command):
        return cluster_once.async_send(conn, command, get=True)
    return cluster_once.send(conn, command, get=True)


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
    for a failure or for an attempt the server ended cancelled (never a retry, whatever the
    outcome sent), a warning for an outcome its lease no longer took (STALE)."""
    for outcome, verdict in zip(outcomes, verdicts, strict=True):
        job = outcome.job
        if verdict is Verdict.CANCELLED:
            log.info("job %s cancelled (attempt %d ended)", job.id, job.attempt)
        elif isinstance(outcome, calls.Ack):
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


_LAYOUT_WARNED: set[str] = set()  # the queues whose old rows this process has warned of
# The row layout each queue was last seen recorded in, by this process (None: none recorded).
_LAYOUT_SEEN: dict[str, int | None] = {}


def judge_layout(queue: str, layout: Layout) -> None:
    """What a worker does with the row layout it read of ``queue`` as it starts: refuse a
    layout it cannot read (LayoutError: no job of the queue is claimed), and warn once per
    process, loudly, when rows of the earlier layout are there."""
    if not layout.readable:
        assert layout.recorded is not None
        raise LayoutError(queue, layout.recorded, LAYOUT)
    _LAYOUT_SEEN[queue] = layout.recorded
    if layout.old_rows and queue not in _LAYOUT_WARNED:
        _LAYOUT_WARNED.add(queue)
        log.warning("queue %s holds rows of the earlier row layout (payload, attempts, "
                    "enqueued_at, fence; %s among others): this worker reads them, each "
                    "rewritten as it is leased, but a worker of the earlier release reads the "
                    "rows this release writes without their payload: stop every such worker, "
                    "then run `echomq migrate %s`", queue, ", ".join(layout.old_rows[:3]), queue)


def layout_changed(queue: str, value: bytes | str | None) -> None:
    """A running worker read ``queue``'s recorded row layout again (with its housekeeping
    token): a later layout than it reads stops it (LayoutError); any other change is logged
    once, when this process first sees it."""
    layout = Layout(recorded_layout(value))
    if not layout.readable:
        assert layout.recorded is not None
        raise LayoutError(queue, layout.recorded, LAYOUT, running=True)
    before = _LAYOUT_SEEN.get(queue)
    _LAYOUT_SEEN[queue] = layout.recorded
    if layout.recorded != before:
        log.info("queue %s: its rows are now recorded in row layout %s (was %s)", queue,
                 layout.recorded, "none" if before is None else before)


def token_reply(reply: Any, queue: str) -> Any:
    """The token's reply from what ``take_token`` answered: with the row layout read in the same
    round trip (a list), that is judged first (``layout_changed``)."""
    if not isinstance(reply, list):
        return reply
    token, layout = reply
    layout_changed(queue, layout)
    return token


def layout_reads(queues: Sequence[Any]) -> list[tuple[str, Any]]:
    """Each served queue's name and the call reading its layout (``row_layout``)."""
    return [(queue.name, queue.row_layout) for queue in queues]


def log_guarded(what: str, exc: Exception) -> None:
    """Log a failure of the keeper's work ``what``, which the loop itself meets on its next
    call: a transient one as a warning, any other as an error."""
    level = logging.WARNING if classify(exc) is Fault.TRANSIENT else logging.ERROR
    log.log(level, "%s failed: %s", what, describe(exc))


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
    queue: Any  # the first
    handler: Any
    lineup: Lineup
    clock: Clock | None
    on_ack: Callable[[Job], object] | None
    on_overrun: Callable[[Job], object] | None
    _name: str  # in the queues' housekeeping tokens
    # The record in the registry of live workers while ``run()`` runs (``announce``); its
    # parks carry its rewrite.
    announcer: Announcer | None = None
    # A later row layout the keeper found recorded: ``run()`` stops and raises it.
    refused: LayoutError | None = None

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
        if fault is None or isinstance(exc, LayoutError):
            raise exc
        if fault is Fault.FATAL:
            raise fatal_error(self.names, exc) from exc
        pause = self.core.backoff.failed()
        log.warning("server unavailable (%s); retrying in %.1f s", describe(exc), pause)
        return pause

    def _keeper_failed(self, what: str, exc: Exception) -> None:
        """The keeper's work ``what`` failed with ``exc``: logged (``log_guarded``); a queue now
        recorded in a later row layout (LayoutError) also stops the loop, whose ``run()`` then
        raises it (``raise_refused``)."""
        log_guarded(what, exc)
        if isinstance(exc, LayoutError):
            self.refused = exc
            self.stop()

    def raise_refused(self) -> None:
        """Raise the LayoutError the keeper met, if it met one (after the loop stopped)."""
        if self.refused is not None:
            raise self.refused

    def _now(self) -> int | None:
        """The ms clock for a transition: the consumer's own, or None for the server's."""
        return self.clock() if self.clock is not None else None

    monotonic = staticmethod(time.monotonic)

    @staticmethod
    def heals(exc: BaseException) -> bool:
        """Whether ``exc`` is a server or connection error that heals by waiting."""
        return classify(exc) is Fault.TRANSIENT

    @staticmethod
    def from_server(exc: BaseException) -> bool:
        """Whether ``exc`` is a server or connection error, transient or fatal."""
        return classify(exc) is not None

    def _serve(self, queue: Any, handler: Any, lanes: bool, *, spread: bool = False,
               **knobs: Any) -> None:
        """What both constructors do first: the queues served (one queue or a list, of one wire;
        a sharded queue: its shards, spread; a lane consumer is refused where lanes have no
        native claim), a core for each under one ``Settings`` of ``lanes`` and ``knobs`` (in
        strict priority, or ``spread`` over them), the handler, and this consumer's name in the
        queues' housekeeping tokens."""
        queue, spread = shards_of(queue, spread)
        self.queues = queue_list(queue)
        refuse_unsupported(self.queues[0].wire, lanes)
        self.lineup = Lineup.of(Settings(lanes=lanes, **knobs), len(self.queues), spread=spread)
        self.queue = self.queues[0]
        self.handler = handler
        self._name = consumer_name()
        self.flags = CancelFlags()
        self.cancelled = 0  # attempts the server ended cancelled (their settle said CANCELLED)

    def stop(self) -> None:
        raise NotImplementedError

    def _queue_call(self, action: Action) -> Callable[[], Any] | None:
        """The call on a queue that performs ``action`` (made by the blocking shell, awaited by
        the asyncio one: the two clients' queues have the same methods), or None."""
        if not isinstance(action, OnQueue):
            return None
        queue = self.queues[action.index]
        match action:
            case PauseCheck():
                return partial(queue.is_paused)
            case ClaimLane(_, watch, claim_id):
                return partial(queue.claim_lane, self.lease_ms,
                               now=self._now(), watch=watch, claim_id=claim_id)
            case Settle(_, round_, watch):
                return partial(queue.settle_leased,
                               round_.outcomes, round_.claim, self.lease_ms,
                               self.settings.retention_ms, self._now(), watch=watch,
                               claim_id=round_.claim_id)
            case Extend(_, jobs):
                return partial(queue.extend_many, jobs,
                               lease_ms=self.lease_ms, now=self._now())
            case TakeToken():
                return partial(take_token, queue.conn,
                               queue.key(TOKEN_ROLE),
                               self._name, self.settings.housekeeping_ms,
                               queue.key(LAYOUT_KEY))
        return None

    def _settle_program(self, action: SendAhead) -> Program[Any]:
        """The program of the settle call that performs ``action`` (its reply read later)."""
        round_ = action.round
        return QueueMethods.settle_leased.program(
            self.queues[action.index], round_.outcomes, round_.claim, self.lease_ms,
            self.settings.retention_ms, self._now(), claim_id=round_.claim_id)

    def _answer(self, action: Action, reply: Any) -> Any:
        """The program's reply to ``action`` from its queue call's ``reply``."""
        if isinstance(action, TakeToken):
            return token_taken(token_reply(reply, self.queues[action.index].name), self._name)
        return reply

    def _notice(self, action: Action) -> None:
        """Perform a notice of the beat program: a log line, a user's hook, a stop."""
        NOTICES[type(action)](self, action)

    def _cancel_asked(self, index: int) -> set[Job]:
        """The jobs of queue ``index`` found cancelled (a handler's among them before it started:
        its flag is set at once)."""
        return self.lineup.cores[index].cancel_asked

    def _report(self, action: Report) -> None:
        """What a round's outcomes came to; a job the server ended cancelled is counted, and a
        handler of it still running (past its time limit) is told."""
        ended = [outcome.job for outcome, verdict in zip(action.outcomes, action.verdicts,
                                                         strict=True)
                 if verdict is Verdict.CANCELLED]
        self.cancelled += len(ended)
        self.flags.request(ended)
        report_settled(action.outcomes, action.verdicts, self.on_ack)

    def _overran(self, job: Job) -> None:
        log_overrun(job, self.settings.time_limit_ms)


def _dropped(shell: LoopShell, action: Dropped) -> None:
    log.warning("job %s attempt %d returned after its lease was given up (time limit or lost "
                "lease); its outcome is dropped", action.job.id, action.job.attempt)


def _stop_asked(shell: LoopShell, action: StopAsked) -> None:
    log.warning("handler raised %s on %s: the consumer stops",
                describe(action.failure or BaseException()), action.job.id)
    shell.stop()


def _unparked(shell: LoopShell, action: Unparked) -> None:
    if shell.announcer is not None:
        shell.announcer.unparked()


# How each notice of the beat program is performed, the same in both shells.
NOTICES: dict[type[Action], Callable[[LoopShell, Any], None]] = {
    Report: LoopShell._report,
    LostLeases: lambda shell, action: warn_lost(action.jobs),
    TellOverrun: lambda shell, action: call_hook(shell.on_overrun, action.job, "on_overrun"),
    Dropped: _dropped,
    StopAsked: _stop_asked,
    NotHandedBack: lambda shell, action: warn_not_handed_back(action.error),
    Failed: lambda shell, action: shell._keeper_failed(action.what, action.error),
    Unparked: _unparked,
}


def own_blocking_client(conn: Any, cap_ms: int) -> Any | None:
    """A connection of ``conn``'s own for blocking reads of up to ``cap_ms``, its read timeout
    raised past them (``park_socket_timeout``); None for a cluster client."""
    return private_twin(conn, park_socket_timeout(socket_timeout_of(conn), cap_ms))
