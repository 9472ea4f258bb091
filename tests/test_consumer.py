"""The consumer loop: wake-ups instead of polling, retries and dead jobs, heartbeats, lanes, wires.

Waits are bounded and driven by events, barriers or explicit clocks; the only fixed intervals are
those a test measures over (command counts while idle, a handler outliving its lease).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from echomq import Job, Queue, Verdict, Wire6Unsupported
from echomq.consumer.blocking import Consumer, error_text
from echomq.consumer.loop import PARK_CAP_MS
from echomq.embedded import EmbeddedValkey
from tests.shells import AnyConsumer, Make, make_fixture, shell_fixture  # noqa: F401

NOW = 1_700_000_000_000


@pytest.fixture
def conn(library_conn: Any) -> Any:
    """Every test here runs on a redis-py client and on a valkey-py one."""
    return library_conn


def first_line(error: bytes) -> bytes:
    return error.split(b"\n", 1)[0]


def blocked_clients(conn: redis.Redis) -> int:
    """The clients blocked in ``BLPOP``: the consumers parked. A consumer that has held jobs
    also keeps its read of the cancel notices blocked (``XREAD``), which is no park."""
    return sum(1 for client in conn.client_list()
               if "b" in client["flags"] and client["cmd"] == "blpop")


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Check ``condition`` until it holds or ``timeout`` passes (a bounded wait: how long before
    calling it a failure on a loaded machine, never a speed; a promised bound passes its own)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def command_calls(conn: redis.Redis) -> dict[str, int]:
    stats = conn.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()
            if name != "cmdstat_info"}


@contextmanager
def running(*consumers: AnyConsumer, stop_within: float = 2.0) -> Iterator[list[threading.Thread]]:
    """Run each consumer's loop in a thread; stop them all after, each promptly."""
    threads = [threading.Thread(target=c.run, daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    try:
        yield threads
    finally:
        started = time.monotonic()
        for consumer in consumers:
            consumer.stop()
        for thread in threads:
            thread.join(timeout=stop_within)
        assert not any(t.is_alive() for t in threads), "a consumer did not stop"
        assert time.monotonic() - started < stop_within


def parked(conn: redis.Redis, count: int = 1) -> bool:
    return wait_until(lambda: blocked_clients(conn) >= count)


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "work", wire=request.param)


# waking ------------------------------------------------------------------------------------


def test_an_enqueue_wakes_a_parked_consumer_at_once(make: Make, queue: Queue) -> None:
    handled = threading.Event()
    consumer = make(queue, lambda job: handled.set(), park_cap_ms=30_000)
    with running(consumer):
        assert parked(queue.conn)
        started = time.monotonic()
        queue.enqueue("JOB:wake", b"x")
        assert handled.wait(3.0)
        assert time.monotonic() - started < 3.0


def test_stop_returns_a_parked_consumer_promptly(make: Make, queue: Queue) -> None:
    consumer = make(queue, lambda job: None, park_cap_ms=60_000)
    with running(consumer, stop_within=1.0):
        assert parked(queue.conn)
    assert blocked_clients(queue.conn) == 0


def test_stop_right_after_start_never_waits_for_the_park_cap(make: Make, queue: Queue) -> None:
    for _ in range(20):
        consumer = make(queue, lambda job: None, park_cap_ms=60_000)
        with running(consumer, stop_within=1.0):
            pass


def stopped_by_a_signal(consumer: Consumer, after_s: float) -> None:
    """Run ``consumer`` in this (the main) thread, parked when SIGALRM comes ``after_s`` later
    and its handler calls ``stop()``: the loop returns within 2 s of its start."""
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: consumer.stop())
    try:
        signal.setitimer(signal.ITIMER_REAL, after_s)
        started = time.monotonic()
        consumer.run()
        assert time.monotonic() - started < 2.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_stop_from_a_signal_handler_returns_the_loop(queue: Queue) -> None:
    stopped_by_a_signal(Consumer(queue, lambda job: None, park_cap_ms=60_000), 0.3)


def test_stopping_one_consumer_leaves_the_others_parked(make: Make, queue: Queue) -> None:
    handled = threading.Event()
    first = make(queue, lambda job: None, park_cap_ms=60_000)
    second = make(queue, lambda job: handled.set(), park_cap_ms=60_000)
    with running(second):
        with running(first, stop_within=1.0):
            assert parked(queue.conn, 2)
        assert parked(queue.conn, 1)
        queue.enqueue("JOB:after", b"x")
        assert handled.wait(3.0)


