"""Random transition sequences on both executors in lockstep, checked against a Python model.

A hypothesis state machine drives one queue through enqueue (at once, delayed, unique in its three
modes, and enqueue_many's batches), claim, ack (with and without a result), retry, extend,
progress, durable steps, settle (ack, done, retry and release items) and extend_many batches mixed
with those single verbs, recover, promote, requeue of dead jobs and bad input (a mutated call that
turns out valid runs as its rule runs it), on an explicit clock, while rules also tamper with the
keyspace behind the queue's back (deleted rows, expired tombstones, wrong-typed keys, odd row
fields, lane jobs) and crash workers (a claim whose lease runs out, then recover). Every call runs
on the Lua and the native scratch keys of a ``Pair`` (requeue, scripts only, runs its script on
both); after every step both keyspaces must equal each other and the model's
(echomq/conformance/model/), and SPEC invariants 1-4, 8 and 10 are checked explicitly: a stale
holder is always refused (a settlement sent again after it went through answers as it did the first
time, changing nothing), a fence never repeats for an id, a job recovered at its last attempt ends
dead.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)

from echomq.conformance.harness import Outcome, Pair, assert_parity
from echomq.conformance.model import (
    LOST,
    Model,
    int_field,
    normalise,
    null,
    raw,
    status,
)
from echomq.embedded import EmbeddedValkey
from echomq.engine.scripts import script_for
from echomq.engine.transitions import (
    ACK,
    ACK_RESULT,
    CLAIM,
    ENQUEUE,
    ENQUEUE_DELAYED,
    EXTEND,
    EXTEND_MANY,
    PROMOTE,
    RECOVER,
    REQUEUE,
    RETRY,
    Transition,
)
from tests.stateful_batches import Batches
from tests.stateful_cancel import Cancelling
from tests.stateful_events import EventedCalls
from tests.stateful_expiry import Expiries
from tests.stateful_priority import Priorities
from tests.stateful_progress import Progress
from tests.stateful_steps import Steps
from tests.stateful_unique import UniqueEnqueues
from tests.stateful_world import (
    ERRORS,
    LATE,
    MAX_ATTEMPTS,
    PAYLOADS,
    POOL,
    REPLAYS,
    RESULTS,
    RETRY_TAIL,
    START,
    Argv,
    BeyondTheQueue,
    Checks,
    key,
    parsed,
    told_apart,
)


class QueueMachine(Priorities, Expiries, Progress, Steps, UniqueEnqueues, Batches,
                   BeyondTheQueue, Checks, Cancelling, EventedCalls, RuleBasedStateMachine):
    """One queue (plus a neighbour) on both executors and the model, in lockstep."""

    def __init__(self, port: int, protocol: int) -> None:
        super().__init__()
        self.pair = Pair(port, protocol)
        self.pair.reset()
        self.model = Model(protocol)
        self.now = START
        self.pair.lua.call("SCRIPT", "LOAD", script_for(REQUEUE).source)
        # Every lease handed out, as (id, fence); the fences each id was given, in order.
        self.leases: list[tuple[bytes, int]] = []
        self.fences: dict[bytes, list[int]] = {}
        self.live: set[bytes] = set()
        self.ghosts: set[bytes] = set()
        self.foreign: set[bytes] = set()
        # Settlements that went through, to send again: (verb, argv, reply, id, row state after).
        self.settlements: list[tuple[Transition, Argv, bytes, bytes, Any]] = []

    def teardown(self) -> None:
        self.pair.close()

    # plumbing ---------------------------------------------------------------------------------

    def execute(self, transition: Transition, argv: Argv) -> tuple[bytes, dict[str, Outcome]]:
        """Runs ``argv`` on both executors and the model; replies and keyspaces must agree."""
        argv = self.with_events(transition, argv)
        context = (transition.name, argv)
        expected = self.model.call(transition, argv)
        outcomes = self.pair.run(transition, argv) if transition.native else self.scripted(
            transition, argv)
        reply = assert_parity(outcomes, context)
        assert reply == expected, f"{context}: server sent {reply!r}, model {expected!r}"
        assert normalise(outcomes["lua"].after) == self.model.render(), f"{context}: model"
        if reply.startswith(b"-"):  # invariant 8
            assert outcomes["native"].after == outcomes["native"].before, context
        return reply, outcomes

    def scripted(self, transition: Transition, argv: Argv) -> dict[str, Outcome]:
        """A scripts-only transition, run by its script on both databases."""
        return self.pair.run(transition, argv, scripts_only=True)

    # the clock --------------------------------------------------------------------------------

    @rule(step=st.sampled_from([0, 1, 7, 1_000, 30_000, 600_000]))
    def tick(self, step: int) -> None:
        self.now += step

    # transitions ------------------------------------------------------------------------------

    @rule(data=st.data(), payload=PAYLOADS)
    def enqueue(self, data: st.DataObject, payload: bytes) -> None:
        job_id = self.draw_id(data)
        self.enqueue_id(job_id, payload)

    def draw_id(self, data: st.DataObject) -> bytes:
        """An id to admit: any of the pool but the ghosts (ids whose row went behind the
        queue's back)."""
        job_id: bytes = data.draw(st.sampled_from([j for j in POOL if j not in self.ghosts]),
                                  label="id")
        return job_id

    def enqueue_id(self, job_id: bytes, payload: bytes) -> None:
        argv = [3, key(b"job", job_id), key(b"pending"), key(b"wake"), job_id, payload, self.now]
        if self.admitted(ENQUEUE, argv):
            if job_id in self.fences:
                event("an id admitted again")
            self.live.add(job_id)

    def admitted(self, transition: Transition, argv: Argv) -> bool:
        """An admission (``argv``: numkeys, the row, its set, the wake key, then the id),
        checked: an id whose row exists is a DUPLICATE that changes nothing (invariant 2), and
        one admitted was neither live nor a ghost. True when it was admitted."""
        row, job_id = argv[1], argv[4]
        valid = not isinstance(self.model.validate(transition, argv), bytes)
        known = valid and self.model.kind(row) == b"hash"
        reply, outcomes = self.execute(transition, argv)
        if known:  # invariant 2: admit once
            assert reply == status("DUPLICATE"), reply
            assert outcomes["lua"].after == outcomes["lua"].before
        if reply != status("ENQUEUED"):
            return False
        assert job_id not in self.live and job_id not in self.ghosts
        return True

    @rule(data=st.data(), payload=PAYLOADS, delay_ms=st.sampled_from([0, 1, 1_000, 60_000]),
          at=st.sampled_from([None, -60_000, 0, 500, 90_000]))
    def enqueue_later(self, data: st.DataObject, payload: bytes, delay_ms: int,
                      at: int | None) -> None:
        """A job admitted to run later: straight into delayed, at the later of now + delay_ms
        and at_ms; an id whose row exists is a duplicate whatever its state."""
        job_id = self.draw_id(data)
        at_ms = 0 if at is None else max(0, self.now + at)
        argv = [3, key(b"job", job_id), key(b"delayed"), key(b"wake"), job_id, payload, self.now,
                delay_ms, at_ms]
        if self.admitted(ENQUEUE_DELAYED, argv):
            due = dict(self.model.zitems(key(b"delayed")))[job_id]
            assert due == max(self.now + delay_ms, at_ms), (due, self.now, delay_ms, at_ms)
            self.live.add(job_id)

    @rule(lease_ms=st.sampled_from([1, 10, 1_000, 30_000]))
    def claim(self, lease_ms: int) -> None:
        self.claim_one(lease_ms)

    def claim_one(self, lease_ms: int) -> bytes | None:
        """A claim, checked; the id it leased, if any."""
        return self.claimed([3, key(b"pending"), key(b"active"), key(b"fence"), lease_ms,
                             self.now])

    def claimed(self, argv: Argv) -> bytes | None:
        """A claim (``argv``: numkeys 3, pending, active, fence, lease_ms, now), checked: the
        oldest live pending job, not leased already, a fresh fence; the id it leased, if any."""
        order = self.zmembers(b"pending")
        expiring = {job_id for job_id in order
                    if job_id in self.live and self.expired_by_now(job_id)}
        waiting = [job_id for job_id in order if job_id in self.live and job_id not in expiring]
        holders = set(self.zmembers(b"active"))
        reply, _ = self.execute(CLAIM, argv)
        walked, job_id = order, None
        if reply.startswith(b"-"):
            return None
        if reply == null(self.pair.protocol):
            assert not waiting, "claim found nothing while live jobs were pending"
        else:
            job_id, _payload, _attempt, fence = parsed(reply)
            assert job_id not in self.ghosts, "claim returned a ghost"  # invariant 4
            assert job_id == waiting[0], "claim skipped the oldest live job"
            assert job_id not in holders, "claim handed out a current lease"  # invariant 3
            self.check_fresh_fence(job_id, fence)
            walked = order[:order.index(job_id)]
        # invariant 4: the ghosts the claim walked past are dropped; the expired ones end dead
        assert not set(walked) & set(self.zmembers(b"pending")), walked
        self.check_expired([j for j in walked if j in expiring])
        return job_id

    @rule(lease_ms=st.sampled_from([30_000, 600_000]))
    def claim_sent_again(self, lease_ms: int) -> None:
        """A claim whose reply was lost, sent again under its claim record: the same reply, and
        nothing written the second time (no attempt counted again, nothing more leased). The
        record lives lease_ms on the server's own clock, past the end of any run."""
        self.records = getattr(self, "records", 0) + 1
        record = key(b"claim:r%d" % self.records)
        argv = [4, key(b"pending"), key(b"active"), key(b"fence"), record, lease_ms, self.now]
        first, _ = self.execute(CLAIM, argv)
        if first.startswith(b"*"):
            job_id, _payload, _attempt, fence = parsed(first)
            self.check_fresh_fence(job_id, fence)
            event("a claim sent again under its record")
        again, outcomes = self.execute(CLAIM, argv)
        if not first.startswith(b"-"):
            assert again == first, (first, again)
            assert outcomes["lua"].after == outcomes["lua"].before

    def check_fresh_fence(self, job_id: bytes, fence: int) -> None:
        """Invariant 3: a fence never repeats for an id (nor, here, for the queue)."""
        given = [f for fences in self.fences.values() for f in fences]
        assert fence not in self.fences.get(job_id, []), (job_id, fence, self.fences)
        assert all(fence > f for f in given), (fence, given)
        self.fences.setdefault(job_id, []).append(fence)
        self.leases.append((job_id, fence))

    def fenced(self, transition: Transition, job_id: bytes, fence: int, argv: Argv) -> bytes:
        """Runs an ack/retry/extend; a lease that is not current gets +STALE (or, replaying a
        settlement that went through, its verdict), nothing changed."""
        checked = self.model.validate(transition, argv)
        current = not isinstance(checked, bytes) and self.is_current(job_id, fence)
        reply, outcomes = self.execute(transition, argv)
        if not isinstance(checked, bytes) and not current:  # invariant 3: fencing
            assert reply in (status("STALE"), *REPLAYS.get(transition.name, ())), reply
            assert outcomes["lua"].after == outcomes["lua"].before
            if reply != status("STALE"):
                event("a replayed settlement answered as the first time")
        if current:
            assert reply != status("STALE")
            if reply in REPLAYS.get(transition.name, ()):
                self.settlements.append((transition, argv, reply, job_id, self.row_state(job_id)))
        # invariant 3, by the machine's own count: only the id's latest lease may be current
        latest = self.fences.get(job_id, [None])[-1]
        if not isinstance(checked, bytes) and fence != latest:
            assert reply == status("STALE"), (job_id, fence, latest, reply)
            if fence in self.fences.get(job_id, [])[:-1]:
                event("an earlier holder of the id refused")
        return reply

    def pick_lease(self, data: st.DataObject) -> tuple[bytes, int]:
        current = [lease for lease in self.leases if self.is_current(*lease)]
        if current and data.draw(st.booleans(), label="a current lease"):
            job_id, fence = data.draw(st.sampled_from(current), label="lease")
        else:
            job_id, fence = data.draw(st.sampled_from(self.leases), label="lease")
        skew = data.draw(st.sampled_from([0, 0, 0, 1, -1, 10**14]), label="skew")
        return job_id, max(1, fence + skew)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), retention_ms=st.sampled_from([0, 0, 600_000]))
    def ack(self, data: st.DataObject, retention_ms: int) -> None:
        job_id, fence = self.pick_lease(data)
        self.acked(ACK, [2, key(b"active"), key(b"job", job_id), job_id, fence, retention_ms])

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), retention_ms=st.sampled_from([0, 600_000, 600_000]), result=RESULTS)
    def ack_result(self, data: st.DataObject, retention_ms: int, result: bytes) -> None:
        """An ack keeping the handler's result: the tombstone holds it; one over the cap is
        refused whole."""
        job_id, fence = self.pick_lease(data)
        self.acked(ACK_RESULT, [2, key(b"active"), key(b"job", job_id), job_id, fence,
                                retention_ms, result])

    def acked(self, transition: Transition, argv: Argv) -> bytes:
        """An ack or ack_result (``argv``: numkeys 2, active, the row, then id, fence,
        retention_ms and ack_result's result), checked by ``fenced``: a current lease acked is
        live no more, and ack_result's tombstone holds its result (one over the cap refused)."""
        job_id, fence, retention_ms = argv[3], int(argv[4]), int(argv[5])
        result = raw(argv[6]) if transition == ACK_RESULT else None
        current = self.is_current(job_id, fence)
        reply = self.fenced(transition, job_id, fence, argv)
        if result is not None and len(result) > 524_288:
            assert reply.startswith(b"-EMQSIZE "), reply
        if reply == status("ACKED") and current:  # a replay writes nothing
            self.live.discard(job_id)
            if result is not None:
                self.check_result(job_id, result, retention_ms)
        return reply

    def check_result(self, job_id: bytes, result: bytes, retention_ms: int) -> None:
        row = key(b"job", job_id)
        if retention_ms == 0:
            assert self.model.kind(row) == b"none"
            return
        assert self.model.hget(row, b"result") == result
        assert self.model.hget(row, b"p") is None
        event("a result kept")

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), delay_ms=st.sampled_from([0, 1, 1_000, 60_000]),
          max_attempts=st.sampled_from([1, 2, 3, 5]), error=ERRORS)
    def retry(self, data: st.DataObject, delay_ms: int, max_attempts: int, error: bytes) -> None:
        job_id, fence = self.pick_lease(data)
        argv = [4, key(b"active"), key(b"delayed"), key(b"dead"), key(b"job", job_id), job_id,
                fence, delay_ms, max_attempts, error, self.now]
        self.fenced(RETRY, job_id, fence, argv)

    def row_state(self, job_id: bytes) -> Any:
        """What a replay of a settlement of ``job_id`` reads: its row's fields, and whether it
        is dead (None when there is no row)."""
        value = self.model.keys.get(key(b"job", job_id))
        if value is None or value.kind != b"hash":
            return None
        return dict(value.data), job_id in self.zmembers(b"dead")

    @precondition(lambda self: self.settlements)
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        """A settlement sent again (its reply lost): while the row is as it left it, the replay
        answers what the settlement did, and changes nothing."""
        self.replay_settlement(data.draw(st.sampled_from(self.settlements), label="replayed"))

    def replay_settlement(self, settlement: tuple[Transition, Argv, bytes, bytes, Any]) -> bytes:
        """Sends ``settlement`` again, checked; its reply."""
        transition, argv, first, job_id, state = settlement
        fence = int(argv[len(transition.keys) + 2])
        # A key planted with the wrong type (a dead set that is a string) is refused before the
        # replay is read, WRONGTYPE on both executors: the first answer holds only without one.
        unchanged = state is not None and self.row_state(job_id) == state and not self.foreign
        reply = self.fenced(transition, job_id, fence, argv)
        if unchanged:
            expected = first if told_apart(transition, state) else status("STALE")
            assert reply == expected, (transition.name, job_id, reply, expected)
            if reply == first:
                event("a replay answered as the first time")
        return reply

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), lease_ms=st.sampled_from([1, 1_000, 30_000]))
    def extend(self, data: st.DataObject, lease_ms: int) -> None:
        job_id, fence = self.pick_lease(data)
        argv = [2, key(b"active"), key(b"job", job_id), job_id, fence, lease_ms, self.now]
        self.fenced(EXTEND, job_id, fence, argv)

    @precondition(lambda self: any(self.is_current(*lease) for lease in self.leases))
    @rule(data=st.data(), retention_ms=st.sampled_from([0, 600_000]), payload=PAYLOADS)
    def readmit(self, data: st.DataObject, retention_ms: int, payload: bytes) -> None:
        """A job completes and its id is admitted again (at once, or after its tombstone
        expires): the holder of its old lease must not settle the new one's."""
        current = [lease for lease in self.leases if self.is_current(*lease)]
        job_id, fence = data.draw(st.sampled_from(current), label="completed")
        argv = [2, key(b"active"), key(b"job", job_id), job_id, fence, retention_ms]
        reply = self.fenced(ACK, job_id, fence, argv)
        if reply.startswith(b"-WRONGTYPE "):  # a lane job's bookkeeping key of another type
            return
        assert reply in (status("ACKED"), status("CANCELLED")), reply  # CANCELLED: flagged
        self.live.discard(job_id)
        if retention_ms:  # its tombstone expires, and a cancelled one's ended key with it
            self.behind_the_back(b"DEL", key(b"job", job_id))
            if self.model.kind(key(b"ended:" + job_id)) != b"none":
                self.behind_the_back(b"DEL", key(b"ended:" + job_id))
        self.enqueue_id(job_id, payload)

    @rule(data=st.data(), count=st.sampled_from([0, 1, 2, 5]),
          lease_ms=st.sampled_from([1, 1_000, 30_000]),
          retention_ms=st.sampled_from([0, 600_000]))
    def settle(self, data: st.DataObject, count: int, lease_ms: int, retention_ms: int) -> None:
        """A worker's round: settle a batch of leases (current, stale, repeated), then claim."""
        items: list[tuple[bytes, bytes, int, Argv]] = []
        for _ in range(data.draw(st.integers(0, 4) if self.leases else st.just(0), label="n")):
            job_id, fence = self.pick_lease(data)
            op = data.draw(st.sampled_from([b"ack", b"done", b"retry", b"release"]), label="op")
            tail = data.draw(RETRY_TAIL, label="retry") if op == b"retry" else []
            if op == b"done":
                tail = [data.draw(RESULTS, label="result")]
            items.append((op, job_id, fence, tail))
        self.settled([7, key(b"active"), key(b"delayed"), key(b"dead"), key(b"pending"),
                      key(b"fence"), key(b"ring"), key(b"wake"), self.now, retention_ms,
                      lease_ms, count,
                      *(word for op, job_id, fence, tail in items
                        for word in (op, job_id, fence, *tail))])

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), lease_ms=st.sampled_from([1, 1_000, 30_000]))
    def extend_many(self, data: st.DataObject, lease_ms: int) -> None:
        """A heartbeat for several leases: only current ones are extended."""
        pairs = [self.pick_lease(data) for _ in range(data.draw(st.integers(0, 4), label="n"))]
        expected = [self.heartbeat(*lease) for lease in pairs]
        argv = [1, key(b"active"), lease_ms, self.now,
                *(word for lease in pairs for word in lease)]
        reply, _ = self.execute(EXTEND_MANY, argv)
        if not reply.startswith(b"-"):
            assert parsed(reply) == expected, reply

    @rule(limit=st.sampled_from([1, 2, 1_000]), late=LATE, max_attempts=MAX_ATTEMPTS)
    def recover(self, limit: int, late: int, max_attempts: int) -> None:
        self.now += late
        self.recover_now(limit, max_attempts)

    def recover_now(self, limit: int, max_attempts: int) -> None:
        """A recover, checked: invariant 10, a job recovered at its last attempt ends dead."""
        leased = self.model.zitems(key(b"active")) if self.zmembers(b"active") else []
        due = [job_id for job_id, deadline in leased if deadline <= self.now][:limit]
        rows = [(job_id, key(b"job", job_id)) for job_id in due]
        attempts = {job_id: int_field(self.model.hget(row, b"a"), 0)
                    for job_id, row in rows if self.model.kind(row) == b"hash"}
        spent = {j: n for j, n in attempts.items() if n >= max_attempts and not self.flagged(j)}
        argv = [5, key(b"active"), key(b"pending"), key(b"ring"), key(b"wake"), key(b"dead"),
                self.now, limit, max_attempts]
        reply, _ = self.execute(RECOVER, argv)
        if reply.startswith(b"-"):
            return
        for job_id, n in spent.items():
            event("a job recovered at its last attempt")
            assert job_id in self.zmembers(b"dead"), (job_id, n)
            assert self.model.hget(key(b"job", job_id), b"error") == LOST % n

    @rule(lease_ms=st.sampled_from([1, 10]), max_attempts=MAX_ATTEMPTS)
    def crash(self, lease_ms: int, max_attempts: int) -> None:
        """A worker claims and dies: its lease runs out, and a recover finds it."""
        if self.claim_one(lease_ms) is not None:
            self.now += lease_ms
            self.recover_now(1_000, max_attempts)

    @precondition(lambda self: self.zmembers(b"dead"))
    @rule(data=st.data())
    def requeue(self, data: st.DataObject) -> None:
        """An operator runs a dead job again: a fresh count of attempts, never an old fence."""
        job_id = data.draw(st.sampled_from(self.zmembers(b"dead")), label="requeued")
        argv = [5, key(b"dead"), key(b"pending"), key(b"ring"), key(b"wake"),
                key(b"job", job_id), job_id, self.now]
        reply, _ = self.execute(REQUEUE, argv)
        if reply == status("REQUEUED"):
            assert self.model.hget(key(b"job", job_id), b"a") == b"0"
            event("a dead job requeued")

    @rule(limit=st.sampled_from([1, 2, 1_000]), late=LATE)
    def promote(self, limit: int, late: int) -> None:
        self.now += late
        argv = [4, key(b"delayed"), key(b"pending"), key(b"ring"), key(b"wake"), self.now, limit]
        self.execute(PROMOTE, argv)

# About 60 s a protocol on a 2-core machine at load average 15 (CI is far less loaded).
STATEFUL = settings(max_examples=25, stateful_step_count=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.parametrize("protocol", [2, 3])
def test_executors_and_model_in_lockstep(valkey: EmbeddedValkey, protocol: int) -> None:
    run_state_machine_as_test(lambda: QueueMachine(valkey.port, protocol), settings=STATEFUL)
