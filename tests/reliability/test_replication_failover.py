"""Scenario 2: replication under load, and failover.

A primary with trafikey and a replica without it, attached mid-run, under a mixed wire=5/wire=6
workload on the server's clock: after ``WAIT`` both keyspaces are identical (``DEBUG DIGEST``).
Promoted, the module-less replica serves wire=5 and refuses wire=6 (unknown command): a failover
target for wire=6 clients must load the module, so the failover run uses one that does. There the
primary is SIGKILLed mid-run, the replica promoted with ``REPLICAOF NO ONE``, and the clients
follow it: no job whose enqueue ``WAIT`` confirmed is lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq import Job, Queue, StaleLease, TrafikeyMissing
from echomq.conformance.harness import snapshot
from echomq.conformance.resp import RawConnection
from echomq.embedded import EmbeddedValkey
from tests.reliability.ledger import Ledger, assert_nothing_lost, reckon
from tests.reliability.servers import node, server_version, wait_until
from tests.reliability.workload import LATEST, LEASE_MS, Crew, Plan, drain, transient
from tests.test_replication import wait_for_link


def digest(server: EmbeddedValkey) -> bytes:
    with RawConnection(server.port) as conn:
        return conn.call("DEBUG", "DIGEST")


def keyspace(server: EmbeddedValkey) -> dict[bytes, tuple[object, ...]]:
    with RawConnection(server.port) as conn:
        return snapshot(conn)


@pytest.fixture
def primary() -> Iterator[EmbeddedValkey]:
    server = node(config={"repl-diskless-sync-delay": "0"})  # a replica links at once
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_module_less_replica_under_load(primary: EmbeddedValkey) -> None:
    started = time.monotonic()
    replica = node(module=False)
    queues = [Queue(primary.client(), "rep", wire=wire) for wire in (5, 6, 6)]
    ledger = Ledger()
    try:
        crew = Crew(Plan(queues, jobs=1500, lanes=True), ledger, "rep").start()
        try:
            wait_until(lambda: len(ledger.acks) >= 50, "progress before the replica joins")
            replica.config["replicaof"] = f"127.0.0.1 {primary.port}"
            replica.start()  # full sync while the workload runs
            wait_for_link(replica.client())
            linked_at = len(ledger.acks)
            print(f"[replica] linked after {linked_at} acks of {len(ledger.admitted)} admitted")
            wait_until(lambda: len(ledger.acks) >= linked_at + 200,
                       "progress after the replica joined")
        finally:
            crew.halt()  # mid-flow: jobs pending, leased, delayed, in lanes, acked
        conn = primary.client()
        conn.set("marker", "1")  # WAIT counts from this connection's last write
        assert conn.execute_command("WAIT", 1, 5000) >= 1
        conn.close()
        assert keyspace(replica) == keyspace(primary)
        assert digest(replica) == digest(primary)
        assert b"trafikey" not in str(replica.client().module_list()).encode()
        result = reckon(ledger, queues, f"replica valkey {server_version()}, mid-flow")
        assert_nothing_lost(result)
        assert result.present > 0, "the workload ended before the comparison: nothing in flight"

        # Promoted, the module-less replica serves the scripts and not the native commands.
        promoted = replica.client()
        promoted.execute_command("REPLICAOF", "NO", "ONE")
        on_replica = [Queue(promoted, "rep", wire=5)]
        drain(on_replica, ledger, "drained on the promoted module-less replica (wire=5)")
        final = reckon(ledger, on_replica, "replica final")
        assert_nothing_lost(final)
        assert final.present == 0
        with pytest.raises(TrafikeyMissing, match="--loadmodule"):
            Queue(promoted, "rep", wire=6).claim()
        promoted.close()
    finally:
        for queue in queues:
            queue.conn.close()
        replica.stop()
    print(f"[replica] {time.monotonic() - started:.1f}s")


class Endpoint:
    """Where clients go: the primary, then the promoted replica."""

    def __init__(self, port: int) -> None:
        self.port = port

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, single_connection_client=True, socket_timeout=3,
                           retry=Retry(NoBackoff(), 0))


class FailoverCrew:
    """Producers confirm each enqueue with ``WAIT 1``; consumers ack and confirm alike. Every
    thread reconnects to the endpoint's current server after an error."""

    def __init__(self, endpoint: Endpoint, jobs: int, deadline_s: float = 60) -> None:
        self.endpoint, self.jobs = endpoint, jobs
        self.confirmed = Ledger()  # WAIT-confirmed enqueues and acks
        self.unconfirmed: set[str] = set()  # told ENQUEUED/DUPLICATE, no replica confirmed yet
        self.unconfirmed_acks: list[Job] = []
        self.stop = threading.Event()
        self.failed_over = False
        self.deadline = time.monotonic() + deadline_s
        self.failures: list[BaseException] = []
        self.threads = [threading.Thread(target=self.guard, args=(body, wire), daemon=True)
                        for body in (self.produce, self.consume) for wire in (5, 6)]

    def guard(self, body, wire: int) -> None:  # type: ignore[no-untyped-def]
        try:
            body(wire)
        except BaseException as exc:
            self.failures.append(exc)

    def session(self, wire: int) -> tuple[redis.Redis, Queue]:
        conn = self.endpoint.client()
        return conn, Queue(conn, "fo", wire=wire, check_policy=False)

    def attempt(self, wire: int, state: dict[str, object], step) -> None:  # type: ignore
        """Runs ``step(conn, queue)``; on a transient error reconnects (to the current
        endpoint) for the next try."""
        if "conn" not in state:
            state["conn"], state["queue"] = self.session(wire)
        try:
            step(state["conn"], state["queue"])
        except Exception as exc:
            if not transient(exc) or time.monotonic() > self.deadline:
                raise
            self.confirmed.note(f"{type(exc).__name__}")
            state.pop("conn").close()  # type: ignore[attr-defined]
            time.sleep(0.05)

    def produce(self, wire: int) -> None:
        state: dict[str, object] = {}
        ids = [f"JOB:fo-w{wire}-{i}" for i in range(self.jobs)]
        n = 0
        while n < len(ids) and not self.stop.is_set():
            def step(conn: redis.Redis, queue: Queue, job_id: str = ids[n]) -> None:
                nonlocal n
                verdict = queue.enqueue(job_id, b"payload")
                self.unconfirmed.add(job_id)
                if self.replicated(conn):
                    self.confirmed.admit(job_id, verdict)
                n += 1
            self.attempt(wire, state, step)

    def consume(self, wire: int) -> None:
        state: dict[str, object] = {}
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            def step(conn: redis.Redis, queue: Queue) -> None:
                job = queue.claim(lease_ms=LEASE_MS)
                if job is None:
                    time.sleep(0.005)
                    return
                self.ack(conn, queue, job)
            self.attempt(wire, state, step)

    def ack(self, conn: redis.Redis, queue: Queue, job: Job) -> None:
        # In doubt until WAIT says otherwise — from before the call: an ack whose reply the dying
        # primary never sent may still have reached the replica.
        self.unconfirmed_acks.append(job)
        try:
            queue.ack(job)
        except StaleLease:
            self.unconfirmed_acks.remove(job)
            self.confirmed.note("ack:stale")
            return
        if self.replicated(conn):
            self.unconfirmed_acks.remove(job)
            self.confirmed.acked(job)

    def replicated(self, conn: redis.Redis) -> bool:
        """WAIT 1 on this connection. After the failover the promoted replica is the only copy
        there is (no replica to wait for): what it confirms counts."""
        return self.failed_over or conn.execute_command("WAIT", 1, 1000) >= 1

    def halt(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        assert not any(t.is_alive() for t in self.threads)
        if self.failures:
            raise self.failures[0]


@pytest.mark.slow
def test_failover_loses_no_confirmed_job(primary: EmbeddedValkey) -> None:
    started = time.monotonic()
    replica = node(config={"replicaof": f"127.0.0.1 {primary.port}"})  # module loaded
    try:
        replica.start()
        wait_for_link(replica.client())
        endpoint = Endpoint(primary.port)
        crew = FailoverCrew(endpoint, jobs=600)
        for thread in crew.threads:
            thread.start()
        try:
            wait_until(lambda: len(crew.confirmed.admitted) >= 300
                       and len(crew.confirmed.acks) >= 100, "progress before the failover")
            primary.kill()  # the primary dies mid-run
            promoted = replica.client()
            promoted.execute_command("REPLICAOF", "NO", "ONE")
            promoted.close()
            crew.failed_over = True
            endpoint.port = replica.port
            wait_until(lambda: len(crew.unconfirmed) >= 1200 or bool(crew.failures),
                       "the producers to finish on the promoted replica", 60)
        finally:
            crew.halt()
        conn = replica.client()
        queues = [Queue(conn, "fo", wire=wire, check_policy=False) for wire in (5, 6)]
        ledger = crew.confirmed
        # An ack whose reply or WAIT did not come (the primary died in between) may or may not
        # have reached the replica: it did if the replica holds that lease's tombstone. Not if
        # a later lease of the job was acked and confirmed: the job ran again on the replica, and
        # that lease's fence may even be this one's (the claims the dead primary counted and
        # never passed on are counted again by the promoted replica).
        redelivered = 0
        confirmed_acks = {job_id for job_id, _ in ledger.acks}
        for job in crew.unconfirmed_acks:
            row = conn.hgetall(queues[0].key("job", job.id))
            if job.id in confirmed_acks:
                redelivered += 1
            elif row and b"p" not in row and row.get(b"f") == str(job.fence).encode():
                ledger.acked(job, in_doubt=True)
            else:
                redelivered += 1  # still leased on the replica: run again (at least once)
        # Counted: enqueues and acks WAIT confirmed before the failover, and all those the
        # promoted replica confirmed after it.
        after = reckon(ledger, queues, f"failover valkey {server_version()}, confirmed only")
        assert_nothing_lost(after)
        drain(queues, ledger, "failover, after drain")
        final = reckon(ledger, queues, "failover final")
        assert_nothing_lost(final)
        told = crew.unconfirmed
        where = {m.decode() for q in queues for r in ("pending", "active", "delayed", "dead")
                 for m in conn.zrange(q.key(r), 0, -1)}
        acked = {job_id for job_id, _ in [*ledger.acks, *ledger.acks_in_doubt]}
        unconfirmed_lost = sorted(told - ledger.admitted - acked - where)
        print(f"[failover] told_admitted={len(told)} wait_confirmed={len(ledger.admitted)} "
              f"unconfirmed_acks={len(crew.unconfirmed_acks)} redelivered={redelivered} "
              f"unconfirmed_and_lost={len(unconfirmed_lost)} (allowed: no replica had them) "
              f"in {time.monotonic() - started:.1f}s")
        assert conn.zcard(queues[0].key("active")) == 0
        assert queues[1].recover(now=LATEST) == 0
        conn.close()
    finally:
        replica.stop()
