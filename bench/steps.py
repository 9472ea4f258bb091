"""The cost of a durable step's write (``python -m bench.steps``): ``INFO commandstats``
usec_per_call of step on each wire, beside progress (the same fenced check and one HSET), for a
job leased once and steps of ~100-byte outputs, each under a name of its own. The wires are
interleaved run by run (5, 6, 5, 6, ...), so a machine's drift reaches both alike; each figure is
the median of the runs."""

from __future__ import annotations

import statistics
import sys
from typing import Any

import redis

from bench.common import call, commandstats, pipelined, reset, running_server, stat_name
from echomq.engine import transitions as t
from echomq.engine.calls import Job, QueueCalls
from echomq.engine.scripts import script_for
from echomq.engine.steps import step_call

NOW = 1_700_000_000_000
OUTPUT = b'{"value":{"charge":"ch_3MqBqe2eZvKYlo2C0w9pXyz","cents":4200,"ok":true}}'
WIRES = (5, 6)


def leased(conn: redis.Redis, calls: QueueCalls, wire: int) -> Job:
    """One job enqueued and claimed on ``wire``: the lease the steps are written under."""
    for made in (calls.enqueue("JOB:bench-steps", b"p", None, NOW), calls.claim(30_000, NOW)):
        reply = conn.execute_command(*call(made[0], wire, made[1], made[2]))
    job_id, _payload, attempt, fence = reply
    return Job(job_id.decode(), b"", int(attempt), fence=int(fence))


def one_run(conn: redis.Redis, wire: int, count: int) -> dict[str, float]:
    """usec_per_call of ``count`` step writes, then of ``count`` progress reports, on one lease."""
    conn.flushall()
    for transition in (t.ENQUEUE, t.CLAIM, t.STEP, t.PROGRESS):
        conn.script_load(script_for(transition).source)
    calls = QueueCalls(f"steps{wire}")
    job = leased(conn, calls, wire)
    out = {}
    for name, made in (("step", [step_call(calls, job, f"s{i}", OUTPUT) for i in range(count)]),
                       ("progress", [calls.progress(job, OUTPUT) for _ in range(count)])):
        reset(conn)
        replies = pipelined(conn, [call(m[0], wire, m[1], m[2]) for m in made])
        if any(reply not in (b"RECORDED", "RECORDED") for reply in replies):
            raise RuntimeError(f"steps bench, wire={wire}: {replies[:1]!r}")
        transition = t.STEP if name == "step" else t.PROGRESS
        out[name] = commandstats(conn)[stat_name(transition, wire)]["usec_per_call"]
    return out


def run(conn: redis.Redis, count: int, reps: int) -> dict[str, Any]:
    """The median over ``reps`` interleaved runs of each wire's step and progress costs."""
    runs: dict[int, list[dict[str, float]]] = {wire: [] for wire in WIRES}
    for _ in range(reps):
        for wire in WIRES:
            runs[wire].append(one_run(conn, wire, count))
    table = {str(wire): {name: statistics.median(r[name] for r in runs[wire])
                         for name in ("step", "progress")} for wire in WIRES}
    return {"count": count, "reps": reps, "output_bytes": len(OUTPUT), "table": table}


def section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of this phase."""
    data = results["steps"]
    rows = [f"| {wire} | {row['step']:.2f} | {row['progress']:.2f} |"
            for wire, row in data["table"].items()]
    return "\n".join([
        "## Durable steps (`python -m bench.steps`)", "",
        f"usec_per_call of a step write (`EMQ.STEP` / `step.lua`, a {data['output_bytes']}-byte "
        f"output under a new name) beside a progress report on the same lease: median of "
        f"{data['reps']} interleaved runs of {data['count']:,} calls each.", "",
        "| wire | step µs | progress µs |", "| --- | --- | --- |", *rows])


def main() -> int:
    count, reps = (int(a) for a in [*sys.argv[1:], "5000", "5"][:2])
    with running_server() as server:
        conn = server.client()
        print(section({"steps": run(conn, count, reps)}))
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
