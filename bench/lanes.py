"""Lanes with limits on: the cost of a lane claim from 10 to 100,000 non-empty lanes, beside
today's lane claim with no knobs, with every knob set (a concurrency limit and a rate that never
bind, weight 2: the checks alone), and with a concurrency limit of 1 (each claim parks its lane
out of the ring and each ack brings it back). Scripts only, as lanes are.

The lane controls' growth: a lane's pause, its resume and the cancel that empties it (on both
wires: cancel has a native twin) at 10, 1,000 and 100,000 lanes, the sizes interleaved in each of
``runs`` runs; a median and the spread (lowest to highest) of the runs' usec_per_call each."""

from __future__ import annotations

import statistics
from typing import Any

import redis
from tqdm import tqdm

from bench.common import call, commandstats, ids, pipelined, reset, stat_name
from echomq import Queue
from echomq.engine import transitions as t
from echomq.engine.scripts import script_for

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


# The groups a size's controls are measured on, spread evenly over the ring: as many at every
# size, so that the hashes the controls write (parked, ringleft) hold as many fields at each; and
# the rounds over them in a run (the calls of one control in a run: their product).
CONTROL_GROUPS = 10
CONTROL_ROUNDS = 10
CONTROLS = ("pause/5", "resume/5", "cancel/5", "cancel/6")


def _control_queue(conn: redis.Redis, count: int) -> Queue:
    """A queue of ``count`` lanes, ``g<i>`` holding the one job ``JOB:c<count>-g<i>``."""
    queue = Queue(conn, f"controls{count}", wire=5, check_policy=False)
    items = [(_control_job(count, f"g{g}"), PAYLOAD, f"g{g}") for g in range(count)]
    for start in range(0, count, 1000):
        queue.enqueue_many(items[start:start + 1000])
    return queue


def _control_job(count: int, group: str) -> str:
    return f"JOB:c{count}-{group}"


def _spent(conn: redis.Redis, commands: list[list[Any]], name: str) -> tuple[float, float]:
    """(usec, calls) of ``name`` over ``commands``, pipelined after a reset."""
    reset(conn)
    errors = [r for r in pipelined(conn, commands) if isinstance(r, Exception)]
    if errors:
        raise RuntimeError(f"lanes bench: {errors[0]!r}")
    stats = commandstats(conn)[name]
    return stats["usec"], stats["calls"]


def _refill(conn: redis.Redis, queue: Queue, count: int, groups: list[str]) -> None:
    """Each cancelled lane's job back (its group joins the ring's tail); the entry its group left
    behind taken out (the bench's own LREM, not measured), so the ring holds ``count`` entries
    again."""
    left = queue.key("ringleft")
    for group in groups:
        queue.enqueue(_control_job(count, group), PAYLOAD, lane=group)
        if conn.hget(left, group) is not None:
            conn.lrem(queue.key("ring"), 1, group)  # a group's left entries stand first
            conn.hdel(left, group)


def _control_run(conn: redis.Redis, queue: Queue, count: int) -> dict[str, float]:
    """One run of the controls on ``queue``: usec_per_call of each, over its rounds."""
    groups = [f"g{i * count // CONTROL_GROUPS}" for i in range(CONTROL_GROUPS)]
    keys = t.keys_for(queue.base, t.LANE_PAUSE)
    jobs = [_control_job(count, g) for g in groups]
    spent = {name: [0.0, 0.0] for name in CONTROLS}
    for _ in range(CONTROL_ROUNDS):
        for verb, flag in (("pause", "1"), ("resume", "0")):
            _add(spent[f"{verb}/5"], _spent(
                conn, [call(t.LANE_PAUSE, 5, keys, (g, flag)) for g in groups], "evalsha"))
        for wire in (5, 6):
            cancels = [call(t.CANCEL, wire, t.keys_for(queue.base, t.CANCEL, job), (job, "*", 0))
                       for job in jobs]
            _add(spent[f"cancel/{wire}"], _spent(conn, cancels, stat_name(t.CANCEL, wire)))
            _refill(conn, queue, count, groups)
    return {name: usec / calls for name, (usec, calls) in spent.items()}


def _add(total: list[float], spent: tuple[float, float]) -> None:
    total[0] += spent[0]
    total[1] += spent[1]


def controls(conn: redis.Redis, lane_counts: list[int], runs: int) -> list[dict[str, Any]]:
    """The controls' growth: for each size, each control's median usec_per_call over ``runs``
    runs (the sizes interleaved in each run) and its spread."""
    conn.flushall()
    for transition in (t.LANE_PAUSE, t.CANCEL, t.LANE_ENQUEUE):
        conn.script_load(script_for(transition).source)
    queues = {count: _control_queue(conn, count) for count in lane_counts}
    samples: dict[int, list[dict[str, float]]] = {count: [] for count in lane_counts}
    for _ in tqdm(range(runs), desc="lanes: controls", unit="run"):
        for count in lane_counts:
            samples[count].append(_control_run(conn, queues[count], count))
    conn.flushall()
    return [{"lanes": count, "runs": runs,
             **{name: _spread([run[name] for run in samples[count]]) for name in CONTROLS}}
            for count in lane_counts]


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def run(conn: redis.Redis, lane_counts: list[int], calls: int, control_lanes: list[int],
        control_runs: int) -> dict[str, Any]:
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
    return {"calls": calls, "rows": rows,
            "controls": controls(conn, control_lanes, control_runs)}


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
        *controls_section(data.get("controls", [])),
    ])


def controls_section(rows: list[dict[str, Any]]) -> list[str]:
    """The controls' growth table (none before they were measured)."""
    if not rows:
        return []

    def cell(figure: dict[str, float]) -> str:
        return f"{figure['median']:.2f} ({figure['low']:.2f}-{figure['high']:.2f})"

    first = rows[0]
    lines = [f"| {r['lanes']:,} | " + " | ".join(cell(r[name]) for name in CONTROLS) + " |"
             for r in rows]
    growth = [f"{name} x{r[name]['median'] / first[name]['median']:.2f}"
              for r in rows[-1:] for name in CONTROLS]
    return [
        "",
        "### Lane controls: growth with the number of lanes",
        "",
        f"usec_per_call of a lane's pause, its resume, and the cancel of its only job (which "
        f"empties it; wire 5 and wire 6), on {CONTROL_GROUPS} lanes spread over the ring at "
        f"every size, {CONTROL_ROUNDS} rounds a run; median of {first['runs']} runs with the "
        "sizes interleaved in each, and the spread (lowest-highest run). None walks the ring: "
        "a group leaves it by counting its entry in `ringleft` (docs/PROTOCOL.md, \"The ring's "
        "left entries\").",
        "",
        "| lanes | pause µs | resume µs | cancel µs (wire 5) | cancel µs (wire 6) |",
        "| --- | --- | --- | --- | --- |",
        *lines,
        "",
        f"At {rows[-1]['lanes']:,} lanes against {first['lanes']:,}: " + ", ".join(growth) + ".",
    ]
