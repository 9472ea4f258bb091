"""One consumer over several queues in strict priority order, on both shells and both wires,
against a real server: an earlier queue's jobs always run first while it has any ready (also
while producers keep it busy), a batch takes a later queue's jobs only for what the earlier
ones left unfilled, a park wakes on any queue, and each queue gets its housekeeping and (when
asked) its lanes."""

from __future__ import annotations

import queue as stdqueue
import threading
from collections.abc import Iterator

import pytest
import redis

from echomq import Job, Queue
from echomq.consumer.blocking import Consumer
from echomq.embedded import EmbeddedValkey
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import parked, running

NOW = 1_700_000_000_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def high(conn: redis.Redis, wire: int) -> Queue:
    return Queue(conn, "high", wire=wire)


@pytest.fixture
def low(conn: redis.Redis, wire: int) -> Queue:
    return Queue(conn, "low", wire=wire)


class Producer:
    """A thread with a connection of its own that enqueues a high job each time it is asked,
    and answers when it is admitted (so the test knows, without sleeping, that it is there)."""

    def __init__(self, server: EmbeddedValkey, name: str, wire: int) -> None:
        self.queue = Queue(server.client(), name, wire=wire)
        self.asked: stdqueue.Queue[tuple[str, threading.Event] | None] = stdqueue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (request := self.asked.get()) is not None:
            job_id, done = request
            self.queue.enqueue(job_id, b"high")
            done.set()

    def produce(self, job_id: str) -> None:
        done = threading.Event()
        self.asked.put((job_id, done))
        assert done.wait(5)

    def close(self) -> None:
        self.asked.put(None)
        self.thread.join(5)
        self.queue.conn.close()


@pytest.fixture
def producer(valkey: EmbeddedValkey, wire: int) -> Iterator[Producer]:
    made = Producer(valkey, "high", wire)
    yield made
    made.close()


def one_beat_with_a_late_high_job(make: Make, high: Queue, low: Queue, *, after: str,
                                  late: str, prefetch: int) -> list[str]:
    """One beat of a consumer of [high, low] whose handler enqueues the high job ``late`` as
    it runs the job ``after``; the ids in the order they ran."""
    order: list[str] = []

    def handler(job: Job) -> None:
        order.append(job.id)
        if job.id == after:
            high.enqueue(late, b"high")

    make([high, low], handler, prefetch=prefetch).beat(park=False)
    return order


def test_a_busy_high_queue_runs_before_any_low_job(make: Make, high: Queue, low: Queue,
                                                   producer: Producer) -> None:
    """While the producer keeps the high queue deeper than a round takes, not one low job runs;
    once it stops, the high queue drains and the low one follows."""
    prefetch, produced_cap = 8, 120
    for n in range(3 * prefetch):
        high.enqueue(f"JOB:h{n}", b"high")
    for n in range(40):
        low.enqueue(f"JOB:l{n}", b"low")
    total = 3 * prefetch + produced_cap + 40
    order: list[bytes] = []
    produced = [0]
    finished = threading.Event()

    def handler(job: Job) -> None:
        order.append(job.payload)
        if job.payload == b"high" and produced[0] < produced_cap:
            produced[0] += 1
            producer.produce(f"JOB:p{produced[0]}")
        if len(order) == total:
            finished.set()

    consumer = make([high, low], handler, prefetch=prefetch)
    with running(consumer):
        assert finished.wait(30), f"ran {len(order)} of {total}"
    assert order == [b"high"] * (3 * prefetch + produced_cap) + [b"low"] * 40


def test_a_batch_takes_a_later_queue_only_for_what_the_earlier_left_unfilled(
        make: Make, high: Queue, low: Queue) -> None:
    """The rule for batches: a round asks the low queue only for the places the high queue
    could not fill, so a high job that arrives while a batch runs waits at most for the rest
    of that batch, never for the whole low queue."""
    prefetch = 8
    for n in range(3):
        high.enqueue(f"JOB:h{n}", b"high")
    for n in range(30):
        low.enqueue(f"JOB:l{n:02}", b"low")
    order = one_beat_with_a_late_high_job(make, high, low, after="JOB:l00", late="JOB:hlate",
                                          prefetch=prefetch)
    assert order[:3] == ["JOB:h0", "JOB:h1", "JOB:h2"]
    assert len(order) == 34
    late, first_low = order.index("JOB:hlate"), order.index("JOB:l00")
    assert first_low < late <= first_low + prefetch
    assert [job for job in order if job.startswith("JOB:l")] == \
        [f"JOB:l{n:02}" for n in range(30)]


def test_with_one_job_in_hand_every_job_is_a_fresh_choice(make: Make, high: Queue,
                                                          low: Queue) -> None:
    for n in range(5):
        low.enqueue(f"JOB:l{n}", b"low")
    order = one_beat_with_a_late_high_job(make, high, low, after="JOB:l1", late="JOB:late",
                                          prefetch=1)
    assert order == ["JOB:l0", "JOB:l1", "JOB:late", "JOB:l2", "JOB:l3", "JOB:l4"]