def test_a_burst_wakes_as_many_parked_consumers_as_there_is_work(make: Make, queue: Queue) -> None:
    workers = 4
    barrier = threading.Barrier(workers, timeout=5.0)
    met: list[str] = []

    def handler(job: Job) -> None:
        barrier.wait()  # passes only when all of them run at the same time
        met.append(job.id)

    consumers = [make(queue, handler, park_cap_ms=30_000) for _ in range(workers)]
    with running(*consumers):
        assert parked(queue.conn, workers)
        queue.enqueue_many([(f"JOB:{n}", b"x") for n in range(workers)])
        assert wait_until(lambda: len(met) == workers)
    assert not barrier.broken
    assert sorted(met) == [f"JOB:{n}" for n in range(workers)]
    assert queue.counts()["active"] == 0


def test_the_wake_key_stays_bounded_with_nobody_parked(make: Make, queue: Queue) -> None:
    for first in range(0, 1_000, 100):
        queue.enqueue_many([(f"JOB:{n}", b"x") for n in range(first, first + 100)])
    assert queue.conn.llen(queue.key("wake")) <= 64
    consumer = make(queue, lambda job: None)
    assert consumer.beat(park=False) == 1_000
    assert queue.conn.llen(queue.key("wake")) <= 64


# no polling --------------------------------------------------------------------------------


def test_an_idle_consumer_sends_one_park_per_timeout(make: Make, queue: Queue) -> None:
    consumer = make(queue, lambda job: None, park_cap_ms=200)
    conn = queue.conn
    before = command_calls(conn)
    consumer.beat(park=False)  # what recover, promote and an empty claim cost on this wire
    # ... plus the next-due lookup (two ZRANGEs in one flush) and the BLPOP itself
    per_beat = sum(command_calls(conn).values()) - sum(before.values()) + 3
    with running(consumer):
        assert parked(conn)
        before = command_calls(conn)
        time.sleep(2.0)  # the interval measured: ten park timeouts
        after = command_calls(conn)
    delta = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    assert delta.get("blpop", 0) <= 11
    assert sum(delta.values()) <= 11 * per_beat


def test_the_park_ends_when_the_next_retry_falls_due(make: Make, queue: Queue) -> None:
    consumer = make(queue, lambda job: None, park_cap_ms=30_000)
    queue.enqueue("JOB:later", b"x")
    job = queue.claim()
    assert job is not None
    queue.retry(job, delay_ms=300, error="not yet")
    timeout = consumer.park_timeout_ms()
    assert 10 <= timeout <= 302
    handled = threading.Event()
    consumer.handler = lambda job: handled.set()
    with running(consumer):
        assert handled.wait(3.0)


def test_park_timeout_is_capped_and_floored(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "work")
    clock = [NOW]
    consumer = make(queue, lambda job: None, park_cap_ms=3_000, housekeeping_ms=10_000,
                    clock=lambda: clock[0])
    assert consumer.park_timeout_ms() == 3_000  # nothing due at all
    queue.enqueue("JOB:1", b"x", now=NOW)
    assert queue.claim(lease_ms=60_000, now=NOW) is not None
    assert consumer.park_timeout_ms() == 3_000  # the lease ends after the cap
    clock[0] = NOW + 59_000
    assert consumer.park_timeout_ms() == 1_001
    clock[0] = NOW + 61_000
    assert consumer.park_timeout_ms() == 10  # overdue: the floor


def test_the_park_outlasts_housekeeping_and_the_clients_socket_timeout(
        make: Make, valkey: EmbeddedValkey) -> None:
    conn = valkey.client(socket_timeout=1.0)
    queue = Queue(conn, "work")
    # The consumer parks through a connection of its own, whose read timeout outlasts the park.
    assert make(queue, lambda job: None, park_cap_ms=60_000).park_timeout_ms() == 60_000
    untimed = valkey.client(socket_timeout=None)
    assert make(Queue(untimed, "work"), lambda job: None).park_timeout_ms() == PARK_CAP_MS
    conn.close()
    untimed.close()


# failures ----------------------------------------------------------------------------------


