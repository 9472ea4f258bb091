"""Scenario 5: memory pressure. Under ``noeviction`` a full server refuses enqueue with its own OOM
error on both executors, writing nothing; claims, acks and retries still run, so the queue drains,
and enqueue works again once memory is free. A policy that evicts keys makes Queue() warn."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import pytest
import redis

from echomq import EvictionPolicyWarning, Queue, Verdict
from echomq.embedded import EmbeddedValkey
from tests.conftest import start_server
from tests.reliability.ledger import Ledger, assert_nothing_lost, reckon
from tests.reliability.servers import server_version

OOM = "command not allowed when used memory > 'maxmemory'"
PAYLOAD = b"x" * 512


@pytest.fixture
def server() -> Iterator[EmbeddedValkey]:
    made = start_server(config={"maxmemory-policy": "noeviction"})
    try:
        yield made
    finally:
        made.stop()


def digest(conn: redis.Redis) -> bytes:
    return bytes(conn.execute_command("DEBUG", "DIGEST"))


def fill(queues: list[Queue], ledger: Ledger, limit: int) -> int:
    """Enqueues on both wires in turn until the server refuses; returns the refusals seen."""
    for n in range(limit):
        queue = queues[n % len(queues)]
        job_id = f"JOB:w{queue.wire}-{n}"
        try:
            ledger.admit(job_id, queue.enqueue(job_id, PAYLOAD))
        except redis.exceptions.OutOfMemoryError:
            return n
    raise AssertionError(f"no OOM after {limit} enqueues")


def assert_admission_refused(conn: redis.Redis, queues: list[Queue]) -> None:
    """Every admission path is refused with the server's OOM error, and nothing is written."""
    before = digest(conn)
    for queue in queues:
        lane = "g" if queue.wire == 5 else None  # lanes are scripts only
        for job_id, one_lane in ((f"JOB:refused-{queue.wire}", None),
                                 (f"JOB:refused-lane-{queue.wire}", lane)):
            with pytest.raises(redis.exceptions.OutOfMemoryError, match=OOM):
                queue.enqueue(job_id, PAYLOAD, lane=one_lane)
        with pytest.raises(redis.exceptions.OutOfMemoryError, match=OOM):
            queue.enqueue_many([(f"JOB:many-{queue.wire}", PAYLOAD)])
    assert digest(conn) == before


def work_while_full(queue: Queue) -> None:
    """Claims, extends, retries, promotes and recovers run on a full server (they free
    nothing), and admission is still refused after."""
    held = [queue.claim(lease_ms=60_000) for _ in range(10)]
    for job in held:
        assert job is not None
        assert queue.extend(job, lease_ms=60_000) is Verdict.EXTENDED
        assert queue.retry(job, delay_ms=0, error="full") is Verdict.RETRYING
    assert queue.promote() == 10
    assert queue.recover() == 0
    with pytest.raises(redis.exceptions.OutOfMemoryError, match=OOM):
        queue.enqueue("JOB:still-full", PAYLOAD)


def drain(queues: list[Queue], ledger: Ledger, limit: int) -> int:
    """Claims and acks (every fifth first attempt retried once) until both wires find nothing;
    returns how many were retried."""
    retried = 0
    for n in range(limit):
        queue = queues[n % 2]
        job = queue.claim(lease_ms=60_000)
        if job is None:
            if queue.promote() == 0 and queues[1 - n % 2].promote() == 0:
                break
            continue
        if job.attempt == 1 and n % 5 == 0:
            assert queue.retry(job, delay_ms=0, error="full") is Verdict.RETRYING
            retried += 1
        else:
            assert queue.ack(job, retention_ms=0) is Verdict.ACKED
            ledger.acked(job)
    return retried


def test_full_queue_refuses_admission_and_still_drains(server: EmbeddedValkey) -> None:
    started = time.monotonic()
    conn = server.client()
    try:
        used = int(conn.info("memory")["used_memory"])
        conn.config_set("maxmemory", str(used + 2_000_000))  # about 2 MB of room
        queues = [Queue(conn, "full", wire=5), Queue(conn, "full", wire=6)]
        ledger = Ledger()
        admitted = fill(queues, ledger, 100_000)
        assert admitted > 100
        assert_admission_refused(conn, queues)
        for queue in queues:
            work_while_full(queue)
        retried = 20 + drain(queues, ledger, admitted * 3)

        assert queues[0].counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0,
                                      "lanes": 0}
        result = reckon(ledger, queues, f"oom valkey {server_version()}")
        assert_nothing_lost(result)
        assert result.acked == result.enqueued == admitted
        # Memory freed: admission works again, on both executors.
        for queue in queues:
            assert queue.enqueue(f"JOB:again-{queue.wire}", PAYLOAD) is Verdict.ENQUEUED
        print(f"[oom] admitted={admitted} refused=8 retried={retried} acked={result.acked} "
              f"in {time.monotonic() - started:.1f}s")
    finally:
        conn.config_set("maxmemory", "0")
        conn.close()


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-ttl"])
def test_evicting_policy_warns(server: EmbeddedValkey, policy: str) -> None:
    conn = server.client()
    try:
        conn.config_set("maxmemory-policy", policy)
        with pytest.warns(EvictionPolicyWarning, match=policy):
            Queue(conn, "evict", wire=5)
        with pytest.warns(EvictionPolicyWarning, match=policy):
            Queue(conn, "evict", wire=6)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Queue(conn, "evict", wire=6, check_policy=False)
    finally:
        conn.config_set("maxmemory-policy", "noeviction")
        conn.close()


def test_noeviction_does_not_warn(server: EmbeddedValkey) -> None:
    conn = server.client()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for wire in (5, 6):
                Queue(conn, "quiet", wire=wire)
    finally:
        conn.close()
