"""The consumer loop's decisions, with no I/O: what to do next, and how to settle what happened.

``echomq.consumer.Consumer`` (threads, blocking redis-py) and ``echomq.aio.Consumer`` (asyncio)
are two shells around one ``Lineup`` of ``LoopCore``s, a core per queue served: each shell
performs the calls, the core decides them — when housekeeping (recover + promote) is due, which
claims to try (of which queue: ``Lineup``), which leases in hand to extend, which attempt ran
past its time limit, how an outcome (or a handler's directive) is settled, how long to park, and
how to back off on an error. Times given to the core are the shell's monotonic seconds; nothing here
reads a clock, a socket or a thread.

The core holds a *set* of leases in hand: jobs prefetched (claimed, not started), the job whose
handler runs, and outcomes waiting to be sent. A round is one ``settle`` call: the outcomes
waiting, then a claim of the next batch (``Round``). Handlers run in claim order, one at a time
(the asyncio shell may run several at once, each under its own lease and time limit);
an outcome waits for the next round, at most ``settle_delay_ms`` (the keeper sends it otherwise,
so a slow handler holds no earlier ack back). The heartbeat extends every lease in hand in one
call, and the time limit applies to each running attempt. A consumer that just started or woke
claims one job, then doubles its batch while whole batches come back, up to ``capacity`` (the
consumer's ``prefetch``): a parked crowd woken by a small burst shares it rather than one
consumer taking it all. A job claimed before (a retry, or a lease that ran out: perhaps its
handler killed the worker) runs with nothing else in hand, so a worker it takes down charges no
other job an attempt: see ``LoopCore.isolate``.

Starting a prefetched job needs no network, so the core keeps, for each lease in hand, when it
runs out at the earliest by the consumer's clock (``lease_ms`` after the sending of the call
that granted or last extended it): a job within a third of a lease of that is released, never
started (``LoopCore.next_job``). Likewise a prefetched job starts only while the consumer's last
word that its queue is not paused is at most ``pause_check_ms`` old; past that the shell asks
first, and a paused queue's prefetched jobs are released (``LoopCore.pause_checked``).
"""

from __future__ import annotations

from dataclasses import dataclass

from echomq.consumer.core import LoopCore
from echomq.consumer.settings import (
    HOUSEKEEPING_MS,
    MAX_PREFETCH,
    MAX_RESULT_BYTES,
    PARK_CAP_MS,
    PREFETCH,
    Ack,
    Retry,
    Round,
    Settings,
    error_text,
    park_socket_timeout,
)
from echomq.consumer.spread import Spread, SpreadClaim
from echomq.engine.calls import Job

# The core's names, here where its users have always found them (its parts: ``core``,
# ``settings``).
__all__ = [
    "HOUSEKEEPING_MS", "MAX_PREFETCH", "MAX_RESULT_BYTES", "PARK_CAP_MS", "PREFETCH", "Ack",
    "Lineup", "LoopCore", "Retry", "Round", "Settings", "error_text", "park_socket_timeout",
]


