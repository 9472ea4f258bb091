"""Queue-wide limits under random sequences, on both executors in lockstep with the model: a
hypothesis state machine enqueues, claims, settles (acks and claims in one call), acks, retries,
recovers and promotes on an explicit clock while the operator changes ``queueconf``'s
``concurrency``, ``rate`` and ``window_ms`` behind the queue's back. After every step both
keyspaces equal each other and the model's, and, counted apart from the model: a call that
leased jobs never left more leases in ``active`` than the concurrency limit; no window of the
rate saw more claims than the rate; a claim that found a live job and room under both limits
leased it; a lease leaving ``active`` while the queue is held left a wake token."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from echomq.conformance.harness import Pair, assert_parity
from echomq.conformance.model import Model, normalise
from echomq.conformance.resp import Arg
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import (
    ACK,
    CLAIM,
    ENQUEUE,
    PROMOTE,
    RECOVER,
    RETRY,
    SETTLE,
    Transition,
)
from tests.stateful_world import parsed

BASE = b"emq:{q}:"
START = 1_700_000_000_000
POOL = [f"JOB:{n}".encode() for n in range(8)]


def key(role: str) -> bytes:
    return BASE + role.encode()


class LimitsMachine(RuleBasedStateMachine):
    def __init__(self, port: int, protocol: int) -> None:
        super().__init__()
        self.pair = Pair(port, protocol)
        self.pair.reset()
        self.model = Model(protocol)
        self.now = START
        self.concurrency: int | None = None
        self.rate: int | None = None
        self.window_ms = 1000
        self.claims: list[int] = []  # claim times under the current knobs
        self.leases: list[tuple[bytes, int]] = []

    def teardown(self) -> None:
        self.pair.close()

    def execute(self, transition: Transition, argv: list[Arg]) -> bytes:
        expected = self.model.call(transition, argv)
        outcomes = self.pair.run(transition, argv)
        reply = assert_parity(outcomes, (transition.name, argv))
        assert reply == expected, (transition.name, argv, reply, expected)
        assert normalise(outcomes["lua"].after) == self.model.render()
        return reply

    def active(self) -> int:
        return len(self.model.zitems(key("active")))

    def wake_tokens(self) -> int:
        return self.model.llen(key("wake"))

    def live_waiting(self) -> bool:
        return any(self.model.kind(BASE + b"job:" + member) == b"hash"
                   for member, _ in self.model.zitems(key("pending")))

    def held(self) -> bool:
        return self.model.hget(key("queueconf"), b"held") is not None \
            if self.model.kind(key("queueconf")) == b"hash" else False

    def room(self) -> bool:
        """Whether a claim now may lease one more job under both limits (the window as the
        claims so far opened it)."""
        if self.concurrency is not None and self.active() >= self.concurrency:
            return False
        return self.rate is None or self.window_count(self.now) < self.rate

    def window_count(self, now: int) -> int:
        start, count = None, 0
        for at in self.claims:
            if start is None or at >= start + self.window_ms:
                start, count = at, 0
            count += 1
        return count if start is not None and now < start + self.window_ms else 0

    def leased(self, jobs: list[tuple[bytes, int]], before: int) -> None:
        if jobs and self.concurrency is not None:
            assert self.active() <= self.concurrency, (before, jobs)
        for job_id, fence in jobs:
            self.leases.append((job_id, fence))
            self.claims.append(self.now)
            if self.rate is not None:
                assert self.window_count(self.now) <= self.rate, self.claims

    # rules ------------------------------------------------------------------------------------

    @rule(step=st.sampled_from([0, 1, 100, 999, 1_000, 40_000]))
    def tick(self, step: int) -> None:
        self.now += step

    @rule(job_id=st.sampled_from(POOL))
    def enqueue(self, job_id: bytes) -> None:
        self.execute(ENQUEUE, [3, BASE + b"job:" + job_id, key("pending"), key("wake"), job_id,
                               b"p", self.now])

    @rule(concurrency=st.sampled_from([None, 1, 2, 3]), rate=st.sampled_from([None, 1, 2, 5]),
          window_ms=st.sampled_from([None, 100, 1_000]))
    def set_limits(self, concurrency: int | None, rate: int | None,
                   window_ms: int | None) -> None:
        commands: list[list[Arg]] = [["DEL", key("queueconf")]]
        fields: list[Arg] = []
        for name, value in (("concurrency", concurrency), ("rate", rate),
                            ("window_ms", window_ms)):
            if value is not None:
                fields += [name, str(value)]
        if fields:
            commands.append(["HSET", key("queueconf"), *fields])
        for command in commands:
            self.pair.apply([command])
            self.model.apply_setup(command)
        self.concurrency, self.rate = concurrency, rate
        self.window_ms = window_ms or 1000
        self.claims = []  # the window's state went with the hash

    @rule()
    def claim(self) -> None:
        before, could = self.active(), self.live_waiting() and self.room()
        reply = parsed(self.execute(CLAIM, [3, key("pending"), key("active"), key("fence"),
                                            30_000, self.now]))
        if could:
            assert reply is not None, "a live job and room, yet nothing leased"
        self.leased([] if reply is None else [(reply[0], reply[3])], before)

    @rule(count=st.sampled_from([1, 2, 5]), acks=st.integers(0, 2))
    def settle(self, count: int, acks: int) -> None:
        before = self.active()
        items: list[Arg] = []
        for job_id, fence in self.leases[:acks]:
            items += ["ack", job_id, fence]
        self.leases = self.leases[acks:]
        reply = parsed(self.execute(SETTLE, [7, key("active"), key("delayed"), key("dead"),
                                             key("pending"), key("fence"), key("ring"),
                                             key("wake"), self.now, 60_000, 30_000, count,
                                             *items]))
        self.leased([(job[0], job[3]) for job in reply[1]], before)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), retry=st.booleans())
    def settle_one(self, data: st.DataObject, retry: bool) -> None:
        job_id, fence = self.leases.pop(data.draw(st.integers(0, len(self.leases) - 1)))
        held, tokens = self.held(), self.wake_tokens()
        current = self.model.zitems(key("active")) and any(
            member == job_id for member, _ in self.model.zitems(key("active")))
        if retry:
            reply = self.execute(RETRY, [4, key("active"), key("delayed"), key("dead"),
                                         BASE + b"job:" + job_id, job_id, fence, 10, 3, b"x",
                                         self.now])
        else:
            reply = self.execute(ACK, [2, key("active"), BASE + b"job:" + job_id, job_id, fence,
                                       60_000])
        if held and current and reply in (b"+ACKED\r\n", b"+RETRYING\r\n", b"+DEAD\r\n"):
            assert self.wake_tokens() == min(tokens + 1, 64)

    @rule()
    def recover_and_promote(self) -> None:
        self.execute(RECOVER, [5, key("active"), key("pending"), key("ring"), key("wake"),
                               key("dead"), self.now, 100, 3])
        self.execute(PROMOTE, [4, key("delayed"), key("pending"), key("ring"), key("wake"),
                               self.now, 100])


@pytest.mark.parametrize("protocol", [2, 3])
def test_limits_hold_under_random_sequences(valkey: EmbeddedValkey, protocol: int) -> None:
    run_state_machine_as_test(
        lambda: LimitsMachine(valkey.port, protocol),
        settings=settings(max_examples=60, stateful_step_count=40, deadline=None,
                          suppress_health_check=list(HealthCheck)))
