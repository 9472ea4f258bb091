"""Every handler outcome, on both shells: the loop never dies, and each attempt is settled once.

``async def`` handlers run (not acked unrun), a hung handler loses its attempt at ``time_limit_ms``
and ``on_overrun`` is told, error text is stored safely with its last frames, SystemExit and
KeyboardInterrupt fail the attempt then stop the loop, and ``max_attempts=None`` is the queue's.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from echomq import Job, Queue
from echomq.consumer.blocking import error_text
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import running, wait_until

NOW = 1_700_000_000_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "work", wire=request.param)


def error_of(queue: Queue, job_id: str) -> str:
    return bytes(queue.conn.hget(queue.key("job", job_id), "error") or b"").decode()


# async handlers ----------------------------------------------------------------------------


def test_an_async_handler_runs_before_its_job_is_acked(make: Make, queue: Queue) -> None:
    ran: list[str] = []
    acked: list[str] = []

    async def handler(job: Job) -> None:
        await asyncio.sleep(0)
        ran.append(job.id)

    consumer = make(queue, handler, on_ack=lambda job: acked.append(job.id))
    queue.enqueue_many([("JOB:1", b"x"), ("JOB:2", b"y")])
    assert consumer.beat(park=False) == 2
    assert ran == ["JOB:1", "JOB:2"]
    assert acked == ["JOB:1", "JOB:2"]


def test_a_failing_async_handler_retries(make: Make, queue: Queue) -> None:
    async def handler(job: Job) -> None:
        await asyncio.sleep(0)
        raise ValueError("async boom")

    consumer = make(queue, handler, clock=lambda: NOW)
    queue.enqueue("JOB:1", b"x", now=NOW)
    assert consumer.beat(park=False) == 1
    assert queue.counts()["delayed"] == 1
    assert error_of(queue, "JOB:1").startswith("ValueError: async boom\n")


# the time limit ----------------------------------------------------------------------------


def test_a_hung_handler_loses_its_attempt_at_the_time_limit(make: Make, queue: Queue) -> None:
    release = threading.Event()
    overrun: list[Job] = []
    told = threading.Event()

    def handler(job: Job) -> None:
        release.wait(10.0)  # hangs: the heartbeat alone would keep its lease for ever

    def on_overrun(job: Job) -> None:
        overrun.append(job)
        told.set()

    consumer = make(queue, handler, lease_ms=300, time_limit_ms=400, retry_delay_ms=60_000,
                    on_overrun=on_overrun)
    queue.enqueue("JOB:hung", b"x")
    try:
        with running(consumer):
            started = time.monotonic()
            assert told.wait(5.0)
            assert time.monotonic() - started < 2.0
            assert queue.conn.zscore(queue.key("delayed"), "JOB:hung") is not None
            assert queue.conn.zscore(queue.key("active"), "JOB:hung") is None
            release.set()
    finally:
        release.set()
    assert [job.id for job in overrun] == ["JOB:hung"]
    assert error_of(queue, "JOB:hung") == "TimeLimitExceeded: time limit of 400 ms exceeded"
    assert queue.counts()["delayed"] == 1  # the late return changed nothing


def test_a_hung_async_handler_is_cancelled_at_the_time_limit(make: Make, queue: Queue) -> None:
    cancelled = threading.Event()

    async def handler(job: Job) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    consumer = make(queue, handler, time_limit_ms=300, max_attempts=1)
    queue.enqueue("JOB:hung", b"x")
    with running(consumer):
        assert cancelled.wait(5.0)
        assert wait_until(lambda: queue.counts()["dead"] == 1)
    assert "time limit of 300 ms exceeded" in error_of(queue, "JOB:hung")


def test_without_a_time_limit_nothing_is_cut_short(make: Make, queue: Queue) -> None:
    def handler(job: Job) -> None:
        time.sleep(2.0)  # two leases long

    consumer = make(queue, handler, lease_ms=1_000)
    queue.enqueue("JOB:1", b"x")
    assert consumer.beat(park=False) == 1
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}


# error text --------------------------------------------------------------------------------


def test_an_error_with_a_lone_surrogate_is_stored_escaped(make: Make, queue: Queue) -> None:
    def handler(job: Job) -> None:
        raise ValueError("bad byte \udcff here")

    consumer = make(queue, handler)
    queue.enqueue("JOB:1", b"x")
    queue.enqueue("JOB:2", b"y")
    assert consumer.beat(park=False) == 2  # the loop did not die on the first
    assert error_of(queue, "JOB:1").startswith("ValueError: bad byte \\udcff here\n")
    assert queue.counts()["delayed"] == 2


def test_the_error_keeps_the_last_frames_within_a_cap(make: Make, queue: Queue) -> None:
    def deep(n: int) -> None:
        if n == 0:
            raise RuntimeError("x" * 10_000)
        deep(n - 1)

    consumer = make(queue, lambda job: deep(50))
    queue.enqueue("JOB:1", b"x")
    consumer.beat(park=False)
    error = error_of(queue, "JOB:1")
    assert error.startswith("RuntimeError: xxx")
    assert len(error) <= 4_096
    assert "in deep" in error and "raise RuntimeError" in error


def test_error_text_of_a_raised_exception_has_its_frames() -> None:
    try:
        raise KeyError("k")
    except KeyError as exc:
        text = error_text(exc)
    first, rest = text.split("\n", 1)
    assert first == "KeyError: 'k'"
    assert "test_error_text_of_a_raised_exception_has_its_frames" in rest


# BaseException ----------------------------------------------------------------------------


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
def test_system_exit_fails_the_attempt_and_stops_the_loop(
        make: Make, queue: Queue, raised: type[BaseException]) -> None:
    def handler(job: Job) -> None:
        raise raised("bye")

    consumer = make(queue, handler, retry_delay_ms=0)
    queue.enqueue("JOB:1", b"x")
    finished = threading.Event()

    def run() -> None:
        consumer.run()
        finished.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert finished.wait(5.0), "run() did not return"
    assert consumer.stopping
    assert error_of(queue, "JOB:1").startswith(f"{raised.__name__}: bye")
    assert queue.counts()["active"] == 0


def test_another_base_exception_only_fails_the_attempt(make: Make, queue: Queue) -> None:
    class Odd(BaseException):
        pass

    def handler(job: Job) -> None:
        if job.id == "JOB:1":
            raise Odd("odd")

    consumer = make(queue, handler)
    queue.enqueue_many([("JOB:1", b"x"), ("JOB:2", b"y")])
    assert consumer.beat(park=False) == 2
    assert not consumer.stopping
    assert error_of(queue, "JOB:1").startswith("Odd: odd")


# poison: max_attempts ---------------------------------------------------------------------


def test_max_attempts_none_is_the_queues(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "poison", max_attempts=2)
    clock = [NOW]

    def handler(job: Job) -> None:
        raise RuntimeError("poison")

    consumer = make(queue, handler, retry_delay_ms=10, clock=lambda: clock[0])
    queue.enqueue("JOB:p", b"x", now=NOW)
    assert consumer.beat(park=False) == 1
    clock[0] += 10
    assert consumer.beat(park=False) == 1
    assert queue.conn.zscore(queue.key("dead"), "JOB:p") is not None


def test_a_consumers_own_max_attempts_wins(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "poison", max_attempts=5)
    clock = [NOW]

    def handler(job: Job) -> None:
        raise RuntimeError("poison")

    consumer = make(queue, handler, retry_delay_ms=10, max_attempts=1, clock=lambda: clock[0])
    queue.enqueue("JOB:p", b"x", now=NOW)
    assert consumer.beat(park=False) == 1
    assert queue.conn.zscore(queue.key("dead"), "JOB:p") is not None
