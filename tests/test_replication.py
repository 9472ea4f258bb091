"""Invariant 7: effects replicate. A replica and an AOF reload reach the primary's keyspace
without the trafikey module, whichever executor (wire=5 scripts, wire=6 native) did the work.

The workloads are hypothesis-drawn operation lists run through ``echomq.Queue`` on the server's
clock (``now=None``); afterwards ``DEBUG DIGEST``, key-by-key snapshots and every key's absolute
expiry (``PEXPIRETIME``: the digest records that a key expires, not when) must be equal.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hiredis
import pytest
import redis
from hypothesis import HealthCheck, given, settings, strategies as st

from echomq import Ack, Job, Queue, Retry, StaleLease, Verdict
from echomq.conformance.harness import snapshot
from echomq.conformance.resp import RawConnection
from echomq.embedded import EmbeddedValkey
from echomq.engine.server_time import server_ms
from tests.conftest import start_server

QUEUES = ("a", "b")
IDS = [f"JOB:{i}" for i in range(12)]
RETAIN = 600_000  # tombstones outlive the test: an expiry mid-comparison would be a race

Op = tuple[Any, ...]

OPS: st.SearchStrategy[Op] = st.one_of(
    st.tuples(st.just("enqueue"), st.sampled_from(IDS), st.binary(max_size=16),
              st.sampled_from([0, 0, 1, RETAIN])),
    st.tuples(st.just("enqueue_many"),
              st.lists(st.tuples(st.sampled_from(IDS), st.binary(max_size=8)), max_size=5)),
    st.tuples(st.just("claim"), st.sampled_from([1, 2, 60_000])),
    st.tuples(st.just("ack"), st.integers(0, 7), st.sampled_from([0, RETAIN]),
              st.one_of(st.none(), st.binary(max_size=8))),
    st.tuples(st.just("retry"), st.integers(0, 7), st.sampled_from([0, 1, 60_000]),
              st.booleans(), st.binary(max_size=8)),
    st.tuples(st.just("extend"), st.integers(0, 7), st.sampled_from([1, 60_000])),
    st.tuples(st.just("progress"), st.integers(0, 7), st.binary(max_size=16)),
    st.tuples(st.just("settle"), st.lists(st.tuples(st.integers(0, 7), st.booleans()),
                                          max_size=4), st.integers(0, 3),
              st.sampled_from([0, RETAIN])),
    st.tuples(st.just("extend_many"), st.lists(st.integers(0, 7), max_size=4)),
    st.tuples(st.just("recover"), st.sampled_from([1, 1_000])),
    st.tuples(st.just("promote"), st.sampled_from([1, 1_000])),
    st.tuples(st.just("cancel"), st.sampled_from(IDS), st.sampled_from([0, RETAIN])),
    st.tuples(st.just("trim_dead"), st.sampled_from([1, 2])),
    st.tuples(st.just("unique"), st.sampled_from(IDS), st.sampled_from(["k1", "k2"]),
              st.sampled_from(["dedupe", "debounce", "throttle"]), st.sampled_from([0, RETAIN])),
)
WORKLOAD = st.lists(st.tuples(st.sampled_from(QUEUES), OPS), min_size=10, max_size=80)
SETTINGS = settings(max_examples=8, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


class Worker:
    """Runs drawn operations on one wire's queues, remembering the jobs it holds."""

    def __init__(self, conn: redis.Redis, wire: int) -> None:
        self.queues = {name: Queue(conn, f"rep{wire}{name}", wire=wire) for name in QUEUES}
        self.held: dict[str, list[Job]] = {name: [] for name in QUEUES}
        self.moved = 0

    def run(self, workload: list[tuple[str, Op]]) -> None:
        for name, op in workload:
            with contextlib.suppress(StaleLease):
                self.step(name, op)

    def step(self, name: str, op: Op) -> None:
        queue, held = self.queues[name], self.held[name]
        verb, *args = op
        if verb in ("enqueue", "enqueue_many", "cancel", "unique"):
            self.by_id(queue, verb, args)
        elif verb == "claim":
            job = queue.claim(lease_ms=args[0])
            if job is not None:
                held.append(job)
        elif verb in ("recover", "promote", "trim_dead"):
            self.moved += self.housekeep(queue, verb, args[0])
        elif verb in ("settle", "extend_many"):
            self.batch(queue, held, verb, args)
        elif held:
            self.settle(queue, held[args[0] % len(held)], verb, args[1:])

    @staticmethod
    def by_id(queue: Queue, verb: str, args: list[Any]) -> None:
        """An admission (plain, or unique in a mode), or a cancel, of the ids drawn."""
        if verb == "enqueue":
            queue.enqueue(args[0], args[1], delay_ms=args[2])
        elif verb == "enqueue_many":
            queue.enqueue_many(args[0])
        elif verb == "unique":  # a throttle's window (a TTL) outlives the comparison, or is none
            job_id, key, mode, window = args
            queue.enqueue(job_id, b"u", **{mode: key, f"{mode}_ms": window})
        else:
            queue.cancel(args[0], retention_ms=args[1])

    @staticmethod
    def housekeep(queue: Queue, verb: str, arg: int) -> int:
        """recover or promote with ``arg`` as their limit; trim_dead under ``arg`` as the count
        bound, set by the operator first."""
        if verb == "trim_dead":
            queue.set_dead_bounds(max_count=arg)
            return int(queue.trim_dead())
        return int(getattr(queue, verb)(limit=arg))

    @staticmethod
    def batch(queue: Queue, held: list[Job], verb: str, args: list[Any]) -> None:
        """A batched round: held jobs acked or retried (to delayed), then claims; or a heartbeat.
        Jobs may repeat within a batch: the second is STALE."""
        if verb == "extend_many":
            queue.extend_many([held[i % len(held)] for i in args[0]] if held else [])
            return
        outcomes = [Ack(held[i % len(held)]) if ack else Retry(held[i % len(held)], delay_ms=0)
                    for i, ack in args[0]] if held else []
        held.extend(queue.settle(outcomes, claim=args[1], lease_ms=60_000,
                                 retention_ms=args[2])[1])

    @staticmethod
    def settle(queue: Queue, job: Job, verb: str, args: list[Any]) -> None:
        if verb == "ack":
            queue.ack(job, retention_ms=args[0], result=args[1])
        elif verb == "retry":
            limit = job.attempt if args[1] else job.attempt + 5  # to dead, or to delayed
            queue.retry(job, delay_ms=args[0], max_attempts=limit, error=args[2])
        elif verb == "progress":
            queue.set_progress(job, args[0])
        else:
            queue.extend(job, lease_ms=args[0])


