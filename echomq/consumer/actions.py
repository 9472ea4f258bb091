"""What the beat program (``echomq.consumer.beat``) asks its shell to do, one action at a time,
and ``Stepper``, how a shell walks it.

The program is a generator: it yields an action, the shell performs it — the blocking shell
with its threads, the asyncio shell with its tasks — and sends back the reply (or throws in what
performing it raised). Most actions are I/O on one queue of the consumer (``index``: its place in
priority order); a few are about the shell's own concurrency (``Nudge``, ``Idle``, ``Spawn``,
``WaitOne``, ``SettleInFlight``, ``KeeperDone``), and the notices (``Report`` and after) are
log lines and user hooks, performed the same way by both (``echomq.consumer.shell``). No I/O here.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from echomq.consumer.settings import Round
from echomq.engine.calls import Job, Outcome, Verdict

T = TypeVar("T")


class Action:
    """One thing the program asks of its shell."""

    # Performed by the blocking shell under its lock (no I/O: its threads' coordination).
    local = False


@dataclass(frozen=True)
class OnQueue(Action):
    """An action on one queue of the consumer: ``index``, its place in priority order."""

    index: int


# I/O on a queue -------------------------------------------------------------------------------

@dataclass(frozen=True)
class TakeToken(OnQueue):
    """Ask for queue ``index``'s housekeeping token: reply whether this consumer took it."""


@dataclass(frozen=True)
class Housekeep(OnQueue):
    """Recover, then promote, queue ``index`` in steps until a step leaves nothing due, then
    (``trim``) end its abandoned staging and trim its dead jobs to their bounds: reply what was
    done (``Housekept``)."""

    trim: bool = True


@dataclass(frozen=True)
class PauseCheck(OnQueue):
    """Ask whether queue ``index`` is paused: reply a bool."""


@dataclass(frozen=True)
class ClaimLane(OnQueue):
    """One lane claim of queue ``index`` under ``claim_id``: reply the job, or None."""

    watch: bool
    claim_id: str


@dataclass(frozen=True)
class Settle(OnQueue):
    """One settle call for ``round`` on queue ``index``: reply (verdicts, jobs claimed)."""

    round: Round
    watch: bool


@dataclass(frozen=True)
class SettleAll(Action):
    """The settle calls ``calls`` of one round, on several queues of one client (a spread
    consumer's shards), sent together: on one server, one pipeline, a round trip; on a cluster,
    one round trip too, each call sent once to its own slot's node, every node's calls written
    before any reply is read (``echomq.engine.scatter``). Reply: for each call, in order,
    (verdicts, jobs claimed), or the exception that call met (a server error, a lost
    connection): each call's fate is its own. Raised: an error that failed them all (the
    pipeline's connection lost)."""

    calls: tuple[Settle, ...]


@dataclass(frozen=True)
class SendAhead(OnQueue):
    """Send the settle call for ``round`` on queue ``index`` now and read its reply later
    (``Collect``), so the batch in hand runs meanwhile: reply nothing."""

    round: Round


@dataclass(frozen=True)
class Collect(OnQueue):
    """Read the reply of the round sent ahead on queue ``index``: reply (verdicts, jobs
    claimed), as ``Settle`` does. ``peek``: the keeper's read while a handler runs, the reply
    kept for the ``Collect`` that takes it (a second read gives the same reply)."""

    peek: bool = False


@dataclass(frozen=True)
class Extend(OnQueue):
    """Extend the leases of ``jobs`` of queue ``index`` in one call: reply their verdicts."""

    jobs: list[Job]


@dataclass(frozen=True)
class CancelAsked(OnQueue):
    """The heartbeat, or a cancel notice, found ``jobs`` of queue ``index`` cancelled while
    their handlers run: set each one's flag (``cancel_requested``) and cancel an ``async def``
    handler's task."""

    jobs: list[Job]


@dataclass(frozen=True)
class Run(OnQueue):
    """Run the handler on ``job`` of queue ``index``: reply (returned, failure)."""

    job: Job


