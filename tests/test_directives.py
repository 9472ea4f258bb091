"""Handler directives end to end: ``Done``, ``RetryIn`` and ``Reject`` on both shells and both
wires, against a real server, and their settlements in the loop's core."""

from __future__ import annotations

import pytest
import redis

from echomq import Done, Job, Queue, Reject, RetryIn
from echomq.consumer.loop import MAX_RESULT_BYTES, Ack, LoopCore, Retry, Settings
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401

NOW = 1_700_000_000_000


def core(max_attempts: int | None = 4) -> LoopCore:
    return LoopCore(Settings(lease_ms=300, retry_delay_ms=1_000, max_attempts=max_attempts,
                             park_cap_ms=5_000, park_floor_ms=10, housekeeping_ms=1_000,
                             time_limit_ms=None, retention_ms=7, heartbeat=True, lanes=False))


def test_each_directive_settles_as_it_says() -> None:
    loop = core()
    assert loop.settlement(None, Done(b"r"), 1) == Ack(7, b"r")
    assert loop.settlement(None, Done(), 1) == Ack(7)
    assert loop.settlement(None, "anything else", 1) == Ack(7)
    assert loop.settlement(None, RetryIn(250, "later"), 2) == Retry(250, "later", 4)
    assert loop.settlement(None, RetryIn(0, "x", max_attempts=9), 2) == Retry(0, "x", 9)
    assert loop.settlement(None, Reject("never"), 3) == Retry(0, "never", 3)
    assert core(None).settlement(None, RetryIn(5, "q"), 1) == Retry(5, "q", None)
    failed = loop.settlement(ValueError("boom"), Done(b"ignored"), 1)
    assert isinstance(failed, Retry) and failed.error == "ValueError: boom"


def test_a_result_over_the_cap_fails_its_attempt_instead_of_the_round() -> None:
    settled = core().settlement(None, Done(b"x" * (MAX_RESULT_BYTES + 1)), 1)
    assert isinstance(settled, Retry) and settled.error.startswith("ResultTooLarge:")
    assert core().settlement(None, Done(b"x" * MAX_RESULT_BYTES), 1) == \
        Ack(7, b"x" * MAX_RESULT_BYTES)


@pytest.mark.parametrize("bad", [lambda: RetryIn(-1, "e"), lambda: RetryIn(1, "e", 0),
                                 lambda: Done("text")])  # type: ignore[arg-type]
def test_a_bad_directive_is_refused_where_it_is_made(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        bad()  # type: ignore[operator]


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "work", wire=request.param, max_attempts=5)


def row(queue: Queue, job_id: str) -> dict[bytes, bytes]:
    return queue.conn.hgetall(queue.key("job", job_id))  # type: ignore[no-any-return]


def run_one(make: Make, queue: Queue, handler: object, **options: object) -> None:
    consumer = make(queue, handler, clock=lambda: NOW, heartbeat=False, **options)
    consumer.beat(park=False)


def test_retry_in_waits_the_delay_it_asks_and_dies_at_its_max_attempts(make: Make,
                                                                         queue: Queue) -> None:
    queue.enqueue("JOB:a", b"p", now=NOW)
    run_one(make, queue, lambda job: RetryIn(4_321, f"not yet {job.attempt}", max_attempts=2))
    assert queue.conn.zscore(queue.key("delayed"), "JOB:a") == NOW + 4_321
    assert row(queue, "JOB:a")[b"error"] == b"not yet 1"
    queue.promote(now=NOW + 4_321)
    run_one(make, queue, lambda job: RetryIn(4_321, f"not yet {job.attempt}", max_attempts=2))
    assert queue.counts()["dead"] == 1
    assert row(queue, "JOB:a")[b"error"] == b"not yet 2"


def test_reject_sends_the_job_dead_on_its_first_attempt(make: Make, queue: Queue) -> None:
    queue.enqueue("JOB:a", b"p", now=NOW)
    run_one(make, queue, lambda job: Reject("cannot ever work"))
    counts = queue.counts()
    assert counts["dead"] == 1 and counts["delayed"] == 0
    assert row(queue, "JOB:a")[b"error"] == b"cannot ever work"
    assert row(queue, "JOB:a")[b"a"] == b"1"


def test_done_acks_and_any_other_value_acks_as_before(make: Make, queue: Queue) -> None:
    queue.enqueue("JOB:a", b"p", now=NOW)
    queue.enqueue("JOB:b", b"p", now=NOW)
    run_one(make, queue, lambda job: Done(b"42") if job.id == "JOB:a" else {"not": "bytes"})
    counts = queue.counts()
    assert counts["pending"] == counts["active"] == counts["dead"] == counts["delayed"] == 0


def test_an_oversized_result_retries_and_the_worker_goes_on(make: Make, queue: Queue) -> None:
    queue.enqueue("JOB:a", b"p", now=NOW)
    queue.enqueue("JOB:b", b"p", now=NOW)
    run_one(make, queue, lambda job: Done(b"x" * (MAX_RESULT_BYTES + 1)) if job.id == "JOB:a"
            else Done(b"ok"), prefetch=2)
    assert queue.counts()["delayed"] == 1
    assert row(queue, "JOB:a")[b"error"].startswith(b"ResultTooLarge")
    assert b"error" not in row(queue, "JOB:b")


def test_done_keeps_its_result_with_the_tombstone(make: Make, queue: Queue) -> None:
    queue.enqueue("JOB:a", b"p")
    queue.enqueue("JOB:b", b"p")
    run_one(make, queue, lambda job: Done(b"the answer") if job.id == "JOB:a" else Done())
    kept = queue.outcome("JOB:a")
    assert (kept.state, kept.result, kept.attempts) == ("done", b"the answer", 1)
    assert queue.outcome("JOB:b").state == "done" and queue.outcome("JOB:b").result is None


def test_async_handlers_return_directives_too(make: Make, queue: Queue) -> None:
    async def handler(job: Job) -> object:
        return Reject("async says no")

    queue.enqueue("JOB:a", b"p", now=NOW)
    run_one(make, queue, handler)
    assert queue.counts()["dead"] == 1


def test_the_worker_registry_counts_a_retry_or_a_rejection_as_failed(conn: redis.Redis) -> None:
    from echomq.consumer.presence import Announcer

    announcer = Announcer(conn, "work", 5)
    outcomes = iter([Done(b"r"), RetryIn(1, "e"), Reject("e"), None])
    tracked = announcer.track(lambda job: next(outcomes))
    for _ in range(4):
        tracked(Job("JOB:a", b"", 1))
    fields = announcer.fields(NOW)
    assert (fields["done"], fields["failed"]) == (2, 2)
