"""How a consumer serving N queues as one (the shards of a sharded queue: ``spread``) splits a
claim round over them, with no I/O.

A round's claim is split evenly over the first shards of the round's order, as many as give each
call at least ``MIN_ASK`` jobs (one shard for a round of fewer), the remainder going one job each
to the first of them; the order starts one shard later each round (``Spread.turn``). So each
shard is first in the order once every N rounds: a shard holding a ready job is asked for one
within N claim rounds, whatever the others hold.

The asks of a round go out together (one pipelined call per shard: ``SettleAll``). A shard that
returns fewer jobs than it was asked for is dry for the rest of the round; when the round came
back short, what it lacks is asked again of the shards not found dry (those that filled their ask,
and those asked for none), split the same way, until the round is whole or every shard is dry
(``SpreadClaim``). Each call of a round asks for no more than the round still lacks, so a round
never takes more than its size and the prefetch bounds the jobs in hand over all the shards
together, as for one queue.

A shard whose call failed by an error that heals by waiting (its node down, the cluster failing
over) while another shard's call was answered rests: it is asked for no jobs for 0.1 s, doubling
while it keeps failing, up to 1 s (``Spread.failed``; its outcomes waiting are still sent each
round), and the other shards are served at their pace meanwhile. It is asked again once its
rest is over, and rests no more once a call of it is answered. The fairness bound holds among
the shards not resting. When every call of a round fails, the consumer backs off as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from echomq.consumer.settings import BACKOFF_FIRST_S, SETTLE_PAUSE_CAP_S

REST_FIRST_S = BACKOFF_FIRST_S  # a failing shard's first rest from claims
REST_CAP_S = SETTLE_PAUSE_CAP_S  # its longest

# The fewest jobs a call of a round asks a shard for, while the round has as many: a call costs
# the server a fixed part whatever it claims, so a round of 128 asks 4 shards for 32 each rather
# than 12 for 10 or 11. The start still turns by one shard a round, so the bound holds.
DEFAULT_MIN_ASK = 32
MIN_ASK = DEFAULT_MIN_ASK


def split(wanted: int, order: Sequence[int], shards: int) -> list[int]:
    """What each of ``shards`` shards is asked for (by index) of ``wanted`` jobs spread over the
    first shards of ``order``, as many as give each at least ``MIN_ASK`` (one at least): an
    even share each, one more for each of the first ``wanted mod`` their number; none for a
    shard not among them."""
    asks = [0] * shards
    if wanted <= 0 or not order:
        return asks
    order = order[:max(1, wanted // MIN_ASK)]
    share, rest = divmod(wanted, len(order))
    for place, index in enumerate(order):
        asks[index] = share + (1 if place < rest else 0)
    return asks


@dataclass
class SpreadClaim:
    """One claim round over the shards: ``wanted`` jobs, asked in ``order`` (see the module)."""

    wanted: int
    order: list[int]
    shards: int
    taken: int = 0
    dry: set[int] = field(default_factory=set)

    def asks(self) -> list[int]:
        """What each shard is asked for next: the round's shortfall over the shards not dry (all
        zeros once the round is whole or every shard is dry)."""
        live = [index for index in self.order if index not in self.dry]
        return split(self.wanted - self.taken, live, self.shards)

    def took(self, asks: Sequence[int], got: Sequence[int]) -> None:
        """The shards asked ``asks`` returned ``got`` jobs each: one that returned fewer than it
        was asked for is dry for the rest of the round."""
        for index, (asked, returned) in enumerate(zip(asks, got, strict=True)):
            if asked and returned < asked:
                self.dry.add(index)
        self.taken += sum(got)


@dataclass
class Spread:
    """The rotating start of a spread consumer's claim rounds over ``shards`` shards, and the
    shards resting from claims after a failure (see the module)."""

    shards: int
    start: int = 0
    resting: dict[int, float] = field(default_factory=dict)  # shard -> rests until (s)
    rests: dict[int, float] = field(default_factory=dict)  # shard -> its last rest's length

    def order(self) -> list[int]:
        """The shards in this round's order: from the start, around."""
        return [(self.start + step) % self.shards for step in range(self.shards)]

    def turn(self, wanted: int, now: float | None = None) -> SpreadClaim:
        """The claim round of ``wanted`` jobs that goes out now (at ``now``: the shards resting
        then asked for none); the next one claiming anything starts one shard later."""
        claim = SpreadClaim(wanted, self.order(), self.shards, dry=self.left_out(now))
        if wanted > 0:
            self.start = (self.start + 1) % self.shards
        return claim

    def left_out(self, now: float | None) -> set[int]:
        """The shards resting at ``now`` (None: none); none when all of them are."""
        if now is None:
            return set()
        out = {index for index, until in self.resting.items() if until > now}
        return out if len(out) < self.shards else set()

    def failed(self, index: int, now: float) -> None:
        """Shard ``index``'s call failed at ``now`` (by an error that heals): it rests from
        claims, twice as long as last time it failed in a row (REST_FIRST_S to REST_CAP_S)."""
        rest = min(max(self.rests.get(index, 0.0) * 2, REST_FIRST_S), REST_CAP_S)
        self.rests[index], self.resting[index] = rest, now + rest

    def others_up(self, failed: Sequence[int], now: float) -> bool:
        """Whether a shard other than ``failed`` is not resting at ``now``: a round whose calls
        all failed may still ask it (the failed ones rest meanwhile)."""
        return any(index not in failed and self.resting.get(index, 0.0) <= now
                   for index in range(self.shards))

    def answered(self, index: int) -> None:
        """A call of shard ``index`` was answered: it rests no more."""
        self.rests.pop(index, None)
        self.resting.pop(index, None)


def sharded(queue: Any) -> bool:
    """Whether ``queue`` is a sharded queue of more than one shard (its ``shards``)."""
    shards = getattr(queue, "shards", 1)
    return isinstance(shards, int) and shards > 1


def shards_of(queue_or_queues: Any, spread: bool) -> tuple[Any, bool]:
    """What a consumer serves, and whether it spreads over it: a sharded queue (``shards`` > 1),
    alone or as a list of one, is its ``shard_queues``, spread; anything else as given
    (``spread``: a list of queues served as one, e.g. a sharded queue's shards). A sharded queue
    listed with others is refused: it is served by a consumer of its own."""
    if isinstance(queue_or_queues, list | tuple) and len(queue_or_queues) == 1:
        queue_or_queues = queue_or_queues[0]  # a list of one queue serves it
    if sharded(queue_or_queues):
        return list(queue_or_queues.shard_queues), True
    if isinstance(queue_or_queues, list | tuple) and any(map(sharded, queue_or_queues)):
        raise ValueError("a sharded queue is served by a consumer of its own (its shards "
                         "spread), not listed with other queues")
    return queue_or_queues, spread