def test_a_park_wakes_on_any_of_the_queues(make: Make, conn: redis.Redis, high: Queue,
                                           low: Queue) -> None:
    ran: list[str] = []
    seen = threading.Event()

    def handler(job: Job) -> None:
        ran.append(job.id)
        seen.set()

    # The park cap and housekeeping are far longer than the waits below: only a wake ends it.
    consumer = make([high, low], handler, park_cap_ms=60_000, housekeeping_ms=60_000)
    with running(consumer):
        for target, job_id in ((low, "JOB:l"), (high, "JOB:h"), (low, "JOB:l2")):
            assert parked(conn)
            seen.clear()
            target.enqueue(job_id, b"x")
            assert seen.wait(5), f"{job_id} on {target.name} did not wake the consumer"
    assert ran == ["JOB:l", "JOB:h", "JOB:l2"]


def test_each_queue_gets_its_housekeeping(make: Make, high: Queue, low: Queue) -> None:
    """An expired lease and a due retry in each queue are back in play at the next beat."""
    for target in (high, low):
        target.enqueue(f"JOB:{target.name}-lost", b"x", now=NOW)
        target.enqueue(f"JOB:{target.name}-retry", b"x", now=NOW)
        lost = target.claim(10, now=NOW)
        failed = target.claim(10, now=NOW)
        assert lost is not None and failed is not None
        target.retry(failed, delay_ms=50, error="again", now=NOW)
    ran: list[tuple[str, int]] = []
    consumer = make([high, low], lambda job: ran.append((job.id, job.attempt)),
                    clock=lambda: NOW + 1_000)
    consumer.beat(park=False)
    assert sorted(ran) == sorted([("JOB:high-lost", 2), ("JOB:high-retry", 2),
                                  ("JOB:low-lost", 2), ("JOB:low-retry", 2)])
    assert [job_id.split("-")[0] for job_id, _ in ran] == ["JOB:high"] * 2 + ["JOB:low"] * 2
    for target in (high, low):
        assert target.counts()["active"] == 0


def test_lanes_of_each_queue_are_served_in_priority_order(make: Make, conn: redis.Redis) -> None:
    high, low = Queue(conn, "high"), Queue(conn, "low")
    for n in range(3):
        low.enqueue(f"JOB:la{n}", b"low", lane="a")
        low.enqueue(f"JOB:lb{n}", b"low", lane="b")
        high.enqueue(f"JOB:ha{n}", b"high", lane="a")
    high.enqueue("JOB:hflat", b"high")
    low.enqueue("JOB:lflat", b"low")
    order: list[bytes] = []
    make([high, low], lambda job: order.append(job.payload), lanes=True).beat(park=False)
    assert order == [b"high"] * 4 + [b"low"] * 7


@pytest.mark.parametrize("bad", [[], "twice", "wires"])
def test_a_bad_list_of_queues_is_refused(conn: redis.Redis, bad: object) -> None:
    queues: list[Queue] = []
    if bad == "twice":
        queues = [Queue(conn, "a"), Queue(conn, "a")]
    elif bad == "wires":
        queues = [Queue(conn, "a", wire=5), Queue(conn, "b", wire=6)]
    with pytest.raises(ValueError):
        Consumer(queues, lambda job: None)


def test_the_heartbeat_extends_the_leases_in_hand_of_every_queue(make: Make, conn: redis.Redis,
                                                                 high: Queue,
                                                                 low: Queue) -> None:
    """One job of the high queue runs while three of the low one wait in hand: every lease,
    of both queues, is extended until they run (none expires, none runs twice)."""
    from tests.test_consumer import wait_until

    # Rounds of 1, 2, then 4 jobs: the third takes JOB:h and fills the rest from the low queue.
    for job_id in ("JOB:a", "JOB:b", "JOB:c", "JOB:h"):
        high.enqueue(job_id, b"high")
    for n in range(3):
        low.enqueue(f"JOB:l{n}", b"low")
    ran: list[tuple[str, int]] = []

    def leases() -> dict[bytes, float]:
        return {**dict(conn.zrange(high.key("active"), 0, -1, withscores=True)),
                **dict(conn.zrange(low.key("active"), 0, -1, withscores=True))}

    def handler(job: Job) -> None:
        ran.append((job.id, job.attempt))
        if job.id != "JOB:h":
            return
        first = leases()
        assert len(first) == 4  # its own lease and the three prefetched
        for _ in range(2):
            seen = leases()
            assert wait_until(lambda seen=seen: all(  # type: ignore[misc]
                score > seen[job_id] for job_id, score in leases().items()), 5)

    # A lease of a second: a heartbeat every third of it, so a stall of this loaded machine's
    # scheduler (hundreds of milliseconds) loses no lease.
    make([high, low], handler, lease_ms=1_000, prefetch=8).beat(park=False)
    assert ran == [("JOB:a", 1), ("JOB:b", 1), ("JOB:c", 1), ("JOB:h", 1), ("JOB:l0", 1),
                   ("JOB:l1", 1), ("JOB:l2", 1)]
    for target in (high, low):
        counts = target.counts()
        assert counts["active"] == counts["pending"] == counts["delayed"] == 0
