"""The rows the ``workflows`` phase (``bench.workflows``) adds to docs/bench/RESULTS.md: its
targets and its section, written from the run's results."""

from __future__ import annotations

from typing import Any

from bench.workflows import TARGET_WRITES, TIMES, WIRES, baseline


def targets(results: dict[str, Any]) -> list[list[str]]:
    """The targets rows: a chord child's settle costs at most one key write more than a plain
    job's (the children before the last; the last also releases its body, shown beside)."""
    data = results.get("workflows")
    if not data:
        return []
    rows = []
    table = data["join"]["table"]
    for wire in (str(w) for w in WIRES):
        child, last, whole = table[f"child/{wire}"], table[f"last/{wire}"], table[f"chord/{wire}"]
        label, _ = baseline(data["join"], wire)
        ok = child["extra_writes"] <= TARGET_WRITES
        rows.append([f"chord child's settle ≤ {TARGET_WRITES:.0f} extra key write per child "
                     f"(wire={wire})",
                     f"{child['extra_writes']:+.2f} writes, {child['extra_us']:+.2f} µs "
                     f"({child['extra_over_baseline']:.2f} {label}); the last child, releasing "
                     f"the body: {last['extra_writes']:+.2f} writes; over the whole chord of "
                     f"{data['join']['fan_in']}: {whole['extra_writes']:+.2f} writes per child",
                     "**met**" if ok else "**missed**"])
    return rows


def _fig(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"


def section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of this phase."""
    data = results["workflows"]
    join = data["join"]
    rows = []
    for key, row in join["table"].items():
        what, wire = key.split("/")
        label, _ = baseline(join, wire)
        name = {"child": "child (not the last)", "last": "last child (releases the body)",
                "chord": f"per child over a chord of {join['fan_in']}"}[what]
        rows.append(f"| {name} | {wire} | {row['plain_us']:.2f} | {row['us']:.2f} | "
                    f"{row['extra_us']:+.2f} | {row['extra_over_baseline']:.2f} {label} | "
                    f"{row['plain_writes']:.2f} | {row['writes']:.2f} | "
                    f"{row['extra_writes']:+.2f} |")
    drains = data["throughput"]
    drain_rows = [f"| {wire} | {_fig(row['chord'])} | {_fig(row['flat'])} | "
                  f"{row['ratio']:.2f}{TIMES} |" for wire, row in drains["table"].items()]
    peer_rows = []
    for name, row in data["peers"].items():
        if "error" in row:
            peer_rows.append(f"| {name} | {row['children']:,} | — | — | could not run here: "
                             f"{row['error']} |")
            continue
        peer_rows.append(f"| {name} {row['version']} | {row['children']:,} | "
                         f"{row['seconds']:.3f} | {_fig(row['jobs_per_s'])} | {row['worker']} |")
    return "\n".join([
        "## Workflows: the join",
        "",
        f"A settle of one `ack` item and no claim (events off), {join['count']:,} plain jobs "
        f"against {join['count']:,} chord children ({join['fan_in']} a chord: each child's row "
        "names its body in `next`, the body waiting on all of them), pipelined after "
        f"`CONFIG RESETSTAT`; median of {join['reps']} rounds. µs = `INFO commandstats` "
        "usec_per_call; writes = the server's dirty counter (`rdb_changes_since_last_save`, "
        "`CONFIG SET save \"\"` for the phase) per call. The children before the last of each "
        "chord and the last ones are separate pipelines. One key write as each executor pays "
        f"it: a bare `HINCRBY`, {join['hincrby']['usec']:.2f} µs "
        f"({join['hincrby']['writes']:.2f} writes a call; the native commands' baseline); an "
        f"EVALSHA of a script doing one HINCRBY, {join['evalsha_hincrby']['usec']:.2f} µs, less "
        f"one doing nothing, {join['evalsha_nothing']['usec']:.2f} µs: "
        f"{join['script_hincrby']:.2f} µs (the scripts' baseline).",
        "",
        "| settle of | wire | plain µs | chord µs | Δ µs | Δ / baseline | plain writes | "
        "chord writes | Δ writes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"Chord throughput: one in-process `Consumer(app.queue, app.handler)` drains a chord of "
        f"{drains['children']:,} no-op children and its body (given the {drains['children']:,} "
        f"results) against {drains['children'] + 1:,} plain no-op task jobs, each on a flushed "
        "server; jobs/s of the drain (`drain()` called until a call runs nothing: the body "
        "released by the last child's settle is claimed by the next call), best of "
        f"{drains['reps']} (the chord drained first in every other run).",
        "",
        "| wire | chord jobs/s | flat jobs/s | chord / flat |",
        "| --- | --- | --- | --- |",
        *drain_rows,
        "",
        "Against Celery's chord: one worker process started and warmed up (one task run) "
        "beforehand; wall time from the call sending the chord of N no-op children and a "
        "callback to the callback's result, on the same server. Celery's redis backend joins "
        "the chord natively (no `chord_unlock` polling): each child's return sends one pipeline "
        "that adds its result to the group's key, reads the count and refreshes the keys' "
        "expiry, and the worker that reads the count at N sends the callback.",
        "",
        "| system | N | seconds | jobs/s (N + 1) | worker |",
        "| --- | --- | --- | --- | --- |",
        *peer_rows,
    ])
