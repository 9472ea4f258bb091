"""The rounds of a consumer's beat (``echomq.consumer.beat``), written once: each settle call —
the claim round, the round sent ahead while a batch runs and the reading of its reply, the
rounds that send what waits (handing back the jobs not started on a stop) — and what its reply
brings into hand. No I/O: the shell performs the actions they yield."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from echomq.consumer.actions import (
    ClaimLane,
    Collect,
    Failed,
    NotHandedBack,
    Nudge,
    Program,
    Report,
    SendAhead,
    Settle,
    SettleAll,
)
from echomq.consumer.loop import Lineup
from echomq.consumer.settings import Clock, Round, Settings
from echomq.engine.calls import Job


class Host(Protocol):
    """What the programs read of the shell that performs them."""

    lineup: Lineup
    clock: Clock | None  # the ms clock of every transition (None: the server's)
    concurrency: int  # how many handlers run at once

    @property
    def stopping(self) -> bool: ...

    @property
    def parking_timeout_s(self) -> float | None:
        """The read timeout of the parking connection (None: none)."""

    def monotonic(self) -> float: ...

    def heals(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a server or connection error that heals by waiting."""


class Rounds:
    """The settle calls of a beat over its ``host``'s lineup (``Beat`` is the rest of it)."""

    host: Host
    # Until when (monotonic s) the keeper idles, unless nudged; None: it may not be idling
    # (so a change in hand nudges it). A change with a later deadline needs no nudge.
    keeper_until: float | None = None

    @property
    def lineup(self) -> Lineup:
        return self.host.lineup

    @property
    def settings(self) -> Settings:
        return self.host.lineup.settings

    def now(self) -> float:
        return self.host.monotonic()

    def claim_round(self) -> Program[None]:
        """One settle call per queue, in priority order, each claiming what the queues before it
        left of the round (the lineup's rule). A lane consumer takes one job: a queue's lanes,
        then its flat jobs, then the next queue's (a spread consumer's shards in the round's
        order). A spread consumer's flat round: ``spread_round``."""
        if self.lineup.spread is not None and not self.settings.lanes:
            yield from self.spread_round()
            return
        wanted = self.lineup.round_size()
        self.lineup.batch_done(self.now())
        taken = 0
        for index in self.lineup.claim_order(wanted):
            core = self.lineup.cores[index]
            asked = self.lineup.ask(wanted, taken)
            if asked and self.settings.lanes:
                sent_at = self.now()
                watch, claim_id = core.watches(Round([], 1)), core.next_claim_id(sent_at)
                job = yield ClaimLane(index, watch, claim_id)
                sent_at = core.claim_answered(claim_id, sent_at)
                if job is not None:
                    yield from self.took(index, [job], sent_at)
                    taken += 1
                    continue
            claimed = yield from self.send(index, core.take_round(asked, now=self.now()))
            taken += len(claimed)
        self.lineup.round_claimed(wanted, taken)
        self.lineup.batch_began(taken, self.now())

    def spread_round(self) -> Program[None]:
        """A spread consumer's claim round: every shard's settle call (its outcomes waiting, its
        share of the claim) sent together in one ``SettleAll``; while the round comes back short
        and a shard not found dry may hold more, its shortfall is asked of those shards in one
        more (``echomq.consumer.spread``)."""
        lineup = self.lineup
        wanted = lineup.round_size()
        lineup.batch_done(self.now())
        claim = lineup.spread_claim(wanted, self.now())
        asks, first = claim.asks(), True
        while first or any(asks):
            got = yield from self.send_rounds(
                [(index, core.take_round(asks[index], now=self.now()))
                 for index, core in enumerate(lineup.cores)])
            claim.took(asks, got)
            asks, first = claim.asks(), False
        lineup.round_claimed(wanted, claim.taken)
        lineup.batch_began(claim.taken, self.now())

    def send_rounds(self, rounds: Sequence[tuple[int, Round]]) -> Program[list[int]]:
        """The settle calls of ``rounds`` (queue index, round) sent together (``SettleAll``):
        what each claimed goes into hand; how many jobs each queue gave (by index). A call that
        fails leaves its outcomes for the next round, as ``replied`` does for one; the first
        failure is raised once every call's reply has been taken, unless the queues are a spread
        consumer's shards, every failure heals by waiting and another call was answered or
        another shard is not resting: then each failed shard rests (``Lineup.shards_failed``)
        and the others go on (a short round asks them what it lacks)."""
        cores = self.lineup.cores
        got = [0] * len(cores)
        calls = tuple(Settle(index, round_, cores[index].watches(round_))
                      for index, round_ in rounds if round_.outcomes or round_.claim)
        if not calls:
            return got
        sent_at = self.now()
        try:
            replies = list((yield SettleAll(calls)))
        except Exception as exc:
            replies = [exc] * len(calls)
        failures: list[tuple[int, Exception]] = []
        for call, reply in zip(calls, replies, strict=True):
            core = cores[call.index]
            if isinstance(reply, Exception):
                core.unsent(call.round, self.now())
                failures.append((call.index, reply))
                continue
            self.lineup.shard_answered(call.index)
            verdicts, jobs = reply
            yield from self.took(call.index, jobs,
                                 core.claim_answered(call.round.claim_id, sent_at))
            yield Report(call.round.outcomes, verdicts)
            got[call.index] = len(jobs)
        if failures:
            answered = len(failures) < len(calls)
            healing = all(self.host.heals(exc) for _, exc in failures)
            if not (healing and self.lineup.shards_failed([index for index, _ in failures],
                                                          self.now(), answered)):
                raise failures[0][1]
        return got

    def send(self, index: int, round_: Round) -> Program[list[Job]]:
        """One settle call for ``round_`` on queue ``index``; what it claimed goes into hand (and
        is returned). If it fails, its outcomes wait for the next round."""
        if not round_.outcomes and not round_.claim:
            return []
        core = self.lineup.cores[index]
        sent_at = self.now()
        return (yield from self.replied(index, round_, sent_at,
                                        Settle(index, round_, core.watches(round_))))

    def replied(self, index: int, round_: Round, sent_at: float,
                action: Settle | Collect, *, told: bool = False) -> Program[list[Job]]:
        """The reply of ``round_``, sent at ``sent_at`` on queue ``index`` (``action`` sends it,
        or reads the reply of it sent ahead): what it claimed goes into hand (and is returned),
        and its outcomes are told unless they were (``told``: ``report_ahead``). If it fails,
        its outcomes wait for the next round."""
        core = self.lineup.cores[index]
        try:
            verdicts, jobs = yield action
        except Exception:
            core.unsent(round_, self.now())
            raise
        yield from self.took(index, jobs, core.claim_answered(round_.claim_id, sent_at))
        if not told:
            yield Report(round_.outcomes, verdicts)
        return list(jobs)

    def send_ahead(self, round_: Round) -> Program[None]:
        """Send ``round_`` (the one queue's) now, its reply read by ``collect``; if it cannot be
        sent, its outcomes wait for the next round."""
        try:
            yield SendAhead(0, round_)
        except Exception:
            self.lineup.take_ahead()
            self.lineup.cores[0].unsent(round_, self.now())
            raise
        self.lineup.ahead_written = True

    def collect(self) -> Program[None]:
        """Read the reply of the round sent ahead, if one was (and was written: the keeper may
        come between the loop's step and its write): its jobs come into hand, the next
        batch."""
        lineup = self.lineup
        if not lineup.ahead_written:
            return
        told = lineup.ahead_reported
        round_ = lineup.take_ahead()
        if round_ is None:
            return
        lineup.batch_done(self.now())
        jobs = yield from self.replied(0, round_, lineup.ahead_sent_at, Collect(0), told=told)
        if not lineup.isolating:  # else its jobs go back at once
            lineup.round_claimed(round_.claim, len(jobs))
            lineup.batch_began(len(jobs), self.now())

    def report_ahead(self) -> Program[None]:
        """The keeper's, once the outcomes of the round sent ahead waited ``settle_delay_ms`` for
        a batch still running: read its reply and tell them, so a slow job holds no earlier
        ``on_ack`` back; the jobs it claimed wait for ``collect``, which reads the same reply."""
        lineup = self.lineup
        round_ = lineup.ahead
        if round_ is None:
            return
        lineup.ahead_reported = True
        verdicts, _jobs = yield Collect(0, peek=True)
        yield Report(round_.outcomes, verdicts)

    def took(self, index: int, jobs: Sequence[Job], sent_at: float) -> Program[None]:
        """``jobs`` of queue ``index``, claimed by a call sent at ``sent_at``, are in hand (a
        claim with nothing of the queue in hand sent its watch tokens in its own flush)."""
        core = self.lineup.cores[index]
        core.sent()
        now = self.now()
        core.claimed(jobs, now, sent_at)
        if jobs:  # leases to extend: the keeper looks
            yield from self.nudge(now + self.settings.extend_every_s
                                  if self.settings.heartbeat else float("inf"))

    def send_all(self, *, hand_back: bool) -> Program[None]:
        """Send every queue's outcomes waiting (with ``hand_back``, its jobs not started); a
        failure is raised after every queue had its try."""
        failure: Exception | None = None
        try:
            yield from self.collect()
        except Exception as exc:
            failure = exc
        rounds = [(index, core.take_round(hand_back=hand_back))
                  for index, core in enumerate(self.lineup.cores)]
        # A spread consumer's shards: their rounds in one round trip.
        sendings = [self.send_rounds(rounds)] if self.lineup.spread is not None \
            else [self.send(index, round_) for index, round_ in rounds]
        for sending in sendings:
            try:
                yield from sending
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def wind_down(self) -> Program[None]:
        """Send the outcomes waiting; on a stop, hand back the jobs not started with them."""
        yield from self.send_all(hand_back=self.host.stopping)

    def hand_back_quietly(self) -> Program[None]:
        """The last round of a loop that ends: what it cannot send is logged; those leases run
        out and recover puts their jobs back."""
        try:
            yield from self.wind_down()
        except Exception as exc:
            yield NotHandedBack(exc)

    def nudge(self, due: float) -> Program[None]:
        """Something in hand changed, with a new deadline at ``due`` (monotonic s): the keeper
        looks again, unless it idles until sooner than that (it looks then anyway)."""
        if self.keeper_until is not None and due >= self.keeper_until:
            return
        self.keeper_until = None
        yield Nudge()

    def guarded(self, what: str, program: Program[object]) -> Program[None]:
        try:
            yield from program
        except Exception as exc:
            yield Failed(what, exc)