def wait_for_link(replica: redis.Redis, timeout: float = 20.0) -> None:
    """Polls INFO replication until the replica's link to its primary is up (bounded)."""
    deadline = time.monotonic() + timeout
    while replica.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica never linked to its primary"
        time.sleep(0.05)


def digest(server: EmbeddedValkey) -> bytes:
    with RawConnection(server.port) as conn:
        return conn.call("DEBUG", "DIGEST")


def keyspace(server: EmbeddedValkey) -> dict[bytes, tuple[Any, ...]]:
    with RawConnection(server.port) as conn:
        return snapshot(conn)


def expiries(server: EmbeddedValkey) -> dict[bytes, int]:
    """Each key's absolute expiry in ms (-1: none). A copy must expire a key when its primary
    does, not a millisecond off, and DEBUG DIGEST cannot tell."""
    with RawConnection(server.port) as conn:
        keys: list[bytes] = parse(conn.call("KEYS", "*"))
        return {key: int(parse(conn.call("PEXPIRETIME", key))) for key in keys}


def parse(raw: bytes) -> Any:
    reader = hiredis.Reader()
    reader.feed(raw)
    return reader.gets()


def leave_a_tombstone(conn: redis.Redis, wire: int) -> None:
    """An acked job kept for RETAIN ms, so every comparison has a key that expires."""
    queue = Queue(conn, f"kept{wire}", wire=wire)
    queue.enqueue("JOB:kept", b"k")
    job = queue.claim(lease_ms=60_000)
    assert job is not None and job.id == "JOB:kept"
    queue.ack(job, retention_ms=RETAIN)


def assert_same_keyspace(primary: EmbeddedValkey, copy: EmbeddedValkey) -> None:
    state, expiring = keyspace(primary), expiries(primary)
    assert state, "the workload left nothing to compare"
    assert any(when > 0 for when in expiring.values()), "no key expires: nothing to compare"
    assert keyspace(copy) == state
    assert expiries(copy) == expiring
    assert digest(copy) == digest(primary)
    assert not digest(primary).startswith(b"-")


@pytest.fixture(scope="module")
def primary() -> Iterator[EmbeddedValkey]:
    server = start_server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def replica(primary: EmbeddedValkey) -> Iterator[EmbeddedValkey]:
    server = start_server(module=False, config={"replicaof": f"127.0.0.1 {primary.port}"})
    client = server.client()
    try:
        wait_for_link(client)
        assert b"trafikey" not in str(client.module_list()).encode()
        yield server
    finally:
        client.close()
        server.stop()


@pytest.mark.parametrize("wire", [5, 6])
@SETTINGS
@given(workload=WORKLOAD)
def test_replica_without_module_reaches_primary_keyspace(
        primary: EmbeddedValkey, replica: EmbeddedValkey, wire: int,
        workload: list[tuple[str, Op]]) -> None:
    conn = primary.client()
    try:
        conn.flushall()
        Worker(conn, wire).run(workload)
        Worker(conn, wire).run([(name, ("enqueue", "JOB:x", b"x", 0)) for name in QUEUES])
        leave_a_tombstone(conn, wire)
        assert conn.execute_command("WAIT", 1, 5000) >= 1
        assert_same_keyspace(primary, replica)
    finally:
        conn.close()


