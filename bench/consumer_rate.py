"""``python -m bench.consumer_rate``: how fast one ``Consumer`` with its defaults drains a queue.

One consumer process, a no-op handler, N jobs queued beforehand; jobs/s on each wire, beside a
plain redis-py ``GET`` loop on the same client and server in the same run (one round trip per
call: the rate a loop paying one round trip per job could reach at best). Measured, not asserted:
the machine is shared, so a figure is the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import time

import redis

from bench.common import start_server
from echomq import Consumer, Job, Queue

CHUNK = 1_000


def noop(job: Job) -> None:
    """The handler: nothing, so what is measured is the loop."""


def fill(queue: Queue, jobs: int) -> None:
    for first in range(0, jobs, CHUNK):
        queue.enqueue_many([(f"JOB:{n}", b"x") for n in range(first, min(first + CHUNK, jobs))])


def consumer_rate(conn: redis.Redis, wire: int, jobs: int) -> float:
    """jobs/s of one Consumer (its defaults) draining ``jobs`` queued jobs on ``wire``."""
    conn.flushall()
    queue = Queue(conn, "rate", wire=wire)
    fill(queue, jobs)
    consumer = Consumer(queue, noop)
    try:
        started = time.perf_counter()
        handled = consumer.beat(park=False)
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if handled != jobs or queue.counts()["pending"]:
        raise SystemExit(f"wire {wire}: drained {handled} of {jobs}")
    return jobs / elapsed


def get_rate(conn: redis.Redis, calls: int) -> float:
    """Calls/s of a plain ``GET`` loop: one round trip each."""
    conn.set("k", "v")
    started = time.perf_counter()
    for _ in range(calls):
        conn.get("k")
    return calls / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept")
    options = parser.parse_args(argv)
    server = start_server()
    try:
        conn = server.client()
        rates = {
            "GET loop": max(get_rate(conn, options.jobs) for _ in range(options.repeat)),
            "wire=6": max(consumer_rate(conn, 6, options.jobs) for _ in range(options.repeat)),
            "wire=5": max(consumer_rate(conn, 5, options.jobs) for _ in range(options.repeat)),
        }
        conn.close()
    finally:
        server.stop()
    for name, rate in rates.items():
        print(f"{name:>9}: {rate:>9,.0f} /s")
    print(f"wire=6 / GET loop: {rates['wire=6'] / rates['GET loop']:.1f}x   "
          f"wire=6 / wire=5: {rates['wire=6'] / rates['wire=5']:.2f}x   "
          f"({options.jobs:,} jobs, best of {options.repeat}; a shared machine: figures vary)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
