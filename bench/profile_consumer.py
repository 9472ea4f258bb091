"""Where one consumer's time goes: ``python -m bench.profile_consumer [--wire 6] [--jobs N]``.

Starts a private valkey-server with trafikey, queues N no-op jobs, and drains them with one
``Consumer`` (every default) in this process under cProfile; prints jobs/s and the functions
with the most time of their own. Drained with ``beat(park=False)`` until the queue is empty, so
nothing parks while the profiler runs."""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

from bench.common import running_server
from bench.workers import QUEUE, fill, unsettled
from echomq import Consumer, Job, Queue


def _noop(job: Job) -> None:
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_consumer",
                                     description=__doc__)
    parser.add_argument("--wire", type=int, choices=(5, 6), default=6)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    with running_server() as server:
        conn = server.client()
        queue = Queue(conn, QUEUE, wire=args.wire, check_policy=False)
        fill(queue, args.jobs)
        consumer = Consumer(queue, _noop)
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.enable()
        while unsettled(conn, queue):
            consumer.beat(park=False)
        profile.disable()
        elapsed = time.perf_counter() - started
        consumer.close()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print(f"wire={args.wire}: {args.jobs:,} jobs in {elapsed:.2f} s under cProfile "
          f"({args.jobs / elapsed:,.0f} jobs/s; the profiler slows Python down)")
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