def test_replica_sees_every_transition(primary: EmbeddedValkey,
                                       replica: EmbeddedValkey) -> None:
    """A fixed run that moves jobs through every path (the drawn ones may miss some)."""
    conn = primary.client()
    try:
        conn.flushall()
        for wire in (5, 6):
            queue = Queue(conn, f"all{wire}", wire=wire)
            queue.enqueue_many([(f"JOB:{i}", b"p%d" % i) for i in range(6)])
            jobs = [queue.claim(lease_ms=1) for _ in range(6)]
            assert all(job is not None for job in jobs)
            j0, j1, j2, j3, j4, _j5 = (job for job in jobs if job is not None)
            queue.set_progress(j0, b"\x00half")
            queue.ack(j0, retention_ms=RETAIN, result=b"kept")
            queue.ack(j1, retention_ms=0)
            queue.enqueue("JOB:later", b"l", delay_ms=RETAIN)
            queue.retry(j2, delay_ms=0, max_attempts=5, error=b"again")
            queue.retry(j3, delay_ms=0, max_attempts=1, error=b"dead")
            queue.extend(j4, lease_ms=600_000)
            queue.set_progress(j4, b"running")
            queue.enqueue("JOB:c", b"c")
            Queue(conn, f"all{wire}", wire=5).enqueue("JOB:l", b"l", lane="g")
            assert queue.cancel("JOB:c", retention_ms=RETAIN) is Verdict.CANCELLED
            assert queue.cancel("JOB:l", retention_ms=RETAIN) is Verdict.CANCELLED
            assert queue.cancel(j4.id, retention_ms=RETAIN) is Verdict.CANCELLING
            queue.enqueue_many([(f"JOB:b{i}", b"b%d" % i) for i in range(4)])
            batch = queue.claim_many(4, lease_ms=600_000, claim_id=f"c-{wire}")  # recorded
            verdicts, _ = queue.settle([Ack(batch[0], result=b"r"),
                                        Retry(batch[1], delay_ms=600_000),
                                        Retry(batch[2], max_attempts=1), Ack(batch[0])],
                                       claim=1, retention_ms=RETAIN)
            assert len(verdicts) == 4 and queue.extend_many(batch[3:], lease_ms=900_000)
            assert queue.promote() == 1
            expire_leases(conn, queue)
            assert queue.recover() >= 1
            queue.enqueue("JOB:p", b"p", priority=7)  # the row's priority, its band
            queue.enqueue("JOB:pd", b"d", priority=-3, delay_ms=RETAIN)
            queue.set_dead_bounds(max_count=1)
            assert queue.trim_dead() == 1  # two died: j3, batch[2]
            expiring = Queue(conn, f"exp{wire}", wire=wire)  # a claim meeting a deadline
            expiring.enqueue("JOB:e1", b"e", expires_at_ms=1)  # long past: the claim ends it
            expiring.enqueue("JOB:e2", b"e", expires_in_ms=RETAIN, delay_ms=0)
            claimed = expiring.claim(lease_ms=600_000)
            assert claimed is not None and claimed.id == "JOB:e2"
        assert conn.execute_command("WAIT", 1, 5000) >= 1
        assert_same_keyspace(primary, replica)
    finally:
        conn.close()


def enqueue_after(conn: redis.Redis, queue: Queue, job_id: str, policy: str = "fail") -> Any:
    """EMQ.ENQUEUE_AFTER of job_id on queue (the module's command, with the events key)."""
    keys = (queue.key("waiting"), queue.key("job", job_id), queue.key("events"))
    return conn.execute_command("EMQ.ENQUEUE_AFTER", 3, *keys, job_id, b"w", 1000, policy)


def after(conn: redis.Redis, queue: Queue, job_id: str, *parents: str, seal: int = 1) -> Any:
    """EMQ.AFTER of job_id on queue: its parents registered, its list sealed unless seal is 0."""
    keys = [queue.key(role) for role in ("waiting", "pending", "dead")]
    keys += [queue.key("job", job_id), queue.key("wake"), queue.key("events")]
    return conn.execute_command("EMQ.AFTER", len(keys), *keys, job_id, 2000, seal, *parents)


