"""Scenario 5: memory pressure. Under ``noeviction`` a full server refuses enqueue with its own OOM
error on both executors, writing nothing; claims, acks and retries still run, so the queue drains,
and enqueue works again once memory is free. A policy that evicts keys makes Queue() warn."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Iterator

import pytest
import redis

from echomq import App, Consumer, EvictionPolicyWarning, JobOutcome, Queue, ResultDropped, Verdict
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
    """At the first command on each client, on either wire; never without ``check_policy``."""
    clients = [server.client() for _ in range(3)]
    try:
        clients[0].config_set("maxmemory-policy", policy)
        for client, wire in zip(clients, (5, 6), strict=False):
            with pytest.warns(EvictionPolicyWarning, match=policy):
                Queue(client, "evict", wire=wire).counts()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Queue(clients[2], "evict", wire=6, check_policy=False).counts()
    finally:
        clients[0].config_set("maxmemory-policy", "noeviction")
        for client in clients:
            client.close()


def test_noeviction_does_not_warn(server: EmbeddedValkey) -> None:
    conn = server.client()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for wire in (5, 6):
                Queue(conn, "quiet", wire=wire).counts()
    finally:
        conn.close()


# Results under memory pressure (docs/PROTOCOL.md, "Results under memory pressure").
BIG = 400 * 1024  # the characters of each result: about 400 KiB kept, under MAX_RESULT_BYTES
# How far the keys may grow while five jobs are acked on a server over its limit: their
# tombstones without a result and ended tokens, a few hundred bytes each (a kept result would be
# 400 KiB each, 2 MB for the five).
SLACK = 64 * 1024


def keys_bytes(conn: redis.Redis) -> int:
    """What the keys hold: MEMORY USAGE summed over every key. Not used_memory, which also
    counts the server's query buffers: a 400 KiB ack argument leaves one of about that size
    behind that no client is charged for (Valkey 8.1's shared query buffer)."""
    return sum(int(conn.memory_usage(key, samples=0) or 0) for key in conn.scan_iter(count=1000))


def write_other(conn: redis.Redis, size: int) -> None:
    """The operator's other data, written in 100 kB steps: a single large SET leaves its own
    query buffer in used_memory for a while, so a limit read just after would count it."""
    step = 100_000
    for _ in range(size // step):
        conn.append("other", b"o" * step)


def drained(app: App) -> int:
    consumer = Consumer(app.queue, app.handler)
    try:
        return consumer.drain()
    finally:
        consumer.close()


@pytest.mark.parametrize("wire", [5, 6])
def test_results_acked_over_maxmemory_are_dropped_and_the_drain_frees_memory(
        server: EmbeddedValkey, wire: int) -> None:
    """Three jobs acked with room keep their 400 KiB results; five acked on a server over its
    maxmemory end done without theirs (ResultDropped, "memory"), the keys growing by at most
    SLACK, so freeing the operator's 2 MB lets enqueue in again."""
    conn = server.client()
    app = App(conn, "results", wire=wire)

    @app.task(name="big")
    def big(n: int) -> str:
        return str(n) * BIG

    try:
        kept = [big.enqueue(n) for n in range(3)]
        assert drained(app) == 3
        dropped = [big.enqueue(n) for n in range(3, 8)]
        write_other(conn, 2_000_000)
        used = int(conn.info("memory")["used_memory"])
        conn.config_set("maxmemory", str(used - 300_000))  # the server over its limit
        with pytest.raises(redis.exceptions.OutOfMemoryError, match=OOM):
            big.enqueue(99)
        before = keys_bytes(conn)
        assert drained(app) == 5
        assert keys_bytes(conn) - before <= SLACK

        for n, handle in enumerate(kept):
            assert handle.result(timeout=5) == str(n) * BIG
            assert asyncio.run(handle.aresult(timeout=5)) == str(n) * BIG
        for handle in dropped:
            assert handle.outcome() == JobOutcome("done", None, None, 1, None, "memory")
            with pytest.raises(ResultDropped, match="dropped") as refused:
                handle.result(timeout=5)
            assert (refused.value.job_id, refused.value.reason) == (handle.id, "memory")
            with pytest.raises(ResultDropped):
                asyncio.run(handle.aresult(timeout=5))
            assert conn.hget(app.queue.key("job", handle.id), "result_dropped") == b"memory"
        conn.delete("other")
        assert big.enqueue(100).verdict is Verdict.ENQUEUED
    finally:
        conn.config_set("maxmemory", "0")
        conn.close()
