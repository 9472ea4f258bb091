"""The cost of the events stream: ``INFO commandstats`` usec_per_call of enqueue, claim and settle
(one ack item and no claim) on both executors, with the events key declared (each call appends
one entry) and without. The target: events cost at most one XADD more per call, an XADD as each
executor pays it. For the native commands (wire=6) that is a bare ``XADD … MAXLEN ~ 10000 *`` of
a claimed event's fields; for the scripts (wire=5), an XADD issued by a script: an EVALSHA of a
script that runs only that XADD (fields as ARGV) less an EVALSHA of one that does nothing with
the same arguments. Each phase runs one kind of call K times, pipelined from Python, after
``CONFIG RESETSTAT``."""

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


# The scripts of the scripts' baseline: one XADD of the fields given as ARGV, and the same call
# doing nothing; both reply nil, so only the XADD sets them apart.
SCRIPT_XADD = (f"redis.call('XADD', KEYS[1], 'MAXLEN', '~', '{t.EVENTS_MAXLEN}', '*', "
               "unpack(ARGV))")
SCRIPT_NOTHING = "local _ = KEYS[1]"


def evalsha(conn: redis.Redis, source: str, count: int) -> float:
    """usec_per_call of ``count`` EVALSHAs of ``source`` on one stream key, fields as ARGV."""
    conn.flushall()
    sha = conn.script_load(source)
    reset(conn)
    pipelined(conn, (("EVALSHA", sha, 1, "bench:events", *FIELDS) for _ in range(count)))
    return commandstats(conn)["evalsha"]["usec_per_call"]


def script_xadd(conn: redis.Redis, count: int) -> tuple[float, float]:
    """usec_per_call of an EVALSHA of SCRIPT_XADD and of SCRIPT_NOTHING."""
    return evalsha(conn, SCRIPT_XADD, count), evalsha(conn, SCRIPT_NOTHING, count)


def baseline(data: dict[str, Any], wire: str) -> tuple[str, float]:
    """The XADD a call of ``wire`` is held to: the scripts' own for wire=5 (the bare one for a
    run that did not measure it), the bare XADD for wire=6."""
    if wire == "5" and "script_xadd" in data:
        return "script XADD", data["script_xadd"]
    return "bare XADD", data["xadd"]


def run(conn: redis.Redis, count: int, reps: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {}
    steps = [(wire, events) for _ in range(reps) for wire in (6, 5) for events in (False, True)]
    for wire, events in tqdm(steps, desc="events on and off", unit="phase"):
        for name, value in life_cycle(conn, wire, events, count).items():
            samples.setdefault(f"{name}/{wire}/{'on' if events else 'off'}", []).append(value)
    xadd = statistics.median(bare_xadd(conn, count) for _ in range(reps))
    scripted = [script_xadd(conn, count) for _ in range(reps)]
    evalsha_xadd = statistics.median(pair[0] for pair in scripted)
    evalsha_nothing = statistics.median(pair[1] for pair in scripted)
    conn.flushall()
    data: dict[str, Any] = {"count": count, "reps": reps, "xadd": xadd,
                            "evalsha_xadd": evalsha_xadd, "evalsha_nothing": evalsha_nothing,
                            "script_xadd": evalsha_xadd - evalsha_nothing}
    table = {}
    for wire in (6, 5):
        _, against = baseline(data, str(wire))
        for name in NAMES:
            off = statistics.median(samples[f"{name}/{wire}/off"])
            on = statistics.median(samples[f"{name}/{wire}/on"])
            table[f"{name}/{wire}"] = {"off": off, "on": on, "delta": on - off,
                                       "delta_over_xadd": (on - off) / xadd,
                                       "delta_over_baseline": (on - off) / against}
    data["table"] = table
    return data


def targets(results: dict[str, Any]) -> list[list[str]]:
    """The targets rows: each evented call costs at most one XADD more, as its executor pays it
    (baseline)."""
    data = results.get("events")
    if not data:
        return []
    rows = []
    for key, row in data["table"].items():
        name, wire = key.split("/")
        label, against = baseline(data, wire)
        ok = row["delta"] <= against
        rows.append([f"events on: {name} (wire={wire}) costs ≤ one {label} more",
                     f"{row['off']:.2f} → {row['on']:.2f} µs, {row['delta']:+.2f} µs "
                     f"({label} {against:.2f} µs)", "**met**" if ok else "**missed**"])
    return rows


def section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of this phase."""
    data = results["events"]
    rows = []
    for key, row in data["table"].items():
        name, wire = key.split("/")
        label, against = baseline(data, wire)
        rows.append(f"| {name} | {wire} | {row['off']:.2f} | {row['on']:.2f} | "
                    f"{row['delta']:+.2f} | {row['delta_over_xadd']:.2f} | {label} | "
                    f"{row['delta'] / against:.2f} |")
    scripted = ("" if "script_xadd" not in data else
                f" An XADD issued by a script (the scripts' baseline): an EVALSHA of a script "
                f"running only that XADD, {data['evalsha_xadd']:.2f} µs, less an EVALSHA of one "
                f"doing nothing with the same arguments, {data['evalsha_nothing']:.2f} µs: "
                f"{data['script_xadd']:.2f} µs.")
    return "\n".join([
        "## Events on and off",
        "",
        f"usec_per_call (median of {data['reps']} phases of {data['count']:,} calls) of each "
        "call without and with the events key declared (one stream entry appended per call), "
        f"and a bare `XADD … MAXLEN ~ {t.EVENTS_MAXLEN} *` of a claimed event's fields "
        f"(the native commands' baseline): {data['xadd']:.2f} µs.{scripted} Each row is held "
        "to the baseline it names.",
        "",
        "| call | wire | off µs | on µs | Δ µs | Δ / bare XADD | baseline | Δ / baseline |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ])