def test_replica_sees_the_join(primary: EmbeddedValkey, replica: EmbeddedValkey) -> None:
    """Jobs waiting for their parents, and every end of a parent that moves them (ack, retry to
    dead, settle, recover, cancel, a waiting job cancelled), on the module: a replica without it
    holds the same keyspace (its writes replicated as plain commands)."""
    conn = primary.client()
    try:
        conn.flushall()
        queue = Queue(conn, "join6", wire=6)
        queue.enqueue_many([(f"JOB:p{i}", b"p%d" % i) for i in range(6)])
        for child, policy, parents in (("JOB:c0", "fail", ("JOB:p0", "JOB:p1")),
                                       ("JOB:c1", "ignore", ("JOB:p1", "JOB:p2")),
                                       ("JOB:c2", "continue", ("JOB:p2",)),
                                       ("JOB:c3", "fail", ("JOB:c0", "JOB:p3")),
                                       ("JOB:c4", "fail", ("JOB:p4",)),
                                       ("JOB:c5", "fail", ("JOB:c4",)),
                                       ("JOB:c6", "fail", ("JOB:p5",))):
            assert enqueue_after(conn, queue, child, policy) == b"WAITING"
            assert after(conn, queue, child, *parents, seal=0) == b"WAITING"
            assert after(conn, queue, child) == b"WAITING"
        conn.hset(queue.key("job", "JOB:p5"), mapping={"dedupe": "dedupe:k", "dedupe_ms": RETAIN})
        conn.set(queue.key("dedupe:k"), "JOB:p5")
        jobs = {job.id: job for job in (queue.claim(lease_ms=600_000) for _ in range(6)) if job}
        queue.ack(jobs["JOB:p0"], retention_ms=RETAIN)
        queue.retry(jobs["JOB:p1"], delay_ms=0, max_attempts=1, error=b"boom")  # c0, c3 die
        queue.settle([Ack(jobs["JOB:p2"], result=b"r")], retention_ms=0)  # c1, c2 released
        assert queue.cancel("JOB:c4", retention_ms=RETAIN) is Verdict.CANCELLED  # c5 too
        assert queue.cancel(jobs["JOB:p5"].id, retention_ms=0) is Verdict.CANCELLING
        queue.ack(jobs["JOB:p5"], retention_ms=0)  # flagged: cancelled, c6 too; dedupe kept
        conn.zadd(queue.key("active"), {"JOB:p3": 0, "JOB:p4": 0})
        assert queue.recover(max_attempts=1) == 2
        assert enqueue_after(conn, queue, "JOB:late") == b"WAITING"
        assert after(conn, queue, "JOB:late", "JOB:p1", "JOB:p0") == b"DEAD"
        assert conn.zcard(queue.key("waiting")) == 0
        pending, dead = (conn.zrange(queue.key(role), 0, -1) for role in ("pending", "dead"))
        assert set(pending) == {b"JOB:c1", b"JOB:c2"}
        assert {b"JOB:c0", b"JOB:c3", b"JOB:late"} <= set(dead)
        assert conn.hget(queue.key("job", "JOB:c5"), "cancelled") is not None
        assert conn.pttl(queue.key("dedupe:k")) > 0
        leave_a_tombstone(conn, 6)
        assert conn.execute_command("WAIT", 1, 5000) >= 1
        assert_same_keyspace(primary, replica)
    finally:
        conn.close()


def expire_leases(conn: redis.Redis, queue: Queue) -> None:
    """Bounded polling until some 1 ms lease is past the server's clock."""
    deadline = time.monotonic() + 5
    while True:
        now_ms = server_ms(conn)
        if conn.zcount(queue.key("active"), "-inf", now_ms - 1):
            return
        assert time.monotonic() < deadline
        time.sleep(0.002)


@SETTINGS
@given(workload=WORKLOAD)
def test_aof_loads_without_module(workload: list[tuple[str, Op]]) -> None:
    # appendfsync always: each write reaches the file before its reply. Under everysec a busy
    # disk lets the server put off its writes while a background fsync runs, and the copy below
    # would miss the last of them.
    aof = {"appendonly": "yes", "appenddirname": "aof", "appendfsync": "always"}
    source = start_server(config=aof)
    copy_dir = tempfile.mkdtemp(prefix="echomq-aof-")
    try:
        conn = source.client()
        Worker(conn, 6).run([*workload, ("a", ("enqueue", "JOB:x", b"x", 0))])
        leave_a_tombstone(conn, 6)
        conn.close()
        expected, state, expiring = digest(source), keyspace(source), expiries(source)
        assert state, "the workload left nothing to compare"
        assert any(when > 0 for when in expiring.values()), "no key expires: nothing to compare"
        shutil.copytree(Path(source.directory, "aof"), Path(copy_dir, "aof"))
        loaded = EmbeddedValkey(prefer="path", module=False, directory=copy_dir, config=aof)
        with loaded:
            assert keyspace(loaded) == state
            assert expiries(loaded) == expiring
            assert digest(loaded) == expected
    finally:
        source.stop()
        shutil.rmtree(copy_dir, ignore_errors=True)
