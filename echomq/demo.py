"""A short demonstration on an embedded valkey-server with trafikey loaded: the same workload
through the scripts (wire=5) and the native module (wire=6), with admit-once, fencing and dead
jobs shown along the way."""

from __future__ import annotations

import time
from collections.abc import Callable

from echomq.embedded import EmbeddedValkey
from echomq.errors import StaleLease
from echomq.queue import Queue, Verdict

Say = Callable[[str], None]


def _produce(queue: Queue, jobs: int, batch: int) -> float:
    started = time.perf_counter()
    for first in range(0, jobs, batch):
        numbers = range(first, min(jobs, first + batch))
        items = [(f"JOB:{n:08d}", b"payload %d" % n) for n in numbers]
        queue.enqueue_many(items)
    return time.perf_counter() - started


def _consume(queue: Queue) -> tuple[int, float]:
    started, done = time.perf_counter(), 0
    while (job := queue.claim(lease_ms=30_000)) is not None:
        queue.ack(job, retention_ms=0)
        done += 1
    return done, time.perf_counter() - started


def _show_guarantees(queue: Queue, say: Say) -> None:
    say(f"  enqueue JOB:once twice -> {queue.enqueue('JOB:once', b'x').value}, "
        f"{queue.enqueue('JOB:once', b'x').value}")
    first = queue.claim(lease_ms=1)
    assert first is not None
    queue.recover(now=int(time.time() * 1000) + 10)
    second = queue.claim()
    assert second is not None
    try:
        queue.ack(first)
    except StaleLease:
        say(f"  lease of attempt {first.attempt} expired and was recovered: its ack is refused "
            f"(stale); attempt {second.attempt} acks -> {queue.ack(second, retention_ms=0).value}")
    queue.enqueue("JOB:poison", b"x")
    verdict = Verdict.RETRYING
    while verdict is Verdict.RETRYING:
        job = queue.claim()
        assert job is not None
        verdict = queue.retry(job, delay_ms=0, error="handler raised", max_attempts=3)
        queue.promote()
    say(f"  a job failing 3 times goes {verdict.value.lower()}: dead={queue.counts()['dead']}")


def run_demo(jobs: int = 20_000, batch: int = 500, say: Say = print) -> dict[int, float]:
    """Run the demonstration; returns round-trip jobs per second by wire."""
    rates: dict[int, float] = {}
    with EmbeddedValkey(prefer="wheel") as server:
        conn = server.client()
        version = conn.info("server")["valkey_version"]
        say(f"valkey-server {version} at {server.url}, trafikey loaded from the package")
        for wire in (5, 6):
            queue = Queue(conn, f"demo-wire{wire}", wire=wire)
            label = "scripts (EVALSHA)" if wire == 5 else "native (EMQ.*)"
            say(f"wire={wire}: {label}")
            _show_guarantees(queue, say)
            produced = _produce(queue, jobs, batch)
            consumed, spent = _consume(queue)
            rates[wire] = consumed / (produced + spent)
            say(f"  {jobs} jobs: produce {jobs / produced:,.0f}/s (batches of {batch}), "
                f"claim+ack {consumed / spent:,.0f}/s, round trip {rates[wire]:,.0f} jobs/s")
        conn.close()
    say(f"native / scripts round trip: {rates[6] / rates[5]:.2f}x (one run, one client)")
    return rates
