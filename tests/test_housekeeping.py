"""Housekeeping is never starved: under a producer that never lets the queue empty, and while the
job in hand runs long, an expired lease or a due retry is back in play within its lease (or delay)
plus ``housekeeping_ms`` — the stated bound — on both wires and both shells.

Times are the server's (``TIME``): a dead worker's lease is taken at a known server time, and the
moment the job is back is read from the server too. The allowance over the bound covers one claim
and one handler call under a 2-core machine's load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis

from echomq import Job, Queue
from echomq.consumer.blocking import server_ms
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import running, wait_until

HOUSEKEEPING_MS = 1_000  # the stated default bound
LEASE_MS = 100
ALLOWANCE_MS = 500
PRODUCING_S = 8.0


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "busy", wire=request.param)


@contextmanager
def producing(queue: Queue, depth: int = 200) -> Iterator[threading.Event]:
    """A producer that keeps at least ``depth`` jobs pending until the block ends (bounded by
    PRODUCING_S): the queue never empties while the test measures."""
    done = threading.Event()
    produced = [0]
    conn = queue.conn

    def produce() -> None:
        while not done.is_set():
            if conn.zcard(queue.key("pending")) >= depth:
                done.wait(0.005)
                continue
            first = produced[0]
            queue.enqueue_many([(f"JOB:p{n}", b"x") for n in range(first, first + depth)])
            produced[0] += depth

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    assert wait_until(lambda: produced[0] > 0)
    timer = threading.Timer(PRODUCING_S, done.set)
    timer.start()
    try:
        yield done
    finally:
        done.set()
        timer.cancel()
        thread.join(5.0)


def lost_lease(queue: Queue) -> tuple[Job, int]:
    """A job claimed by a worker that dies at once: the job and its lease deadline (server ms)."""
    queue.enqueue("JOB:lost", b"x")
    job = queue.claim(LEASE_MS)
    assert job is not None and job.id == "JOB:lost"
    return job, server_ms(queue.conn) + LEASE_MS


def due_retry(queue: Queue, delay_ms: int = LEASE_MS) -> int:
    """A job that failed once and is due again ``delay_ms`` from now: its due time (server ms)."""
    queue.enqueue("JOB:retried", b"x")
    job = queue.claim(60_000)
    assert job is not None and job.id == "JOB:retried"
    queue.retry(job, delay_ms=delay_ms, error="once")
    return server_ms(queue.conn) + delay_ms


def back_on_a_busy_queue(make: Make, queue: Queue) -> tuple[int, int]:
    """How long after it was due (server ms) a lost lease's job and a due retry each ran again,
    on ``queue`` kept busy by a producer."""
    back_at: dict[str, int] = {}
    both_back = threading.Event()
    conn = queue.conn

    def handler(job: Job) -> None:
        if job.id in ("JOB:lost", "JOB:retried"):
            back_at.setdefault(job.id, server_ms(conn))
            if len(back_at) == 2:
                both_back.set()

    consumer = make(queue, handler, lease_ms=5_000)
    _, expires_at = lost_lease(queue)
    due_at = due_retry(queue)
    with producing(queue) as done, running(consumer):
        assert both_back.wait(PRODUCING_S), f"starved: back {back_at}"
        assert not done.is_set()  # the queue was still busy when they came back
    return back_at["JOB:lost"] - expires_at, back_at["JOB:retried"] - due_at


def test_a_lost_lease_and_a_due_retry_run_again_within_the_bound_on_a_busy_queue(
        make: Make, queue: Queue) -> None:
    """Best of three, each on a queue of its own: a stall of the loaded machine can spoil one
    measure (tests/README.md, rule 3); code that misses the bound misses it every time."""
    late: list[tuple[int, int]] = []
    for attempt in range(3):
        late.append(back_on_a_busy_queue(make, Queue(queue.conn, f"busy{attempt}",
                                                     wire=queue.wire)))
        if max(late[-1]) <= HOUSEKEEPING_MS + ALLOWANCE_MS:
            return
    pytest.fail(f"ran again late by (lost lease, due retry) ms: {late}")


def test_housekeeping_runs_while_the_job_in_hand_runs_long(make: Make, queue: Queue) -> None:
    in_hand, release = threading.Event(), threading.Event()
    conn = queue.conn

    def handler(job: Job) -> None:
        if job.id == "JOB:long":
            in_hand.set()
            release.wait(10.0)

    consumer = make(queue, handler, lease_ms=5_000)
    queue.enqueue("JOB:long", b"x")
    with running(consumer):
        assert in_hand.wait(5.0)
        _, expires_at = lost_lease(queue)
        due_at = due_retry(queue)

        def back(job_id: str) -> Callable[[], bool]:
            return lambda: conn.zscore(queue.key("pending"), job_id) is not None

        try:
            assert wait_until(back("JOB:lost"), timeout=5.0)
            lost_back = server_ms(conn)
            assert wait_until(back("JOB:retried"), timeout=5.0)
            retry_back = server_ms(conn)
            assert not release.is_set()  # the long job was in hand all along
        finally:
            release.set()
    assert lost_back - expires_at <= HOUSEKEEPING_MS + ALLOWANCE_MS
    assert retry_back - due_at <= HOUSEKEEPING_MS + ALLOWANCE_MS


def test_the_bound_is_configurable(make: Make, conn: redis.Redis) -> None:
    with pytest.raises(ValueError, match="housekeeping_ms"):
        make(Queue(conn, "busy"), lambda job: None, housekeeping_ms=0)


def test_housekeeping_goes_on_while_a_handler_runs_past_its_time_limit(
        make: Make, queue: Queue) -> None:
    overrun_at: list[int] = []
    release, rerun = threading.Event(), threading.Event()
    conn = queue.conn

    def handler(job: Job) -> None:
        if job.id == "JOB:stuck":
            release.wait(10.0)  # stuck past its time limit, and on after it
        elif job.id == "JOB:lost":
            rerun.set()  # the asyncio shell moves on after the limit and runs it itself

    queue.enqueue("JOB:lost", b"x")
    lost = queue.claim(1_500)  # a worker that dies: its lease ends after the overrun below
    assert lost is not None and lost.id == "JOB:lost"
    expires_at = server_ms(conn) + 1_500
    queue.enqueue("JOB:stuck", b"x")
    consumer = make(queue, handler, time_limit_ms=200, retry_delay_ms=60_000,
                    on_overrun=lambda job: overrun_at.append(server_ms(conn)))
    with running(consumer, stop_within=10.0):  # the stuck handler's thread ends first
        try:
            assert wait_until(
                lambda: rerun.is_set() or conn.zscore(queue.key("pending"), "JOB:lost") is not None,
                timeout=5.0)
            back = server_ms(conn)
        finally:
            release.set()
    assert overrun_at and overrun_at[0] < expires_at
    assert back - expires_at <= HOUSEKEEPING_MS + ALLOWANCE_MS


def five_thousand_back_after(make: Make, queue: Queue) -> int:
    """How long after their leases ended (server ms) 5,000 jobs of a worker that died at once
    were all back from active, on ``queue`` kept busy by a producer."""
    lost = 5_000
    conn = queue.conn
    for first in range(0, lost, 1_000):
        queue.enqueue_many([(f"JOB:lost{n}", b"x") for n in range(first, first + 1_000)])
    assert len(queue.claim_many(lost, lease_ms=LEASE_MS)) == lost  # a worker that dies at once
    expires_at = server_ms(conn) + LEASE_MS
    consumer = make(queue, lambda job: None, lease_ms=30_000)

    def expired_left() -> bool:  # leases of the dead worker still in active
        return conn.zcount(queue.key("active"), "-inf", expires_at) == 0

    with producing(queue) as done, running(consumer):
        assert wait_until(expired_left, timeout=PRODUCING_S), "the backlog was not recovered"
        back = server_ms(conn)
        assert not done.is_set()  # the queue was still busy when they were all back
    return back - expires_at


def test_five_thousand_expired_leases_are_back_within_the_bound_under_a_producer(
        make: Make, queue: Queue) -> None:
    """Best of three, each on a queue of its own (tests/README.md, rule 3): at load average 11
    one attempt came back 2.1 s after the leases ended; code that recovers one step of 1,000 a
    round misses the bound every time."""
    late: list[int] = []
    for attempt in range(3):
        late.append(five_thousand_back_after(make, Queue(queue.conn, f"lost{attempt}",
                                                         wire=queue.wire)))
        if late[-1] <= HOUSEKEEPING_MS + ALLOWANCE_MS:
            return
    pytest.fail(f"all back late by ms: {late}")