def test_a_raising_handler_retries_then_dies_keeping_its_last_error(
        make: Make, queue: Queue) -> None:
    clock = [NOW]
    calls: list[tuple[str, int]] = []

    def handler(job: Job) -> None:
        calls.append((job.id, job.attempt))
        if job.id == "JOB:bad":
            raise ValueError(f"boom {job.attempt}")

    consumer = make(queue, handler, retry_delay_ms=1_000, max_attempts=3,
                        clock=lambda: clock[0])
    queue.enqueue("JOB:bad", b"x", now=NOW)
    queue.enqueue("JOB:good", b"y", now=NOW + 1)
    row = queue.key("job", "JOB:bad")

    assert consumer.beat(park=False) == 2  # the failure did not stop the drain
    assert queue.conn.zscore(queue.key("delayed"), "JOB:bad") == NOW + 1_000
    assert first_line(queue.conn.hget(row, "error")) == b"ValueError: boom 1"
    clock[0] = NOW + 999
    assert consumer.beat(park=False) == 0  # not due yet
    clock[0] = NOW + 1_000
    assert consumer.beat(park=False) == 1
    clock[0] = NOW + 2_000
    assert consumer.beat(park=False) == 1
    assert queue.conn.zscore(queue.key("dead"), "JOB:bad") == NOW + 2_000
    assert first_line(queue.conn.hget(row, "error")) == b"ValueError: boom 3"
    assert calls == [("JOB:bad", 1), ("JOB:good", 1), ("JOB:bad", 2), ("JOB:bad", 3)]
    clock[0] = NOW + 10_000
    queue.enqueue("JOB:next", b"z", now=clock[0])
    assert consumer.beat(park=False) == 1  # the loop carries on
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 1, "lanes": 0}


