# ruff: noqa: RUF001  (the report writes the multiplication sign on purpose)
"""Priority: the cost of enqueue and claim with every job at priority 0 beside a mix of
priorities, on both wires (``INFO commandstats`` usec_per_call); a job of priority 10 enqueued
behind a million jobs of priority 0 (filled through ``valkey-cli --pipe``), which must be the
next claim; and the cost of a lane claim with prioritised jobs in the lanes beside one without
(scripts only, as lanes are)."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import redis
from tqdm import tqdm

from bench.common import (
    call,
    claim_cmd,
    ids,
    mass_insert,
    stat_name,
    usec_per_call,
)
from echomq import Queue
from echomq.engine import transitions as t
from echomq.engine.calls import priority_args
from echomq.engine.priority import pending_score

PAYLOAD = b"noop"
BASE = "emq:{prio}:"
REPS = 3
# The mix: a quarter of the jobs at 0, the rest spread over seven other priorities.
MIX = (0, 5, -5, 10, 0, 1, -1, 100)
SEED_AT = 1_700_000_000_000
TARGET = 1.05  # a mix of priorities costs at most this much more than all at 0


def _enqueue(wire: int, job_id: str, priority: int) -> list[Any]:
    args = (job_id, PAYLOAD, "*", *priority_args(priority))
    return call(t.ENQUEUE, wire, t.keys_for(BASE, t.ENQUEUE, job_id), args)


def _round(conn: redis.Redis, wire: int, calls: int, mixed: bool, rep: int) -> tuple[float, float]:
    """usec per enqueue of ``calls`` jobs (all at 0, or the mix), then per claim of them all."""
    conn.flushall()
    jobs = ids(f"w{wire}m{int(mixed)}r{rep}", calls)
    enqueues = [_enqueue(wire, job_id, MIX[i % len(MIX)] if mixed else 0)
                for i, job_id in enumerate(jobs)]
    enqueue = usec_per_call(conn, enqueues, stat_name(t.ENQUEUE, wire))
    claim = usec_per_call(conn, [claim_cmd(BASE, wire) for _ in jobs], stat_name(t.CLAIM, wire))
    return enqueue, claim


def costs(conn: redis.Redis, calls: int) -> dict[str, dict[str, float]]:
    """Per wire: enqueue and claim µs, all at priority 0 and mixed, medians of REPS rounds
    interleaved."""
    samples: dict[str, list[float]] = {}
    for rep in tqdm(range(REPS), desc="priority: 0 vs a mix", unit="round"):
        for wire in (6, 5):
            for mixed in (False, True):
                enqueue, claim = _round(conn, wire, calls, mixed, rep)
                kind = "mixed" if mixed else "zero"
                samples.setdefault(f"enqueue/{kind}/{wire}", []).append(enqueue)
                samples.setdefault(f"claim/{kind}/{wire}", []).append(claim)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    table: dict[str, dict[str, float]] = {}
    for wire in (6, 5):
        for name in ("enqueue", "claim"):
            zero, mixed = medians[f"{name}/zero/{wire}"], medians[f"{name}/mixed/{wire}"]
            table[f"{name}/{wire}"] = {"zero": zero, "mixed": mixed, "ratio": mixed / zero}
    conn.flushall()
    return table


def _seed(count: int) -> Iterator[list[Any]]:
    """Rows and pending entries of ``count`` jobs of priority 0, admitted a ms apart."""
    for i, job_id in enumerate(ids("behind", count)):
        at = SEED_AT + i
        yield ["HSET", f"{BASE}job:{job_id}", "p", PAYLOAD, "t", str(at)]
        yield ["ZADD", f"{BASE}pending", str(pending_score(0, at)), job_id]


def behind(conn: redis.Redis, port: int, count: int) -> list[dict[str, Any]]:
    """A job of priority 10 enqueued behind ``count`` of priority 0 (then claimed, on each
    wire): whether it is the next claim, and how long its enqueue and claim took."""
    conn.flushall()
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as workdir:
        mass_insert(port, _seed(count), workdir)
    rows = []
    for wire in (6, 5):
        queue = Queue(conn, "prio", wire=wire, check_policy=False)
        urgent = f"JOB:urgent-{wire}"
        waiting = int(conn.zcard(queue.key("pending")))
        started = time.perf_counter()
        queue.enqueue(urgent, PAYLOAD, priority=10)
        job = queue.claim()
        elapsed_ms = (time.perf_counter() - started) * 1000
        rows.append({"wire": wire, "behind": waiting,
                     "next_claim_is_it": job is not None and job.id == urgent,
                     "claimed": None if job is None else job.id,
                     "enqueue_and_claim_ms": elapsed_ms})
    conn.flushall()
    return rows


def _lanes_filled(conn: redis.Redis, groups: int, per_group: int, prioritised: bool) -> Queue:
    conn.flushall()
    queue = Queue(conn, "prio-lanes", wire=5, check_policy=False)
    jobs = ids(f"lanes{int(prioritised)}", groups * per_group)
    items = [(jobs[r * groups + g], PAYLOAD, f"g{g}", 5 if prioritised and r % 2 else 0)
             for r in range(per_group) for g in range(groups)]
    for start in range(0, len(items), 1000):
        queue.enqueue_many(items[start:start + 1000])
    queue.claim_lane(lease_ms=30_000)  # loads the script
    return queue


def lanes(conn: redis.Redis, groups: int, calls: int) -> dict[str, float]:
    """usec per lane claim with every lane job at 0, and with every other one at 5."""
    found: dict[str, float] = {}
    for prioritised in (False, True):
        queue = _lanes_filled(conn, groups, 2 * calls // groups + 2, prioritised)
        command = call(t.LANE_CLAIM, 5, t.keys_for(queue.base, t.LANE_CLAIM), (30_000, "*"))
        found["prioritised" if prioritised else "zero"] = statistics.median(
            usec_per_call(conn, [command] * (calls // REPS), "evalsha") for _ in range(REPS))
    found["ratio"] = found["prioritised"] / found["zero"]
    conn.flushall()
    return found


def run(conn: redis.Redis, port: int, calls: int, count: int, groups: int) -> dict[str, Any]:
    return {"calls": calls, "costs": costs(conn, calls), "behind": behind(conn, port, count),
            "lanes": lanes(conn, groups, calls), "groups": groups}


def targets(results: dict[str, Any]) -> list[list[str]]:
    """The targets rows of this phase: a mix of priorities within TARGET of all at 0, and the
    job of priority 10 the next claim behind the seeded ones."""
    data = results.get("priority")
    if not data:
        return []
    rows = []
    for name, row in data["costs"].items():
        verb, wire = name.split("/")
        rows.append([f"{'native' if wire == '6' else 'Lua'} {verb} with a mix of priorities "
                     f"≤ {TARGET} × all at 0 (usec_per_call)",
                     f"{row['mixed']:.2f} / {row['zero']:.2f} µs = {row['ratio']:.2f}×",
                     "**met**" if row["ratio"] <= TARGET else "**missed**"])
    for row in data["behind"]:
        rows.append([f"wire={row['wire']}: priority 10 behind {row['behind']:,} of priority "
                     "0 is the next claim",
                     f"{row['claimed']} in {row['enqueue_and_claim_ms']:.1f} ms",
                     "**met**" if row["next_claim_is_it"] else "**missed**"])
    return rows


def section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of this phase."""
    data = results["priority"]
    cost_rows = [f"| {name} | {row['zero']:.2f} | {row['mixed']:.2f} | {row['ratio']:.2f} |"
                 for name, row in data["costs"].items()]
    lane = data["lanes"]
    return "\n".join([
        "## Priority",
        "",
        f"usec_per_call of {data['calls']:,} enqueues and as many claims, every job at "
        f"priority 0 and with a mix ({', '.join(map(str, MIX))} in turn), median of {REPS} "
        "interleaved rounds.",
        "",
        "| call/wire | all at 0 µs | mixed µs | mixed / 0 |",
        "| --- | --- | --- | --- |",
        *cost_rows,
        "",
        *(f"- wire={row['wire']}: a job of priority 10 enqueued behind {row['behind']:,} "
          f"of priority 0 was claimed next: {row['next_claim_is_it']} ({row['claimed']}, "
          f"enqueue and claim {row['enqueue_and_claim_ms']:.1f} ms)." for row in data["behind"]),
        f"- Lane claim (scripts), {data['groups']:,} lanes: {lane['zero']:.2f} µs with every "
        f"job at 0, {lane['prioritised']:.2f} µs with every other at 5 ({lane['ratio']:.2f}×).",
    ])
