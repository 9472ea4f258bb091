"""Lanes with limits on: the cost of a lane claim from 10 to 100,000 non-empty lanes, beside
today's lane claim with no knobs, with every knob set (a concurrency limit and a rate that never
bind, weight 2: the checks alone), and with a concurrency limit of 1 (each claim parks its lane
out of the ring and each ack brings it back). Scripts only, as lanes are."""

from __future__ import annotations

import statistics
from typing import Any

import redis
from tqdm import tqdm

from bench.common import call, commandstats, ids, pipelined, reset
from echomq import Queue
from echomq.engine import transitions as t

PAYLOAD = b"noop"
REPS = 3
NEVER_BINDS = 10**9


def _filled(conn: redis.Redis, count: int, per_lane: int) -> Queue:
    conn.flushall()
    queue = Queue(conn, "lanes", wire=5, check_policy=False)
    jobs = ids(f"lane{count}", count * per_lane)
    items = [(jobs[r * count + g], PAYLOAD, f"g{g}") for r in range(per_lane) for g in range(count)]
    for start in range(0, len(items), 1000):
        queue.enqueue_many(items[start:start + 1000])
    queue.claim_lane(lease_ms=30_000)  # loads the script
    return queue


def _cost(conn: redis.Redis, commands: list[list[Any]]) -> tuple[float, float, list[Any]]:
    """(usec, calls) of EVALSHA over ``commands``, and their replies."""
    reset(conn)
    replies = pipelined(conn, commands)
    errors = [r for r in replies if isinstance(r, Exception)]
    if errors:
        raise RuntimeError(f"lanes bench: {errors[0]!r}")
    stats = commandstats(conn)["evalsha"]
    return stats["usec"], stats["calls"], replies


def _claim(queue: Queue) -> list[Any]:
    return call(t.LANE_CLAIM, 5, t.keys_for(queue.base, t.LANE_CLAIM), (30_000, "*"))


def _claims_per_call(conn: redis.Redis, queue: Queue, calls: int) -> float:
    return statistics.median(
        usec / n for usec, n, _ in (_cost(conn, [_claim(queue)] * (calls // REPS))
                                    for _ in range(REPS)))


def _parking(conn: redis.Redis, queue: Queue, count: int, calls: int) -> tuple[float, float]:
    """Concurrency 1: rounds of one claim per lane (each parks its lane), then their acks (each
    brings its lane back). usec per lane claim and per ack."""
    queue.set_lane_defaults(concurrency=1)
    claimed, acked = [0.0, 0.0], [0.0, 0.0]
    while claimed[1] < calls:
        usec, n, replies = _cost(conn, [_claim(queue)] * min(count, calls))
        claimed = [claimed[0] + usec, claimed[1] + n]
        acks = [call(t.ACK, 5, t.keys_for(queue.base, t.ACK, r[0].decode()), (r[0], r[3], 0))
                for r in replies if r is not None]
        usec, n, _ = _cost(conn, acks)
        acked = [acked[0] + usec, acked[1] + n]
    return claimed[0] / claimed[1], acked[0] / acked[1]


def run(conn: redis.Redis, lane_counts: list[int], calls: int) -> dict[str, Any]:
    rows = []
    for count in tqdm(lane_counts, desc="lanes: limits on", unit="size"):
        per_lane = max(2, (2 * calls) // count + 2)
        queue = _filled(conn, count, per_lane)
        plain = _claims_per_call(conn, queue, calls)
        queue = _filled(conn, count, per_lane)
        queue.set_lane_defaults(concurrency=NEVER_BINDS, rate=NEVER_BINDS, window_ms=60_000,
                                weight=2)
        limits = _claims_per_call(conn, queue, calls)
        queue = _filled(conn, count, per_lane)
        parking, ack = _parking(conn, queue, count, calls)
        rows.append({"lanes": count, "jobs": count * per_lane, "lane_claim/5": plain,
                     "lane_claim_limits/5": limits, "lane_claim_parking/5": parking,
                     "ack_unparking/5": ack})
    conn.flushall()
    return {"calls": calls, "rows": rows}


def section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of this phase."""
    data = results["lanes"]
    rows = [f"| {r['lanes']:,} | {r['jobs']:,} | {r['lane_claim/5']:.2f} | "
            f"{r['lane_claim_limits/5']:.2f} | {r['lane_claim_parking/5']:.2f} | "
            f"{r['ack_unparking/5']:.2f} |" for r in data["rows"]]
    return "\n".join([
        "## Lanes with limits on",
        "",
        f"usec_per_call of lane claims (median of three phases of {data['calls'] // REPS:,}) "
        "and acks, at each number of non-empty lanes: no knobs (today's); every knob set but "
        "never binding (concurrency and rate 10^9, weight 2: the checks alone); concurrency 1, "
        "rounds of one claim per lane (each parks its lane) then their acks (each brings it "
        "back to the ring).",
        "",
        "| non-empty lanes | jobs | lane claim µs | with knobs µs | parking claim µs | "
        "unparking ack µs |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
    ])
