"""Scenario 1: the server is SIGKILLed mid-run and restarted from its AOF on the same port and
directory; producers and consumers on both wires carry on. Nothing admitted is lost, nothing is
acked twice. Then an AOF rewrite, a restart from the rewritten AOF and a ``DEBUG RELOAD`` (RDB)
leave the keyspace digest unchanged, and the queue still works on both executors."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq import Queue, Verdict
from echomq.embedded import EmbeddedValkey
from tests.reliability.ledger import Ledger, assert_nothing_lost, reckon
from tests.reliability.servers import durable_node, persist, server_version, wait_until
from tests.reliability.workload import Crew, Plan, drain

NO_RETRY = Retry(NoBackoff(), 0)


@pytest.fixture
def durable() -> Iterator[EmbeddedValkey]:
    """A server with the module, writing an fsynced AOF into a directory that outlives it."""
    with durable_node("echomq-crash-") as server:
        yield server


def digest(server: EmbeddedValkey) -> bytes:
    client = server.client()
    try:
        return bytes(persist(lambda: client.execute_command("DEBUG", "DIGEST")))
    finally:
        client.close()


def crash_and_restart(server: EmbeddedValkey, down_s: float = 0.3) -> None:
    server.kill()
    time.sleep(down_s)
    server.start()  # same port, same directory, same config: loads the AOF


def wait_for_progress(ledger: Ledger, admitted: int, acked: int, timeout: float = 30) -> None:
    wait_until(lambda: len(ledger.admitted) >= admitted and len(ledger.acks) >= acked,
               f"{admitted} admitted and {acked} acked", timeout)


@pytest.mark.slow
def test_sigkill_mid_run_loses_nothing(durable: EmbeddedValkey) -> None:
    started = time.monotonic()
    # Two clients retry on their own (redis-py's default), two leave every failure to the crew.
    clients = [durable.client(socket_timeout=5, **({} if i < 2 else {"retry": NO_RETRY}))
               for i in range(4)]
    try:
        queues = [Queue(clients[i], "crash", wire=wire) for i, wire in enumerate((5, 6, 5, 6))]
        ledger = Ledger()
        crew = Crew(Plan(queues, jobs=400, batch=5, lanes=True), ledger, "crash").start()
        try:
            wait_for_progress(ledger, 200, 100)
            crash_and_restart(durable)
            wait_for_progress(ledger, 900, 400)
            crash_and_restart(durable, down_s=1.0)
            crew.finish(timeout=90)
        finally:
            crew.halt()
        result = reckon(ledger, queues, f"crash valkey {server_version()}, before drain")
        assert_nothing_lost(result)
        assert result.enqueued == 4 * 400
        drain(queues, ledger, f"crash valkey {server_version()}, after drain")
        final = reckon(ledger, queues, "crash final")
        assert_nothing_lost(final)
        assert final.present == 0
        assert final.acked + final.acked_in_doubt == final.enqueued
    finally:
        for client in clients:
            client.close()
    print(f"[crash] {time.monotonic() - started:.1f}s")


def run_every_transition(conn: redis.Redis, name: str) -> None:
    """Both executors, every flat transition (lanes too on wire=5), on a fresh queue."""
    for wire in (5, 6):
        queue = Queue(conn, f"{name}{wire}", wire=wire)
        assert queue.enqueue("JOB:a", b"a") is Verdict.ENQUEUED
        assert queue.enqueue_many([("JOB:a", b"a"), ("JOB:b", b"b")]) == [
            Verdict.DUPLICATE, Verdict.ENQUEUED]
        first = queue.claim(lease_ms=60_000)
        second = queue.claim(lease_ms=1)
        assert first is not None and second is not None
        assert queue.extend(first, lease_ms=60_000) is Verdict.EXTENDED
        assert queue.retry(first, delay_ms=0, error="x", max_attempts=5) is Verdict.RETRYING
        assert queue.promote() == 1
        time.sleep(0.01)
        assert queue.recover() == 1
        for _ in range(2):
            job = queue.claim(lease_ms=60_000)
            assert job is not None
            assert queue.ack(job) is Verdict.ACKED
        assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}
        if wire == 5:
            assert queue.enqueue("JOB:l", b"l", lane="g") is Verdict.ENQUEUED
            job = queue.claim_lane(lease_ms=60_000)
            assert job is not None and job.lane == "g"
            assert queue.ack(job) is Verdict.ACKED


@pytest.mark.slow
def test_aof_rewrite_and_rdb_reload_keep_the_digest(durable: EmbeddedValkey) -> None:
    started = time.monotonic()
    conn = durable.client()
    try:
        queues = [Queue(durable.client(), "rw", wire=wire) for wire in (5, 6)]
        ledger = Ledger()
        crew = Crew(Plan(queues, jobs=300, lanes=True), ledger, "rw").start()
        try:
            wait_for_progress(ledger, 300, 100)
        finally:
            crew.halt()  # stopped mid-flow: jobs in every state
        before = digest(durable)
        assert conn.dbsize() > 0

        conn.bgrewriteaof()
        wait_until(lambda: not any(int(conn.info("persistence")[k]) for k in (
            "aof_rewrite_in_progress", "aof_rewrite_scheduled")), "the AOF rewrite")
        assert digest(durable) == before
        crash_and_restart(durable)  # load the rewritten AOF
        conn = durable.client()
        assert digest(durable) == before, "the rewritten AOF loaded another keyspace"

        assert conn.execute_command("DEBUG", "RELOAD") in (b"OK", "OK", True)
        assert digest(durable) == before, "the RDB reload changed the keyspace"

        result = reckon(ledger, [Queue(conn, "rw", wire=w) for w in (5, 6)],
                        f"rewrite+reload valkey {server_version()}")
        assert_nothing_lost(result)
        run_every_transition(conn, "after-reload")
        for queue in queues:
            queue.conn.close()
    finally:
        conn.close()
    print(f"[rewrite+reload] {time.monotonic() - started:.1f}s")
