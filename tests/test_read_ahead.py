"""A consumer of one queue sends its next round while a batch runs (a second batch in flight):
when, in the core (no I/O), and through both shells on both wires — the next batch leased as a
whole batch starts, the hand within the prefetch, a stop handing back what was claimed ahead,
a job claimed before still running with nothing else in hand.

Waits are bounded and driven by what the server holds.
"""

from __future__ import annotations

import threading

import pytest
import redis

from echomq import Job, Queue
from echomq.consumer.loop import Lineup
from echomq.engine.calls import Ack
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import wait_until
from tests.test_loop import job, settings

# the core's rule --------------------------------------------------------------------------------


def busy(lineup: Lineup, size: int, now: float = 0.0) -> None:
    """A whole batch of ``size`` came (the last one having run at 1 ms a job)."""
    lineup.pace = 0.001
    lineup.cores[0].claimed([job(100 + n) for n in range(size)], now)
    lineup.round_claimed(size, size)
    lineup.batch_began(size, now)


def test_a_whole_batch_at_the_cap_sends_the_next_round_as_it_starts() -> None:
    lineup = Lineup.of(settings(capacity=8), 1)
    core = lineup.cores[0]
    assert lineup.reads_ahead and lineup.batch_cap == 4  # half the prefetch
    lineup.ramp = 4
    core.record(job(1), core.settlement(None), 0.0)  # an outcome of the batch before
    busy(lineup, 4)
    assert lineup.next_job(0.0) == (0, job(100))
    ahead = lineup.read_ahead(0.0)
    assert ahead is not None and ahead.claim == 4 and ahead.claim_id is not None
    assert ahead.outcomes == [Ack(job(1))] and not core.outbox  # the outcomes go with it
    assert lineup.held() + ahead.claim <= lineup.settings.capacity  # within the prefetch
    assert lineup.read_ahead(0.0) is None  # one round ahead at most
    assert lineup.take_ahead() is ahead and lineup.take_ahead() is None


def test_the_keeper_tells_a_round_ahead_only_once_written_and_after_the_settle_delay() -> None:
    """The round sent ahead is the loop's from its step to its write: the keeper reads its reply
    (and tells its outcomes) only once it was written, ``settle_delay_ms`` after it was sent,
    and once; it wakes for that."""
    lineup = Lineup.of(settings(capacity=8), 1)
    core = lineup.cores[0]
    lineup.ramp = 4
    core.record(job(1), core.settlement(None), 0.0)
    busy(lineup, 4)
    lineup.next_job(0.0)
    assert lineup.read_ahead(0.0) is not None
    delay = lineup.settings.settle_delay_ms / 1000
    assert not lineup.report_due(delay)  # not written yet: the loop's write may still come
    lineup.ahead_written = True
    assert not lineup.report_due(delay / 2) and lineup.report_due(delay)
    assert lineup.next_tick(0.0) <= delay
    lineup.ahead_reported = True
    assert not lineup.report_due(delay)


@pytest.mark.parametrize("case", ["short batch", "rested", "two queues", "one attempt",
                                  "slow handlers", "suspect running", "pace unknown"])
def test_no_round_goes_ahead_unless_the_queue_is_busy_and_the_batch_runs_quickly(
        case: str) -> None:
    """Not after a short batch (the queue ran dry: an idle consumer claims nothing more), nor
    after a park, nor for two queues (a later queue's batch would wait behind two), nor with a
    single attempt a job, nor when at the last batch's pace the jobs in hand would run past a
    third of a lease (the batch sent ahead would wait most of its lease), nor while a job
    claimed before runs, nor before any batch has run."""
    lineup = Lineup.of(settings(capacity=8, max_attempts=1 if case == "one attempt" else None),
                       2 if case == "two queues" else 1)
    lineup.ramp = lineup.batch_cap
    busy(lineup, 3 if case == "short batch" else lineup.batch_cap)
    if case == "short batch":
        lineup.round_claimed(4, 3)
    if case == "rested":
        lineup.rested()
    if case == "slow handlers":
        lineup.pace = 0.1 / 4 + 0.001  # lease 300 ms: 4 jobs in hand at this pace pass 100 ms
    if case == "pace unknown":
        lineup.pace = None
    if case == "suspect running":
        lineup.cores[0].running.add(Job("JOB:s", b"", 2))
    lineup.next_job(0.0)
    assert lineup.read_ahead(0.0) is None
    assert lineup.ahead is None