@dataclass
class Lineup:
    """A consumer's queues in strict priority order, a core for each: which job in hand runs
    next, and how many jobs a round claims of which queue. One queue is a lineup of one.

    A prefetched job of an earlier queue always runs before a later one's. A round asks the
    first queue for the whole batch, and each next queue only for what the queues before it
    left unfilled (they returned fewer jobs than asked: they had no more ready). So a batch
    holds a later queue's jobs only when no earlier queue had more ready jobs than the round
    takes, and a job that reaches an earlier queue while a batch runs waits for at most the
    rest of that batch (``prefetch`` 1: every job is a fresh choice). The batch size ramps
    from 1 after a start or a park, doubling while whole batches come back, up to the
    prefetch; the prefetch bounds the jobs in hand over all the queues together. A lane
    consumer takes one job at a time: the first queue's lanes, then its flat jobs, then the
    next queue's.

    ``spread``: the queues are the shards of one queue, served as one (``Spread``): a round
    asks every shard at once for a share of the batch, the shard first in line turning each
    round, so a ready shard is asked within N rounds; a prefetched job of any shard runs before
    the next round; the ramp, the prefetch (over all the shards), isolation, pauses and time
    limits are as above; a lane consumer claims one job, trying the shards in the round's
    order."""

    cores: list[LoopCore]
    # How many jobs the next round claims: 1 after a start or a park, doubling up to capacity.
    ramp: int = 1
    # A job claimed before was taken to start: rounds may wait in ``take_isolations``.
    isolating: bool = False
    # Reading ahead (``read_ahead``): the round sent while the batch in hand runs, its reply
    # not read yet, and when it was sent.
    ahead: Round | None = None
    ahead_sent_at: float = 0.0
    # Whether that round's call was written (its reply may be read), and whether the keeper
    # read it and told its outcomes already (``report_due``).
    ahead_written: bool = False
    ahead_reported: bool = False
    # Whether the last round came back whole (as many jobs as it asked for).
    whole: bool = False
    # How long a job of the last batch took to run (s; None: not known), from when the batch
    # came to when the next round was due (``batch_began``, ``batch_done``).
    pace: float | None = None
    batch_at: float | None = None
    batch_size: int = 0
    # The turning start of a spread consumer's rounds (None: strict priority, or one queue).
    spread: Spread | None = None

    @classmethod
    def of(cls, settings: Settings, queues: int, *, spread: bool = False) -> Lineup:
        if queues < 1:
            raise ValueError("a consumer needs at least one queue")
        return cls([LoopCore(settings) for _ in range(queues)],
                   spread=Spread(queues) if spread and queues > 1 else None)

    def claim_order(self, wanted: int) -> list[int]:
        """The queues (by index) in the order a round of ``wanted`` jobs tries them one after
        another: priority order, or a spread consumer's order of the round (turned as
        ``spread_claim`` turns it)."""
        if self.spread is None:
            return list(range(len(self.cores)))
        return self.spread.turn(wanted).order

    def spread_claim(self, wanted: int, now: float | None = None) -> SpreadClaim:
        """A spread consumer's claim round of ``wanted`` jobs over its shards (those resting at
        ``now`` left out)."""
        assert self.spread is not None, "a lineup in strict priority does not spread"
        return self.spread.turn(wanted, now)

    def shards_failed(self, indexes: list[int], now: float, answered: bool) -> bool:
        """Shards (by index) whose calls failed, by an error that heals, while others answered
        (``answered``) or others not resting may still be asked: a spread consumer rests each
        (``Spread.failed``) and goes on (True); any other lineup does not (False: the failure
        stands), nor a spread one with no other shard to ask."""
        if self.spread is None or not (answered or self.spread.others_up(indexes, now)):
            return False
        for index in indexes:
            self.spread.failed(index, now)
        return True

    def shard_answered(self, index: int) -> None:
        """A call to queue ``index`` was answered: a spread consumer's shard rests no more."""
        if self.spread is not None:
            self.spread.answered(index)

    @property
    def settings(self) -> Settings:
        return self.cores[0].settings

    @property
    def in_hand(self) -> bool:
        return any(core.in_hand for core in self.cores)

    def held(self) -> int:
        """Leases in hand over every queue."""
        return sum(len(core.leases) for core in self.cores)

    def room(self) -> int:
        """How many more jobs the consumer may take into hand, over every queue."""
        return max(0, self.settings.capacity - self.held())

    def __post_init__(self) -> None:
        settings = self.settings
        # Whether this consumer sends its next round while a batch runs: one queue, claiming
        # batches of more than one job.
        self.reads_ahead = len(self.cores) == 1 and settings.batch_claims \
            and settings.batch_cap >= 2
        # The largest batch a round claims: the settings' cap; half of it when reading ahead,
        # so the batch running and the batch sent ahead together stay within the prefetch.
        self.batch_cap = settings.batch_cap // 2 if self.reads_ahead else settings.batch_cap

    def round_size(self) -> int:
        """How many jobs the next round claims over all the queues: the ramp within the room
        left (a lane consumer: one, when nothing is in hand)."""
        if not self.settings.batch_claims:
            return 1 if not self.held() else 0
        return min(self.ramp, self.room())

    @staticmethod
    def ask(wanted: int, taken: int) -> int:
        """What a round wanting ``wanted`` jobs asks the next queue for, the earlier queues
        having given ``taken``: only what they left unfilled."""
        return max(0, wanted - taken)

    def round_claimed(self, wanted: int, taken: int) -> None:
        """A round wanting ``wanted`` jobs took ``taken``: a whole batch doubles the next."""
        self.whole = bool(wanted) and taken >= wanted
        if self.whole:
            self.ramp = min(self.ramp * 2, self.batch_cap)

    def rested(self) -> None:
        """The consumer parks (or starts a beat): its next round claims one job again, and
        reads ahead only once a batch has run since."""
        self.ramp, self.whole, self.batch_at = 1, False, None

    # reading ahead ----------------------------------------------------------------------------

    def batch_done(self, now: float) -> None:
        """The batch in hand ran out at ``now`` (the next round is due): its pace is known."""
        if self.batch_at is not None and self.batch_size:
            self.pace = (now - self.batch_at) / self.batch_size
        self.batch_at = None

    def batch_began(self, size: int, now: float) -> None:
        """A round brought ``size`` jobs at ``now``, the next batch to run."""
        if size:
            self.batch_at, self.batch_size = now, size

    def read_ahead(self, now: float) -> Round | None:
        """The round to send now, a job of the batch in hand starting, its reply read when the
        batch has run (``take_ahead``): the outcomes waiting and a claim of the next batch, so
        its round trip overlaps the handlers instead of following them. Only while the queue is
        busy — the batch in hand came whole at the cap: an idle consumer never reads
        ahead — and only when, at the last batch's pace, the jobs in hand run within a third of
        a lease: the batch sent ahead then starts (or is extended by the heartbeat) long before
        its leases run out. None when there is nothing to send ahead."""
        if not self.reads_ahead or self.ahead is not None or self.isolating or not self.whole \
                or self.batch_size < self.batch_cap or self.pace is None:
            return None
        core = self.cores[0]
        if self.pace * len(core.leases) > self.settings.lapse_margin_s \
                or any(job.attempt > 1 for job in core.running):
            return None
        claim = min(self.ramp, self.room())
        if claim < 1:
            return None
        self.ahead, self.ahead_sent_at = core.take_round(claim, now=now), now
        self.ahead_written = self.ahead_reported = False
        return self.ahead

    def take_ahead(self) -> Round | None:
        """The round sent ahead whose reply is to be read now, if any (taken: read once)."""
        round_, self.ahead = self.ahead, None
        return round_

    def report_due(self, now: float) -> bool:
        """Whether the keeper reads the reply of the round sent ahead now and tells its outcomes
        (``on_ack`` and the rest): they have waited ``settle_delay_ms`` for a batch still
        running, as an outcome waiting for its round would have (``LoopCore.outbox_due``)."""
        report_at = self._report_at()
        return report_at is not None and now >= report_at

    def _report_at(self) -> float | None:
        ahead = self.ahead
        if ahead is None or not ahead.outcomes or not self.ahead_written \
                or self.ahead_reported:
            return None
        return self.ahead_sent_at + self.settings.settle_delay_ms / 1000

    def next_job(self, now: float) -> tuple[int, Job] | None:
        """The next job to run, with its queue's index: the earliest queue's first prefetched
        job. A job claimed before runs with nothing else in hand: every queue's jobs not
        started go back and their outcomes out (each core's ``isolation``), and the ramp starts
        over."""
        for index, core in enumerate(self.cores):
            job = core.next_job(now)
            if job is None:
                continue
            if job.attempt > 1:
                self.ramp, self.isolating = 1, True
                for other in self.cores:
                    if other is not core:
                        other.isolate()
            return index, job
        return None

    def pause_checks_due(self, now: float) -> list[int]:
        """The queues (by index) to ask whether they are paused before the next job starts:
        each whose prefetched jobs may start and whose last word on it is too old (see
        ``LoopCore.pause_check_due``). The shell asks each once, then takes ``next_job``."""
        return [index for index, core in enumerate(self.cores) if core.pause_check_due(now)]

    def take_isolations(self) -> list[tuple[int, Round]]:
        """The rounds to send before a job claimed before starts (see ``next_job``)."""
        self.isolating = False
        return [(index, round_) for index, core in enumerate(self.cores)
                if (round_ := core.take_isolation()) is not None]

    def housekeeping_due(self, now: float) -> bool:
        """Whether any queue's turn to housekeep has come (``LoopCore.take_housekeeping``)."""
        return any(now >= core.housekeeping_at for core in self.cores)

    def next_tick(self, now: float) -> float:
        """Seconds until any queue's keeper work is due (a round sent ahead to tell included)."""
        report_at = self._report_at()
        tick = min(core.next_tick(now) for core in self.cores)
        return tick if report_at is None else max(0.0, min(tick, report_at - now))
