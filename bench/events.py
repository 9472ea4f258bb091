"""The cost of the events stream: ``INFO commandstats`` usec_per_call of enqueue, claim and settle
(one ack item and no claim) on both executors, with the events key declared (each call appends
one entry) and without, next to a bare ``XADD … MAXLEN ~ 10000 *`` of the same fields. The
target: events cost at most one XADD more per call. Each phase runs one kind of call K times,
pipelined from Python, after ``CONFIG RESETSTAT``."""

from __future__ import annotations

import statistics
from typing import Any

import redis
from tqdm import tqdm

from bench.common import call, commandstats, ids, pipelined, reset, stat_name
from echomq.engine import transitions as t
from echomq.engine.calls import Ack, Call, Job, QueueCalls
from echomq.engine.scripts import script_for

PAYLOAD = b'{"task":"noop","args":[]}'
NOW = 1_700_000_000_000
NAMES = ("enqueue", "claim", "settle")
FIELDS = ("kind", "claimed", "job", "JOB:bench-000000000", "attempt", "1", "at", str(NOW),
          "fence", "1")


def _raw(wire: int, made: Call) -> list[Any]:
    transition, keys, args = made
    return call(transition, wire, keys, args)


def _measured(conn: redis.Redis, wire: int, transition: t.Transition,
              commands: list[list[Any]]) -> tuple[float, list[Any]]:
    reset(conn)
    replies = pipelined(conn, commands)
    bad = [reply for reply in replies if isinstance(reply, Exception)]
    if bad:
        raise RuntimeError(f"events bench, wire={wire}: {bad[0]!r}")
    stats = commandstats(conn)[stat_name(transition, wire)]
    if int(stats["calls"]) != len(commands):
        raise RuntimeError(f"events bench: {stats['calls']} calls, expected {len(commands)}")
    return stats["usec_per_call"], replies


def life_cycle(conn: redis.Redis, wire: int, events: bool, count: int) -> dict[str, float]:
    """usec_per_call of ``count`` enqueues, then as many claims, then a settle acking each."""
    conn.flushall()
    for transition in (t.ENQUEUE, t.CLAIM, t.SETTLE):
        conn.script_load(script_for(transition).source)
    calls = QueueCalls(f"events{wire}{int(events)}", events=events)
    jobs = ids("ev", count)
    out = {}
    out["enqueue"], _ = _measured(conn, wire, t.ENQUEUE, [
        _raw(wire, calls.enqueue(job, PAYLOAD, None, NOW)) for job in jobs])
    out["claim"], leases = _measured(conn, wire, t.CLAIM, [
        _raw(wire, calls.claim(30_000, NOW)) for _ in jobs])
    settles = [_raw(wire, calls.settle([Ack(Job(r[0].decode(), b"", int(r[2]),
                                                fence=int(r[3])))], 0, 30_000, None, NOW))
               for r in leases]
    out["settle"], _ = _measured(conn, wire, t.SETTLE, settles)
    if events and int(conn.xlen(calls.key(t.EVENTS_ROLE))) == 0:
        raise RuntimeError("events bench: the evented calls appended nothing")
    return out


def bare_xadd(conn: redis.Redis, count: int) -> float:
    """usec_per_call of XADD MAXLEN ~ 10000 * with the fields of a claimed event."""
    conn.flushall()
    reset(conn)
    pipelined(conn, (("XADD", "bench:events", "MAXLEN", "~", str(t.EVENTS_MAXLEN), "*", *FIELDS)
                     for _ in range(count)))
    return commandstats(conn)["xadd"]["usec_per_call"]


def run(conn: redis.Redis, count: int, reps: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}
    steps = [(wire, events) for _ in range(reps) for wire in (6, 5) for events in (False, True)]
    for wire, events in tqdm(steps, desc="events on and off", unit="phase"):
        for name, value in life_cycle(conn, wire, events, count).items():
            samples.setdefault(f"{name}/{wire}/{'on' if events else 'off'}", []).append(value)
    xadd = statistics.median(bare_xadd(conn, count) for _ in range(reps))
    conn.flushall()
    table = {}
    for wire in (6, 5):
        for name in NAMES:
            off = statistics.median(samples[f"{name}/{wire}/off"])
            on = statistics.median(samples[f"{name}/{wire}/on"])
            table[f"{name}/{wire}"] = {"off": off, "on": on, "delta": on - off,
                                       "delta_over_xadd": (on - off) / xadd}
    return {"count": count, "reps": reps, "xadd": xadd, "table": table}


def targets(results: dict[str, Any]) -> list[list[str]]:
    """The targets rows: each evented call costs at most one bare XADD more."""
    data = results.get("events")
    if not data:
        return []
    rows = []
    for key, row in data["table"].items():
        name, wire = key.split("/")
        ok = row["delta"] <= data["xadd"]
        rows.append([f"events on: {name} (wire={wire}) costs ≤ one XADD more",
                     f"{row['off']:.2f} → {row['on']:.2f} µs, {row['delta']:+.2f} µs "
                     f"(XADD {data['xadd']:.2f} µs)", "**met**" if ok else "**missed**"])
    return rows


def section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of this phase."""
    data = results["events"]
    rows = [f"| {key.split('/')[0]} | {key.split('/')[1]} | {row['off']:.2f} | {row['on']:.2f} | "
            f"{row['delta']:+.2f} | {row['delta_over_xadd']:.2f} |"
            for key, row in data["table"].items()]
    return "\n".join([
        "## Events on and off",
        "",
        f"usec_per_call (median of {data['reps']} phases of {data['count']:,} calls) of each "
        "call without and with the events key declared (one stream entry appended per call), "
        f"and a bare `XADD … MAXLEN ~ {t.EVENTS_MAXLEN} *` of a claimed event's fields: "
        f"{data['xadd']:.2f} µs.",
        "",
        "| call | wire | off µs | on µs | Δ µs | Δ / XADD |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
    ])
