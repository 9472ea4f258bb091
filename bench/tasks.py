"""``python -m bench.tasks``: what the task layer costs the client per job, beside the raw path.

Two phases on each wire, each run on the same server and client, side by side:

- enqueue: ``add.enqueue(i, 1)`` (arity check, envelope, msgspec JSON, hooks) against
  ``queue.enqueue(new_job_id(), msgspec.json.encode({"a": i, "b": 1}))``, one call per job;
- work: one ``Consumer`` draining N queued jobs with ``app.handler`` (decode the envelope,
  convert the arguments to the hints, run, return ``Done`` keeping the return value, as a task
  does by default: encoded, and acked with it, which leaves the job's ended token) against a raw
  handler that decodes the same arguments with msgspec, calls the function and keeps nothing
  (a plain ack).

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
TIMES = "\N{MULTIPLICATION SIGN}"


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


def run(conn: redis.Redis, jobs: int, repeat: int) -> dict[str, dict[str, float]]:
    """The phase of ``python -m bench``: the best of ``repeat`` runs on each wire."""
    return {str(wire): best([measure(conn, wire, jobs) for _ in range(repeat)])
            for wire in (5, 6)}


def section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of this phase."""
    rows = []
    for wire, figures in results["tasks"].items():
        for phase in ("enqueue", "work"):
            raw, task = figures[f"{phase} raw"], figures[f"{phase} task"]
            rows.append(f"| {wire} | {phase} | {raw:.1f} | {task:.1f} | {task / raw:.2f}{TIMES} |")
        raw = figures["enqueue raw"] + figures["work raw"]
        task = figures["enqueue task"] + figures["work task"]
        rows.append(f"| {wire} | both | {raw:.1f} | {task:.1f} | {task / raw:.2f}{TIMES} |")
    return "\n".join([
        "## The task layer's client cost",
        "",
        "Client CPU µs per job (this process, every thread; best of the runs): `add.enqueue(i, 1)` "
        "against `Queue.enqueue` of the same arguments encoded with msgspec, and a `Consumer` "
        "draining with `app.handler` (envelope decoded, arguments converted to the hints, `Done` "
        "keeping the return value, the default) against a raw handler decoding the same "
        "arguments and keeping nothing. "
        f"Target: at most {TARGET}{TIMES} the raw path.",
        "",
        "| wire | phase | raw µs/job | task µs/job | task / raw |",
        "| --- | --- | --- | --- | --- |",
        *rows,
    ])


def targets(results: dict[str, Any]) -> list[list[str]]:
    """The targets table's rows of this phase: the layer's overhead, enqueue and work together."""
    rows = []
    for wire, figures in results.get("tasks", {}).items():
        raw = figures["enqueue raw"] + figures["work raw"]
        task = figures["enqueue task"] + figures["work task"]
        ratio = task / raw
        rows.append([f"task layer client cost ≤ {TARGET}{TIMES} the raw Queue path, wire={wire}",
                     f"{task:.1f} / {raw:.1f} µs per job = {ratio:.2f}{TIMES}",
                     "**met**" if ratio <= TARGET else "**missed**"])
    return rows


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
