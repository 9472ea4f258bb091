"""Scaling: the cost of claim and enqueue as the flat queue grows (10^3 -> 10^6 pending, filled
with native enqueues through ``valkey-cli --pipe``), with memory per pending job at each size;
and the cost of a lane claim (scripts only) with few vs very many non-empty lanes."""

from __future__ import annotations

import statistics
import tempfile
from typing import Any

import redis
from tqdm import tqdm

from bench.common import (
    call,
    claim_cmd,
    commandstats,
    enqueue_cmd,
    ids,
    mass_insert,
    pipelined,
    reset,
    settle_memory,
    stat_name,
    usec_per_call,
)
from echomq import Queue
from echomq.engine import transitions as t

PAYLOAD = b"noop"
BASE = "emq:{scale}:"
REPS = 3


def flat(conn: redis.Redis, port: int, sizes: list[int], calls: int) -> list[dict[str, Any]]:
    conn.flushall()
    empty = settle_memory(conn)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as workdir:
        for size in tqdm(sizes, desc="scaling: flat queue", unit="size"):
            missing = size - conn.zcard(f"{BASE}pending")
            if missing > 0:
                fresh = ids(f"fill{size}", missing)
                mass_insert(port, (enqueue_cmd(BASE, 6, j, PAYLOAD) for j in fresh), workdir)
            pending = conn.zcard(f"{BASE}pending")
            held = pending + conn.zcard(f"{BASE}active")  # every row is in one of the two
            row: dict[str, Any] = {"pending": pending,
                                   "memory_per_job": (settle_memory(conn) - empty) / held}
            samples: dict[str, list[float]] = {}
            for rep in range(REPS):
                for wire in (6, 5):
                    # top up first, so the claims bring the queue back to its size, not below
                    top = ids(f"top{size}r{rep}w{wire}", calls)
                    mass_insert(port, (enqueue_cmd(BASE, 6, j, PAYLOAD) for j in top), workdir)
                    samples.setdefault(f"claim/{wire}", []).append(usec_per_call(
                        conn, [claim_cmd(BASE, wire) for _ in range(calls)],
                        stat_name(t.CLAIM, wire)))
                for wire in (6, 5):
                    extra = ids(f"more{size}r{rep}w{wire}", calls)
                    samples.setdefault(f"enqueue/{wire}", []).append(usec_per_call(
                        conn, [enqueue_cmd(BASE, wire, j, PAYLOAD) for j in extra],
                        stat_name(t.ENQUEUE, wire)))
                # the enqueues added 2 x calls: claim them away (not measured) to keep the size
                pipelined(conn, [claim_cmd(BASE, 6) for _ in range(2 * calls)])
            row.update({name: statistics.median(values) for name, values in samples.items()})
            rows.append(row)
    conn.flushall()
    return rows


def lanes(conn: redis.Redis, lane_counts: list[int], calls: int) -> list[dict[str, Any]]:
    rows = []
    for count in tqdm(lane_counts, desc="scaling: lanes", unit="size"):
        conn.flushall()
        queue = Queue(conn, "lanes", wire=5)
        per_lane = max(2, calls // count + 2)
        jobs = ids(f"lane{count}", count * per_lane)
        items = [(jobs[r * count + g], PAYLOAD, f"g{g}")
                 for r in range(per_lane) for g in range(count)]
        queue.claim_lane(lease_ms=30_000)  # loads the script; nothing to claim yet
        reset(conn)
        for start in range(0, len(items), 1000):
            queue.enqueue_many(items[start:start + 1000])
        enqueue_cost = commandstats(conn)["evalsha"]["usec_per_call"]
        ring = conn.llen(queue.key("ring"))
        command = call(t.LANE_CLAIM, 5, t.keys_for(queue.base, t.LANE_CLAIM), (30_000, "*"))
        claim_cost = statistics.median(
            usec_per_call(conn, [command] * (calls // REPS), "evalsha") for _ in range(REPS))
        rows.append({"lanes": ring, "jobs": len(items), "lane_claim/5": claim_cost,
                     "lane_enqueue/5": enqueue_cost,
                     "lanes_after": conn.llen(queue.key("ring"))})
    conn.flushall()
    return rows


def run(conn: redis.Redis, port: int, sizes: list[int], lane_counts: list[int],
        calls: int) -> dict[str, Any]:
    return {"calls": calls, "flat": flat(conn, port, sizes, calls),
            "lanes": lanes(conn, lane_counts, calls)}
