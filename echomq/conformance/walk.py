"""A seeded random sequence of transitions on both executors, checked step by step.

One queue is driven through enqueue, claim, ack, retry, extend, progress, step, settle,
extend_many, recover, promote, cancel, trim_dead, enqueue_unique, enqueue_after, after and
enqueue_many on an explicit clock that jumps forward, with current and stale fences, and now and
then a malformed call from the case table. After every step both executors' replies must be the
same bytes and their keyspaces equal, and both must agree with the model
(echomq.conformance.model).
The same seed gives the same sequence, so a difference found on one server can be replayed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from echomq.conformance.cases import NOW, all_cases
from echomq.conformance.harness import Outcome, Pair, parity_differences
from echomq.conformance.model import Model, int_field, normalise
from echomq.conformance.resp import Arg, parse
from echomq.engine.transitions import (
    ACK,
    ACK_RESULT,
    AFTER,
    CANCEL,
    CLAIM,
    ENQUEUE,
    ENQUEUE_AFTER,
    ENQUEUE_DELAYED,
    ENQUEUE_MANY,
    ENQUEUE_UNIQUE,
    EXTEND,
    EXTEND_MANY,
    PROGRESS,
    PROMOTE,
    RECOVER,
    RETRY,
    SETTLE,
    STEP,
    TRIM_DEAD,
    Transition,
)

BASE = b"emq:{q}:"
IDS = [b"JOB:%d" % i for i in range(1, 9)]
PAYLOADS = [b"", b"p", b"\x00\xff\r\n$-1\r\n", b"*3\r\n", b"x" * 300]
TICKS = [0, 0, 1, 7, 1_000, 30_000, 600_000]
# A tombstone's retention expires by the server's real clock, whatever the sequence's `now`: it
# outlasts any run, so neither executor's tombstone expires before the two are compared (a minute
# did not, on a loaded machine).
RETENTION_MS = 86_400_000
# A TTL a step gives a key must outlast the walk (see Walk.short_lived).
SHORTEST_TTL_MS = 3_600_000
Call = tuple[Transition, list[Arg]]


def key(role: bytes, job_id: bytes = b"") -> bytes:
    return BASE + (b"job:" + job_id if role == b"job" else role)


@dataclass
class WalkResult:
    steps: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)


class Walk:
    """The random sequence of ``seed`` on ``pair``'s executors, with the model alongside."""

    def __init__(self, pair: Pair, seed: int) -> None:
        self.pair = pair
        self.rng = random.Random(seed)
        self.model = Model(pair.protocol)
        self.now = NOW
        self.known = list(IDS)
        self.malformed = [(case.transition, case.argv) for case in all_cases()
                          if case.expect.startswith(b"-") and not case.setup]
        self.makers: list[Callable[[], Call]] = [
            self.enqueue, self.enqueue, self.claim, self.claim, self.ack, self.retry,
            self.extend, self.settle, self.settle, self.extend_many, self.recover, self.promote,
            self.bad, self.enqueue_later, self.ack_result, self.progress, self.cancel,
            self.trim_dead, self.unique, self.enqueue_after, self.after, self.enqueue_many,
            self.record_step]

    def run(self, steps: int, between_steps: Callable[[], None] = lambda: None) -> WalkResult:
        """Up to ``steps`` steps; stops at the first difference (the states part there).
        ``between_steps`` runs before each step (it may raise to end the walk there)."""
        result = WalkResult()
        self.pair.reset()
        for index in range(1, steps + 1):
            between_steps()
            self.now += self.rng.choice(TICKS)
            transition, argv = self.rng.choice(self.makers)()
            result.steps[transition.name] = result.steps.get(transition.name, 0) + 1
            found = self.step(transition, argv)
            if found:
                result.differences = [f"step {index}: {transition.name} {argv!r}"[:300], *found]
                break
        return result

    def step(self, transition: Transition, argv: list[Arg]) -> list[str]:
        """One call on both executors and the model: what differs (empty when nothing does)."""
        expected = self.model.call(transition, argv)
        outcomes = self.pair.run(transition, argv)
        found = parity_differences(outcomes)
        reply = outcomes["lua"].reply
        if reply != expected:
            found.append(f"the model expects {expected[:80]!r}, the server sent {reply[:80]!r}")
        elif normalise(outcomes["lua"].after) != self.model.render():
            found.append("the keyspace differs from the model's")
        return found or self.short_lived(outcomes["lua"])

    def short_lived(self, outcome: Outcome) -> list[str]:
        """Keys the step gave a TTL (on the server's real clock) that may run out before the walk
        ends: the model keeps no clock, so such a key would part it from the servers some steps
        later, on a timing, not here where the call set it."""
        found = []
        for name, (_, _, expires) in outcome.after.items():
            if not expires or outcome.before.get(name, (None, None, False))[2]:
                continue
            ttl = parse(self.pair.inspect.call("PTTL", self.pair.scratch.prefix("lua") + name))
            if isinstance(ttl, int) and 0 <= ttl < SHORTEST_TTL_MS:
                found.append(f"key {name!r} expires in {ttl} ms on the server's clock, within the "
                             f"walk (the model has no clock)")
        return found

    # the calls --------------------------------------------------------------------------------

    def pick(self) -> bytes:
        """Mostly a job under a lease (so acks, retries and extends land), else any id met."""
        leased = [member for member, _ in self.model.zitems(key(b"active"))]
        if leased and self.rng.random() < 0.8:
            return self.rng.choice(leased)
        return self.rng.choice(self.known)

    def fresh(self) -> bytes:
        """Mostly an id never admitted (rows outlive acks as tombstones), else one met before."""
        if self.rng.random() < 0.25:
            return self.rng.choice(self.known)
        job_id = b"JOB:w%d" % len(self.known)
        self.known.append(job_id)
        return job_id

    def fence(self, job_id: bytes) -> int:
        """The row's current fence, or now and then one that is not."""
        current = int_field(self.model.hget(key(b"job", job_id), b"f"), 1)
        return max(1, current + self.rng.choice([0, 0, 0, 0, 1, -1]))

    def enqueue(self) -> Call:
        job_id = self.fresh()
        return ENQUEUE, [3, key(b"job", job_id), key(b"pending"), key(b"wake"), job_id,
                         self.rng.choice(PAYLOADS), self.now]

    def enqueue_later(self) -> Call:
        job_id = self.fresh()
        due = [self.rng.choice([0, 1_000]), self.rng.choice([0, self.now + 5_000])]
        return ENQUEUE_DELAYED, [3, key(b"job", job_id), key(b"delayed"), key(b"wake"), job_id,
                                 self.rng.choice(PAYLOADS), self.now, *due]

    def enqueue_many(self) -> Call:
        """Up to four jobs, fresh or met before (an id twice now and then), delayed or not,
        at a priority or not."""
        jobs: list[Arg] = []
        for _ in range(self.rng.randint(0, 4)):
            jobs += [self.fresh(), self.rng.choice(PAYLOADS), self.rng.choice([0, 0, 1_000]),
                     self.rng.choice([0, 0, 5, -3])]
        return ENQUEUE_MANY, [3, key(b"pending"), key(b"delayed"), key(b"wake"), self.now,
                              *jobs]

    def unique(self) -> Call:
        """A unique enqueue on one of two dedupe keys: a throttle's window and a dedupe's
        ``dedupe_ms`` (the TTL the end hook gives the key when its job ends) are TTLs on the
        server's real clock, so they outlast any run, as a tombstone's retention does; a
        debounce's period only moves a due time on the sequence's clock."""
        job_id, mode = self.fresh(), self.rng.choice([b"dedupe", b"debounce", b"throttle"])
        period = RETENTION_MS if mode == b"throttle" else self.rng.choice([0, 1_000])
        if mode == b"dedupe" and period:  # the same draws as ever: a seed replays as before
            period = RETENTION_MS
        return ENQUEUE_UNIQUE, [5, key(b"pending"), key(b"delayed"), key(b"job", job_id),
                                key(b"wake"), key(b"dedupe:" + self.rng.choice([b"a", b"b"])),
                                job_id, self.rng.choice(PAYLOADS), self.now, mode, period,
                                self.rng.choice([0, 0, 500])]

    def claim(self) -> Call:
        return CLAIM, [3, key(b"pending"), key(b"active"), key(b"fence"),
                       self.rng.choice([1, 1_000, 30_000]), self.now]

    def ack(self) -> Call:
        job_id = self.pick()
        return ACK, [2, key(b"active"), key(b"job", job_id), job_id, self.fence(job_id),
                     self.rng.choice([0, RETENTION_MS])]

    def ack_result(self) -> Call:
        job_id = self.pick()
        return ACK_RESULT, [2, key(b"active"), key(b"job", job_id), job_id, self.fence(job_id),
                            self.rng.choice([0, RETENTION_MS]), self.rng.choice(PAYLOADS)]

    def progress(self) -> Call:
        job_id = self.pick()
        return PROGRESS, [2, key(b"active"), key(b"job", job_id), job_id, self.fence(job_id),
                          self.rng.choice(PAYLOADS)]

    def record_step(self) -> Call:
        job_id = self.pick()
        return STEP, [2, key(b"active"), key(b"job", job_id), job_id, self.fence(job_id),
                      self.rng.choice([b"charge", b"email"]), self.rng.choice(PAYLOADS)]

    def retry(self) -> Call:
        job_id = self.pick()
        return RETRY, [4, key(b"active"), key(b"delayed"), key(b"dead"), key(b"job", job_id),
                       job_id, self.fence(job_id), self.rng.choice([0, 1_000]),
                       self.rng.choice([1, 2, 3]), b"boom", self.now]

    def extend(self) -> Call:
        job_id = self.pick()
        return EXTEND, [2, key(b"active"), key(b"job", job_id), job_id, self.fence(job_id),
                        self.rng.choice([1, 30_000]), self.now]

    def settle(self) -> Call:
        items: list[Arg] = []
        for _ in range(self.rng.randint(0, 3)):
            job_id = self.pick()
            lease: list[Arg] = [job_id, self.fence(job_id)]
            items += self.rng.choice([
                [b"ack", *lease], [b"done", *lease, self.rng.choice(PAYLOADS)],
                [b"retry", *lease, self.rng.choice([0, 500]), self.rng.choice([1, 3]), b"e"]])
        return SETTLE, [7, key(b"active"), key(b"delayed"), key(b"dead"), key(b"pending"),
                        key(b"fence"), key(b"ring"), key(b"wake"), self.now,
                        self.rng.choice([0, RETENTION_MS]), 30_000, self.rng.randint(0, 3), *items]

    def extend_many(self) -> Call:
        pairs: list[Arg] = []
        for job_id in [self.pick() for _ in range(self.rng.randint(0, 3))]:
            pairs += [job_id, self.fence(job_id)]
        return EXTEND_MANY, [1, key(b"active"), 30_000, self.now, *pairs]

    def recover(self) -> Call:
        return RECOVER, [5, key(b"active"), key(b"pending"), key(b"ring"), key(b"wake"),
                         key(b"dead"), self.now, self.rng.choice([1, 100]),
                         self.rng.choice([1, 3])]

    def promote(self) -> Call:
        return PROMOTE, [4, key(b"delayed"), key(b"pending"), key(b"ring"), key(b"wake"),
                         self.now, self.rng.choice([1, 100])]

    def enqueue_after(self) -> Call:
        job_id = self.fresh()
        return ENQUEUE_AFTER, [2, key(b"waiting"), key(b"job", job_id), job_id,
                               self.rng.choice(PAYLOADS), self.now,
                               self.rng.choice([b"fail", b"ignore", b"continue"])]

    def after(self) -> Call:
        """Parents for a waiting job (mostly), any ids met, sealing now and then."""
        waiting = [member for member, _ in self.model.zitems(key(b"waiting"))]
        job_id = self.rng.choice(waiting) if waiting else self.rng.choice(self.known)
        parents = [self.rng.choice(self.known) for _ in range(self.rng.randint(0, 3))]
        return AFTER, [5, key(b"waiting"), key(b"pending"), key(b"dead"), key(b"job", job_id),
                       key(b"wake"), job_id, self.now, self.rng.choice([0, 1, 1]), *parents]

    def cancel(self) -> Call:
        job_id = self.pick()
        return CANCEL, [6, key(b"job", job_id), key(b"pending"), key(b"delayed"), key(b"active"),
                        key(b"dead"), key(b"ring"), job_id, self.now,
                        self.rng.choice([0, RETENTION_MS])]

    def trim_dead(self) -> Call:
        """The queue's default bounds (10,000 dead, 180 days): the walk's dead jobs stay."""
        return TRIM_DEAD, [2, key(b"dead"), key(b"deadconf"), self.now, self.rng.choice([1, 100])]

    def bad(self) -> Call:
        """A malformed call of the case table, on the walk's state: refused alike, no change."""
        transition, argv = self.rng.choice(self.malformed)
        return transition, list(argv)
