"""Prefetched jobs under faults, on both wires and both shells: a job whose lease lapsed while
the network was down is never started (a real outage: a TCP proxy on loopback, cut and
restored), and no prefetched job starts once ``pause()`` returned. Starts are kept in a ledger;
the waits are driven by the server (its clock recovers the leases) and by the handlers. The
prefetch has a cap, refused past it by the consumers and the command line.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq import Job, Queue
from echomq.cli.main import main
from echomq.consumer.loop import MAX_PREFETCH
from echomq.embedded import EmbeddedValkey
from tests.faultproxy import FaultProxy
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import wait_until

# the ramp claims 1, 2, then 4 jobs (half the prefetch), and 4 ahead as JOB:03 starts: JOB:07
# heads the batch after, with JOB:11-14 claimed ahead as it starts
BATCH_HEAD = "JOB:07"


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def proxy(valkey: EmbeddedValkey) -> Iterator[FaultProxy]:
    proxy = FaultProxy(valkey.port)
    yield proxy
    proxy.close()


@pytest.fixture
def proxied(proxy: FaultProxy) -> Iterator[redis.Redis]:
    """A client through the proxy that never retries by itself: a cut fails its call at once."""
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=5,
                         socket_connect_timeout=2, retry=Retry(NoBackoff(), 0))
    yield client
    client.close()


def fill(queue: Queue, n: int) -> list[str]:
    ids = [f"JOB:{i:02d}" for i in range(n)]
    queue.enqueue_many([(job_id, b"") for job_id in ids])
    return ids


def quiet(queue: Queue) -> bool:
    counts = queue.counts()
    return counts["pending"] == counts["active"] == counts["delayed"] == 0


def test_no_prefetched_job_starts_after_its_lease_lapsed(
        make: Make, conn: redis.Redis, proxy: FaultProxy, proxied: redis.Redis,
        wire: int) -> None:
    """The network goes down while the head of a batch of 4 runs, the next 4 claimed ahead as
    it started; it runs on until the server has taken back every lease in hand (by its own
    clock) and handed them out again. The seven prefetched jobs need no network to start, yet
    none starts under its lapsed lease: once the network is back each job runs once, but for
    the head, which was running when its lease lapsed."""
    direct = Queue(conn, "lapse", wire=wire)
    ids = fill(direct, 15)
    started: list[str] = []
    recovered: list[int] = []

    def handler(job: Job) -> None:
        started.append(job.id)
        if job.id != BATCH_HEAD or recovered:
            return
        # the head, the three behind it and the four claimed ahead (sent as it started; an
        # asyncio consumer sends it from a task of its own). The batch before also holds 8
        # leases until that round settles it: wait for the round itself, or it could reach the
        # server after the cut's recovery and claim again what was recovered
        in_hand = {f"JOB:{i:02d}".encode() for i in range(7, 15)}
        assert wait_until(lambda: set(conn.zrange(direct.key("active"), 0, -1)) == in_hand)
        held = direct.counts()["active"]
        proxy.down()
        recovered.append(0)

        def all_back() -> bool:
            recovered[0] += direct.recover()
            return recovered[0] >= held

        wait_until(all_back, 15)

    # no housekeeping of its own: the leases lapse and are recovered by the test alone
    consumer = make(Queue(proxied, "lapse", wire=wire), handler, prefetch=8, lease_ms=1_000,
                    housekeeping_ms=600_000)
    # the first round after the cut: refused, or timed out connecting on a loaded machine
    with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        consumer.beat(park=False)
    assert recovered == [8]  # the head, the three behind it and the four claimed ahead
    proxy.up()
    for _ in range(4):
        # a pooled connection the cut closed (the asyncio shell's round sent ahead used one of
        # its own) fails once when next used, as the run loop's back-off would meet it
        with contextlib.suppress(redis.ConnectionError):
            consumer.beat(park=False)
        if quiet(direct):
            break
    assert quiet(direct)
    runs = Counter(started)
    assert runs.pop(BATCH_HEAD) == 2
    assert runs == dict.fromkeys(set(ids) - {BATCH_HEAD}, 1)


def test_no_prefetched_job_starts_once_pause_returned(make: Make, conn: redis.Redis,
                                                      wire: int) -> None:
    """The head of a batch of 4 pauses the queue; the three behind it and the four claimed
    ahead go back, pending with their attempt uncounted (``pause_check_ms=0``: a consumer asks
    before every prefetched start; by default, once its last word is 100 ms old)."""
    queue = Queue(conn, "pausing", wire=wire)
    fill(queue, 15)
    after_pause: list[str] = []
    paused: list[bool] = []

    def handler(job: Job) -> None:
        if paused:
            after_pause.append(job.id)
        if job.id == BATCH_HEAD:
            queue.pause()
            paused.append(True)

    consumer = make(queue, handler, prefetch=8, pause_check_ms=0)
    assert consumer.beat(park=False) == 8
    assert paused and after_pause == []
    assert queue.counts()["pending"] == 7 and queue.counts()["active"] == 0
    queue.resume()
    job = queue.claim()
    assert job is not None and job.id == "JOB:08" and job.attempt == 1


def test_the_prefetch_is_capped(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "capped")
    make(queue, lambda job: None, prefetch=MAX_PREFETCH)  # the cap itself is allowed
    with pytest.raises(ValueError, match=f"at most {MAX_PREFETCH}"):
        make(queue, lambda job: None, prefetch=MAX_PREFETCH + 1)
    result = CliRunner().invoke(main, ["worker", "tests.handlers:work", "--queue", "q",
                                       "--prefetch", str(MAX_PREFETCH + 1)])
    assert result.exit_code == 2 and "--prefetch" in result.output
    assert "Traceback" not in result.output
    help_text = CliRunner().invoke(main, ["worker", "--help"]).output
    assert f"at most {MAX_PREFETCH:,}" in " ".join(help_text.split())
