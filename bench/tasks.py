"""``python -m bench.tasks``: what the task layer costs the client per job, beside the raw path.

Two phases on each wire, each run on the same server and client, side by side:

- enqueue: ``add.enqueue(i, 1)`` (arity check, envelope, msgspec JSON, hooks) against
  ``queue.enqueue(new_job_id(), msgspec.json.encode({"a": i, "b": 1}))``, one call per job;
- work: one ``Consumer`` draining N queued jobs with ``app.handler`` (decode the envelope,
  convert the arguments to the hints, run, return ``Done``) against a raw handler that decodes
  the same arguments with msgspec and calls the function.

The figure is the client's CPU time per job (``time.process_time``: this process, every thread,
not the server's), the best of ``--repeat`` runs; the ratio task / raw is the layer's overhead
(target: at most 1.5). Measured, not asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import msgspec
import redis

from bench.common import running_server
from echomq import App, Consumer, Job, Queue, new_job_id

TARGET = 1.5


def add(a: int, b: int) -> int:
    return a + b


def raw_handler(job: Job) -> None:
    arguments = msgspec.json.decode(job.payload)
    add(arguments["a"], arguments["b"])


def cpu_per_job_us(run: Callable[[], int]) -> float:
    """Client CPU µs per job of ``run`` (which returns how many jobs it handled)."""
    started = time.process_time()
    handled = run()
    spent = time.process_time() - started
    assert handled > 0
    return spent * 1e6 / handled


def enqueue_raw(queue: Queue, jobs: int) -> int:
    encode = msgspec.json.encode
    for i in range(jobs):
        queue.enqueue(new_job_id(), encode({"a": i, "b": 1}))
    return jobs


def enqueue_tasks(task: Any, jobs: int) -> int:
    for i in range(jobs):
        task.enqueue(i, 1)
    return jobs


def drain(queue: Queue, handler: Callable[[Job], object]) -> int:
    consumer = Consumer(queue, handler)
    try:
        return consumer.drain()
    finally:
        consumer.close()


def measure(conn: redis.Redis, wire: int, jobs: int) -> dict[str, float]:
    """One run of both phases on ``wire``: µs of client CPU per job, raw and task."""
    conn.flushall()
    app = App(conn, "tasks", wire=wire)
    task = app.task(name="add")(add)
    raw = Queue(conn, "raw", wire=wire)
    return {
        "enqueue raw": cpu_per_job_us(lambda: enqueue_raw(raw, jobs)),
        "enqueue task": cpu_per_job_us(lambda: enqueue_tasks(task, jobs)),
        "work raw": cpu_per_job_us(lambda: drain(raw, raw_handler)),
        "work task": cpu_per_job_us(lambda: drain(app.queue, app.handler)),
    }


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: min(run[name] for run in runs) for name in runs[0]}


def report(wire: int, figures: dict[str, float]) -> None:
    for phase in ("enqueue", "work"):
        raw, task = figures[f"{phase} raw"], figures[f"{phase} task"]
        ratio = task / raw
        verdict = "meets" if ratio <= TARGET else "misses"
        print(f"wire={wire} {phase:8} raw {raw:7.1f} µs/job  task {task:7.1f} µs/job  "
              f"ratio {ratio:4.2f} ({verdict} the {TARGET}x target)")
    raw = figures["enqueue raw"] + figures["work raw"]
    task = figures["enqueue task"] + figures["work task"]
    print(f"wire={wire} both     raw {raw:7.1f} µs/job  task {task:7.1f} µs/job  "
          f"ratio {task / raw:4.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tasks", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--wire", type=int, choices=(5, 6), action="append")
    args = parser.parse_args(argv)
    with running_server() as server:
        conn = server.client()
        for wire in args.wire or [5, 6]:
            runs = [measure(conn, wire, args.jobs) for _ in range(args.repeat)]
            report(wire, best(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