def test_the_running_loop_survives_failures_and_logs_them(
        make: Make, queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    good = threading.Event()

    def handler(job: Job) -> None:
        if job.id == "JOB:bad":
            raise RuntimeError("always")
        good.set()

    consumer = make(queue, handler, retry_delay_ms=20, max_attempts=2, park_cap_ms=30_000)
    with caplog.at_level(logging.INFO, logger="echomq"), running(consumer):
        queue.enqueue("JOB:bad", b"x")
        assert wait_until(lambda: queue.counts()["dead"] == 1)
        queue.enqueue("JOB:good", b"y")
        assert good.wait(3.0)
    assert first_line(queue.conn.hget(queue.key("job", "JOB:bad"), "error")) == (
        b"RuntimeError: always")
    text = caplog.text
    assert "consumer started" in text
    assert "JOB:bad failed (attempt 1) and will retry in 20 ms: RuntimeError: always" in text
    assert "JOB:bad dead after attempt 2" in text


def test_the_package_exports_the_consumer() -> None:
    import echomq

    assert echomq.Consumer is Consumer


def test_error_text_names_the_exception() -> None:
    assert error_text(KeyError("k")) == "KeyError: 'k'"
    assert error_text(TimeoutError()) == "TimeoutError"


# heartbeat ---------------------------------------------------------------------------------


# A lease its heartbeat (a third of it) must keep over several lease lengths: long enough that a
# loaded machine's pause of the heartbeat's thread does not outlast the two beats of slack.
HELD_LEASE_MS = 900


def long_job(started: threading.Event, release: threading.Event,
             seen: list[int]) -> Callable[[Job], None]:
    def handler(job: Job) -> None:
        seen.append(job.attempt)
        started.set()
        release.wait(5.0)
    return handler


def test_a_long_handler_keeps_its_lease(make: Make, queue: Queue) -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[int] = []
    acked: list[Job] = []
    consumer = make(queue, long_job(started, release, seen), lease_ms=HELD_LEASE_MS,
                        park_cap_ms=30_000, on_ack=acked.append)
    rival = make(queue, lambda job: None, lease_ms=HELD_LEASE_MS)
    queue.enqueue("JOB:long", b"x")
    with running(consumer):
        assert started.wait(3.0)
        for _ in range(4):  # 3 s, more than three leases
            time.sleep(0.75)
            assert rival.beat(park=False) == 0  # its recover finds no expired lease
            assert queue.conn.zscore(queue.key("active"), "JOB:long") is not None
        release.set()
        assert wait_until(lambda: len(acked) == 1)
    assert seen == [1]
    assert acked[0].attempt == 1
    row = queue.conn.hgetall(queue.key("job", "JOB:long"))
    assert row[b"a"] == b"1" and b"p" not in row


def test_without_a_heartbeat_the_lease_is_lost_and_the_late_ack_is_stale(
        make: Make, queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[int] = []
    acked: list[Job] = []
    consumer = make(queue, long_job(started, release, seen), lease_ms=300,
                        heartbeat=False, on_ack=acked.append)
    queue.enqueue("JOB:long", b"x")
    with caplog.at_level(logging.WARNING, logger="echomq"), running(consumer):
        assert started.wait(3.0)
        assert wait_until(lambda: queue.recover() == 1)
        release.set()
        assert wait_until(lambda: seen == [1, 2] and len(acked) == 1)
    assert [job.attempt for job in acked] == [2]
    assert "stale lease: JOB:long attempt 1" in caplog.text


def test_a_heartbeat_that_finds_its_lease_gone_logs_it(
        make: Make, conn: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(conn, "work")
    taken = threading.Event()

    def handler(job: Job) -> None:
        queue.recover(now=NOW + 10_000)  # another consumer takes the lease meanwhile
        assert queue.claim(now=NOW + 10_000) is not None
        taken.set()
        # Until a heartbeat (every 50 ms) has met the lease gone: the log line itself, waited
        # on, where a sleep of two intervals lost the race to a late heartbeat thread.
        assert wait_until(lambda: "was lost before its heartbeat" in caplog.text, timeout=60)

    consumer = make(queue, handler, lease_ms=150, clock=lambda: NOW)
    queue.enqueue("JOB:1", b"x", now=NOW)
    with caplog.at_level(logging.WARNING, logger="echomq"):
        assert consumer.beat(park=False) == 1
    consumer.close()
    assert taken.is_set()
    assert "stale lease: JOB:1 attempt 1 was lost before its heartbeat" in caplog.text


# wires and lanes ---------------------------------------------------------------------------


def test_wire6_drains_the_flat_queue_natively(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "work", wire=6)
    handled: list[str] = []
    queue.enqueue_many([(f"JOB:{n:02d}", b"x") for n in range(20)])
    before = command_calls(conn)
    assert make(queue, lambda job: handled.append(job.id)).beat(park=False) == 20
    after = command_calls(conn)
    assert handled == [f"JOB:{n:02d}" for n in range(20)]
    assert after.get("evalsha", 0) == before.get("evalsha", 0)
    assert after.get("emq.ack", 0) == before.get("emq.ack", 0)  # acks ride on the claims
    # batches of 1, 2, 4, 8, then the 5 left, then the empty claim that sends the last acks; on
    # a busy machine an outcome that waited too long may go in a settle of its own
    settles = after["emq.settle"] - before.get("emq.settle", 0)
    assert 6 <= settles < 20, settles
    assert queue.counts()["pending"] == 0


def test_wire6_refuses_a_lane_consumer_at_construction(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "work", wire=6)
    before = command_calls(conn)
    with pytest.raises(Wire6Unsupported) as refused:
        make(queue, lambda job: None, lanes=True)
    assert refused.value.name == "lane_claim"
    assert command_calls(conn) == before


def test_a_lane_consumer_serves_the_lanes_in_turn(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "work")
    groups = [f"tenant-{g}" for g in range(5)]
    queue.enqueue_many([(f"JOB:{g}-{n}", b"x", g) for g in groups[:1] for n in range(10)])
    queue.enqueue_many([(f"JOB:{g}-{n}", b"x", g) for g in groups[1:] for n in range(3)])
    served: list[str | None] = []
    assert make(queue, lambda job: served.append(job.lane), lanes=True).beat(
        park=False) == 22
    assert set(served[:5]) == set(groups)  # every lane before any lane twice
    assert served.count("tenant-0") == 10
    assert queue.counts()["lanes"] == 0


def test_a_lane_consumer_is_woken_by_a_lane_enqueue(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "work")
    handled = threading.Event()
    consumer = make(queue, lambda job: handled.set(), lanes=True, park_cap_ms=30_000)
    with running(consumer):
        assert parked(conn)
        queue.enqueue("JOB:lane", b"x", lane="tenant-a")
        assert handled.wait(3.0)


def test_an_acked_job_is_a_tombstone(make: Make, queue: Queue) -> None:
    acked: list[Verdict] = []
    queue.enqueue("JOB:1", b"x")
    consumer = make(queue, lambda job: None, on_ack=lambda job: acked.append(
        Verdict.ACKED))
    assert consumer.beat(park=False) == 1
    assert acked == [Verdict.ACKED]
    assert queue.enqueue("JOB:1", b"x") is Verdict.DUPLICATE


def test_a_heartbeat_that_fails_once_keeps_the_lease(make: Make, queue: Queue) -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[int] = []
    acked: list[Job] = []
    consumer = make(queue, long_job(started, release, seen), lease_ms=HELD_LEASE_MS,
                    park_cap_ms=30_000, on_ack=acked.append)
    inner = consumer if isinstance(consumer, Consumer) else consumer.consumer
    extend, failures = inner.queue.extend_many, [0]

    def flaky(jobs: list[Job], **options: object) -> object:
        if not failures[0]:
            failures[0] += 1
            raise redis.ConnectionError("connection reset by peer")
        return extend(jobs, **options)

    inner.queue.extend_many = flaky
    rival = Consumer(queue, lambda job: None, lease_ms=HELD_LEASE_MS)
    queue.enqueue("JOB:long", b"x")
    with running(consumer):
        assert started.wait(3.0)
        for _ in range(4):  # 3 s, more than three leases
            time.sleep(0.75)
            assert rival.beat(park=False) == 0  # its recover finds no expired lease
        release.set()
        assert wait_until(lambda: len(acked) == 1)
    rival.close()
    assert failures == [1] and seen == [1]