@dataclass(frozen=True)
class Read(Action):
    """Read every queue's heads through the parking connection (``ready``: count the jobs
    waiting too; ``before_park``: the registry record rides in the flush when due): reply a
    Sighting per queue."""

    ready: bool
    before_park: bool = True


@dataclass(frozen=True)
class ServerTime(Action):
    """Reply the server's clock (ms)."""


@dataclass(frozen=True)
class Block(Action):
    """Park on every wake and watch key at most ``timeout_s``: reply "wake", "watch" or None
    (the timeout, or a stop)."""

    timeout_s: float


@dataclass(frozen=True)
class Watch(OnQueue):
    """Leave watch tokens on queue ``index``: a consumer still parked watches in this one's
    place."""


@dataclass(frozen=True)
class PauseAfter(Action):
    """A beat failed with ``error``: wait as long as it says (stop-aware), or raise when it
    cannot heal (the shell classifies it)."""

    error: Exception


# the shell's concurrency --------------------------------------------------------------------

@dataclass(frozen=True)
class Nudge(Action):
    """Something in hand changed: the keeper looks again (started if it is not running), and
    the reader of cancel notices reads while anything is in hand."""

    local = True


@dataclass(frozen=True)
class Idle(Action):
    """The keeper has nothing to do for ``wait_s``, unless nudged."""

    wait_s: float
    local = True


@dataclass(frozen=True)
class Spawn(OnQueue):
    """Run ``job``'s handler concurrently (the program ``Beat.process``), not waiting for it."""

    job: Job


@dataclass(frozen=True)
class WaitOne(Action):
    """Wait until a spawned handler finishes or a stop is asked (``wake``: or a wake token
    arrives, as a job to fill a free place may have)."""

    wake: bool


@dataclass(frozen=True)
class SettleInFlight(Action):
    """Wait until every spawned handler has finished."""


@dataclass(frozen=True)
class KeeperDone(Action):
    """Nothing is in hand: let the keeper see it and end (the blocking one idles by itself)."""


# notices: log lines and hooks -----------------------------------------------------------------

@dataclass(frozen=True)
class Report(Action):
    """What each outcome of a round came to (``on_ack``, log lines)."""

    outcomes: Sequence[Outcome]
    verdicts: Sequence[Verdict]


@dataclass(frozen=True)
class LostLeases(Action):
    """The heartbeat found these leases lost."""

    jobs: list[Job]


@dataclass(frozen=True)
class OnJob(Action):
    """A notice about ``job``."""

    job: Job


class Overran(OnJob):
    """``job`` ran past its time limit: say so, and cancel its handler if it can be."""


class TellOverrun(OnJob):
    """Call ``on_overrun`` with ``job``."""


class Dropped(OnJob):
    """``job``'s handler returned after its lease was given up: its outcome is dropped."""


@dataclass(frozen=True)
class StopAsked(OnJob):
    """``job``'s handler raised ``failure`` (SystemExit, KeyboardInterrupt): the consumer
    stops."""

    failure: BaseException | None


@dataclass(frozen=True)
class NotHandedBack(Action):
    """The last round of a loop could not be sent."""

    error: Exception


@dataclass(frozen=True)
class Failed(Action):
    """The keeper's work ``what`` failed with ``error`` (the loop meets it on its next call)."""

    what: str
    error: Exception


@dataclass(frozen=True)
class Unparked(Action):
    """A park ended: the registry record's own beats go on."""


Program = Generator[Action, Any, T]


class Stepper(Generic[T]):
    """Walks a program: ``step`` gives its next action (None once it has ended, its value in
    ``result``), ``reply`` answers the last one with a value, or with the exception performing
    it raised (thrown into the program where it yielded, as a call would raise it)."""

    def __init__(self, program: Program[T]) -> None:
        self._program = program
        self._value: Any = None
        self._error: BaseException | None = None
        self._result: Any = None

    @property
    def result(self) -> T:
        """What the program returned, once ``step`` gave None."""
        return cast(T, self._result)

    def step(self) -> Action | None:
        value, error = self._value, self._error
        self._value = self._error = None
        try:
            if error is not None:
                return self._program.throw(error)
            return self._program.send(value)
        except StopIteration as ended:
            self._result = ended.value
            return None

    def reply(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