# through the shells -----------------------------------------------------------------------------


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "ahead", wire=request.param)


def fill(queue: Queue, n: int) -> list[str]:
    ids = [f"JOB:{i:03d}" for i in range(n)]
    queue.enqueue_many([(job_id, b"x") for job_id in ids])
    return ids


def active(queue: Queue) -> list[bytes]:
    return list(queue.conn.zrange(queue.key("active"), 0, -1))


def test_the_next_batch_is_leased_while_a_whole_batch_runs(make: Make, queue: Queue) -> None:
    """prefetch 8: batches of 1, 2, then 4 (half the prefetch). As JOB:003-006 starts, the next
    four are claimed with the outcomes of JOB:001-002: while JOB:006 runs, eight leases are out
    — never more than the prefetch — and every job runs once, in order."""
    ids = fill(queue, 16)
    seen: dict[str, int] = {}
    ran: list[str] = []

    def handler(job: Job) -> None:
        ran.append(job.id)
        if job.id == ids[6]:  # the last of the first whole batch at the cap
            assert wait_until(lambda: len(active(queue)) == 8)
        seen[job.id] = len(active(queue))

    consumer = make(queue, handler, prefetch=8, settle_delay_ms=60_000)
    assert consumer.beat(park=False) == 16
    assert ran == ids
    assert max(seen.values()) == 8
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}


def test_a_job_claimed_before_runs_alone_though_a_round_went_ahead(make: Make,
                                                                    queue: Queue) -> None:
    """JOB:005 fails its first attempt and comes back behind the others; when it runs again,
    in a batch whose next round went ahead, the jobs prefetched and claimed ahead were handed
    back first: its lease is the only one out, and every other job is acked once."""
    ids = fill(queue, 24)
    alone: list[list[bytes]] = []
    acked: list[str] = []

    def handler(job: Job) -> None:
        if job.id == ids[5]:
            if job.attempt == 1:
                raise ValueError("once")
            alone.append(active(queue))

    consumer = make(queue, handler, prefetch=8, retry_delay_ms=0, settle_delay_ms=60_000,
                    on_ack=lambda job: acked.append(job.id))
    while queue.counts()["pending"] or queue.counts()["delayed"]:
        consumer.beat(park=False)
    assert alone == [[ids[5].encode()]]
    assert sorted(acked) == sorted(ids)


def test_a_stop_hands_back_the_batch_claimed_ahead(make: Make, queue: Queue) -> None:
    """Stopped while JOB:004 runs, the round sent ahead as JOB:003 started (JOB:007-010) is
    read and handed back with JOB:005-006: pending again in order, their attempt uncounted."""
    ids = fill(queue, 11)
    running_now, release = threading.Event(), threading.Event()

    def handler(job: Job) -> None:
        if job.id == ids[4]:
            running_now.set()
            release.wait(5.0)

    consumer = make(queue, handler, prefetch=8, park_cap_ms=30_000)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    assert running_now.wait(5.0)
    assert wait_until(lambda: len(active(queue)) == 7)  # JOB:004-006 and JOB:007-010
    consumer.stop()
    release.set()
    thread.join(5.0)
    assert not thread.is_alive()
    assert active(queue) == []
    assert queue.conn.zrange(queue.key("pending"), 0, -1) == [i.encode() for i in ids[5:]]
    for job_id in ids[5:]:
        assert queue.conn.hget(queue.key("job", job_id), "a") in (None, b"0")


def test_a_slow_job_holds_back_no_on_ack_of_the_round_sent_ahead(make: Make,
                                                                   queue: Queue) -> None:
    """prefetch 8: as JOB:007-010 starts, the outcomes of JOB:003-006 go out with the round
    sent ahead. JOB:007 then runs until JOB:006's ``on_ack`` is told: once those outcomes have
    waited ``settle_delay_ms``, the keeper reads that round's reply and tells them, as it sends
    any outcome a running handler would hold back (the round's claim waits for the batch)."""
    ids = fill(queue, 16)
    told, waited = threading.Event(), []

    def handler(job: Job) -> None:
        if job.id == ids[7]:
            waited.append(told.wait(10.0))

    def on_ack(job: Job) -> None:
        if job.id == ids[6]:
            told.set()

    consumer = make(queue, handler, prefetch=8, settle_delay_ms=200, on_ack=on_ack)
    assert consumer.beat(park=False) == 16
    assert waited == [True]
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}
