"""Dependencies and the join, stateful: random workflows (jobs admitted at once or after random
parents under random policies, claimed, acked, sent dead, cancelled, recovered, settled) run on
the scripts, on trafikey and on the model (echomq/conformance/model/join.py) in lockstep —
every reply and, after every step, the whole keyspace of both executors."""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from echomq.conformance.harness import Pair
from echomq.conformance.model import Model, normalise
from echomq.conformance.resp import Arg
from echomq.embedded import EmbeddedValkey
from echomq.engine import transitions as t

BASE = "emq:{q}:"
NOW = 1_700_000_000_000
IDS = [f"JOB:{n}" for n in range(1, 8)]
POLICIES = ["fail", "ignore", "continue"]


def key(role: str, job_id: str = "") -> str:
    return BASE + (f"job:{job_id}" if role == "job" else role)


class JoinMachine(RuleBasedStateMachine):
    def __init__(self, port: int) -> None:
        super().__init__()
        self.pair = Pair(port, 2)
        self.pair.reset()
        self.model = Model(2)
        self.now = NOW

    def call(self, transition: t.Transition, argv: list[Arg]) -> bytes:
        expected = self.model.call(transition, argv)
        outcomes = self.pair.run(transition, argv)
        for name in ("lua", "native"):
            assert outcomes[name].reply == expected, (name, transition.name, argv)
        head = expected.split(b"\r")[0].decode()
        event(f"{transition.name} {head}")
        return expected

    def leased(self) -> list[tuple[str, int]]:
        active = self.model.keys.get(key("active").encode())
        if active is None:
            return []
        out = []
        for member in sorted(active.data):
            row = self.model.keys.get(key("job", member.decode()).encode())
            fence = int(row.data.get(b"f", b"0")) if row is not None else 0
            out.append((member.decode(), fence))
        return out

    @rule(job=st.sampled_from(IDS))
    def enqueue(self, job: str) -> None:
        self.call(t.ENQUEUE, [3, key("job", job), key("pending"), key("wake"), job, b"p",
                              self.now])

    @rule(job=st.sampled_from(IDS), policy=st.sampled_from(POLICIES),
          parents=st.lists(st.sampled_from(IDS), max_size=3), seal=st.booleans())
    def enqueue_after(self, job: str, policy: str, parents: list[str], seal: bool) -> None:
        self.call(t.ENQUEUE_AFTER, [2, key("waiting"), key("job", job), job, b"p", self.now,
                                    policy])
        self.after(job, parents, seal)

    @rule(job=st.sampled_from(IDS), parents=st.lists(st.sampled_from(IDS), max_size=2),
          seal=st.booleans())
    def after(self, job: str, parents: list[str], seal: bool) -> None:
        self.call(t.AFTER, [5, key("waiting"), key("pending"), key("dead"), key("job", job),
                            key("wake"), job, self.now, int(seal), *parents])

    @rule()
    def claim(self) -> None:
        self.call(t.CLAIM, [3, key("pending"), key("active"), key("fence"), 1_000, self.now])

    @rule(data=st.data(), retention=st.sampled_from([0, 60_000]), result=st.booleans())
    def ack(self, data: st.DataObject, retention: int, result: bool) -> None:
        leases = self.leased()
        if not leases:
            return
        job, fence = data.draw(st.sampled_from(leases))
        if result:
            self.call(t.ACK_RESULT, [2, key("active"), key("job", job), job, fence, retention,
                                     b"r"])
        else:
            self.call(t.ACK, [2, key("active"), key("job", job), job, fence, retention])

    @rule(data=st.data(), max_attempts=st.sampled_from([1, 3]))
    def retry(self, data: st.DataObject, max_attempts: int) -> None:
        leases = self.leased()
        if not leases:
            return
        job, fence = data.draw(st.sampled_from(leases))
        self.call(t.RETRY, [4, key("active"), key("delayed"), key("dead"), key("job", job), job,
                            fence, 0, max_attempts, b"boom", self.now])

    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        leases = self.leased()
        items: list[Arg] = []
        for job, fence in data.draw(st.lists(st.sampled_from(leases), max_size=3)
                                    if leases else st.just([])):
            op = data.draw(st.sampled_from(["ack", "retry", "release"]))
            items += [op, job, fence] + ([0, 1, b"bad"] if op == "retry" else [])
        self.call(t.SETTLE, [7, key("active"), key("delayed"), key("dead"), key("pending"),
                             key("fence"), key("ring"), key("wake"), self.now, 60_000, 1_000, 1,
                             *items])

    @rule(job=st.sampled_from(IDS), retention=st.sampled_from([0, 60_000]))
    def cancel(self, job: str, retention: int) -> None:
        self.call(t.CANCEL, [6, key("job", job), key("pending"), key("delayed"), key("active"),
                             key("dead"), key("ring"), job, self.now, retention])

    @rule(max_attempts=st.sampled_from([1, 5]))
    def recover(self, max_attempts: int) -> None:
        self.now += 2_000
        self.call(t.RECOVER, [5, key("active"), key("pending"), key("ring"), key("wake"),
                              key("dead"), self.now, 100, max_attempts])

    @invariant()
    def keyspaces_agree(self) -> None:
        for name in ("lua", "native"):
            assert normalise(self.pair.snapshot(name)) == self.model.render(), name

    def teardown(self) -> None:
        self.pair.close()


STATEFUL = settings(max_examples=100, stateful_step_count=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_executors_and_model_in_lockstep(valkey: EmbeddedValkey) -> None:
    run_state_machine_as_test(lambda: JoinMachine(valkey.port), settings=STATEFUL)
