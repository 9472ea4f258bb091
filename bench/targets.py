# ruff: noqa: RUF001  (the report writes the multiplication sign on purpose)
"""The targets table of a run: each target the design sets, what the run measured and the
verdict, and the table formatting the report's sections share."""

from __future__ import annotations

import math
from typing import Any

from bench.admission import targets as admission_targets
from bench.cluster import targets as cluster_targets
from bench.events import targets as event_targets
from bench.findings import TARGETS
from bench.priority import targets as priority_targets
from bench.tasks import targets as task_targets
from bench.workflow_report import targets as workflow_targets

GUARANTEES = {
    "echomq wire=6": "idempotent enqueue by the caller's id (a tombstone keeps it a duplicate "
                     "24 h after ack); leases fenced by a per-queue counter, expired leases "
                     "recovered (dead at their last attempt); "
                     "fair lanes exist but only as scripts (not on wire=6)",
    "echomq wire=5": "as wire=6, plus fair lanes (claim_lane)",
    "echomq tasks wire=6": "as wire=6, through `@app.task` (the envelope names the task and "
                           "carries its arguments)",
    "rq (SimpleWorker)": "no idempotent enqueue (a reused job_id overwrites the job); no lease: "
                         "a dead worker's job goes to the failed registry, not back to the "
                         "queue; no fairness; SimpleWorker runs jobs in the worker process",
    "rq (Worker: fork per job)": "as above; the default `rq worker` forks a work horse per job",
    "arq": "idempotent enqueue only when the caller passes `_job_id`; a job whose worker died "
           "is re-run once its in-progress key expires (job timeout); no fairness; "
           "default max_jobs=10 concurrent",
    "celery": "no idempotent enqueue; default early ack (at most once; a crash loses the "
              "prefetched tasks) unless acks_late, then redelivery after the Redis "
              "visibility_timeout (1 h); no fairness; no result backend (its default)",
    "dramatiq": "no idempotent enqueue; acks after the run; a dead worker's messages are "
                "requeued after its heartbeat times out; no fairness; 8 worker threads",
    "bullmq (python)": "idempotent enqueue with a caller jobId; lock (lockDuration 30 s) and "
                       "stalled-job check re-run a dead worker's jobs; no group fairness "
                       "(groups are BullMQ Pro); removeOnComplete=True",
}


def fig(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def targets(results: dict[str, Any]) -> list[list[str]]:  # noqa: C901
    rows: list[list[str]] = []
    cost = results.get("cost", {}).get("table")
    if cost:
        for name in ("enqueue", "claim"):
            row = cost[name]
            rows.append([f"native {name} ≤ {TARGETS['native_over_lua']} × its Lua twin "
                         "(usec_per_call)",
                         f"{row['native']:.2f} / {row['lua']:.2f} µs = "
                         f"{row['native_over_lua']:.2f}×",
                         verdict(row["native_over_lua"] <= TARGETS["native_over_lua"])])
            rows.append([f"native {name} ≤ {TARGETS['native_over_bare']} × its bare commands "
                         f"({'+'.join(c.upper() for c in core_commands(name))})",
                         f"{row['native']:.2f} / {row['bare_core']:.2f} µs = "
                         f"{row['native_over_core']:.2f}× (with the reads: "
                         f"{row['native_over_all']:.2f}×)",
                         verdict(row["native_over_core"] <= TARGETS["native_over_bare"])])
    e2e = {k: v for k, v in results.get("e2e", {}).items() if "error" not in v}
    if "echomq wire=6" in e2e:
        ours = e2e["echomq wire=6"]["roundtrip"]
        rq = [v["roundtrip"] for k, v in e2e.items() if k.startswith("rq")]
        peers = {k: v for k, v in e2e.items() if not k.startswith("echomq")}
        if rq:
            rows.append(["wire=6 round trip ≥ 5 × RQ (its faster worker)",
                         f"{ours:,.0f} / {max(rq):,.0f} jobs/s = {ours / max(rq):.1f}×",
                         verdict(ours >= 5 * max(rq))])
        if peers:
            best = max(peers, key=lambda k: peers[k]["roundtrip"])
            ratio = ours / peers[best]["roundtrip"]
            rows.append([f"wire=6 round trip ≥ 1.5 × the fastest peer ({best})",
                         f"{ours:,.0f} / {peers[best]['roundtrip']:,.0f} jobs/s = {ratio:.2f}×",
                         verdict(ratio >= 1.5)])
    rows += worker_targets(results) + produce_targets(results) + memory_targets(results)
    rows += task_targets(results) + priority_targets(results) + event_targets(results)
    rows += workflow_targets(results) + admission_targets(results) + cluster_targets(results)
    flat = results.get("scaling", {}).get("flat")
    if flat and len(flat) > 1:
        lo, hi = flat[0], flat[-1]
        bound = math.log2(hi["pending"]) / math.log2(lo["pending"])
        for key, label in (("claim/6", "native claim"), ("enqueue/6", "native enqueue"),
                           ("claim/5", "Lua claim"), ("enqueue/5", "Lua enqueue")):
            ratio = hi[key] / lo[key]
            rows.append([f"{label} flat within O(log n), {lo['pending']:,} → "
                         f"{hi['pending']:,} pending (≤ {bound:.1f}×)",
                         f"{lo[key]:.2f} → {hi[key]:.2f} µs = {ratio:.2f}×",
                         verdict(ratio <= bound)])
    lanes = results.get("scaling", {}).get("lanes")
    if lanes and len(lanes) > 1:
        lo, hi = lanes[0], lanes[-1]
        bound = math.log2(hi["lanes"]) / math.log2(lo["lanes"])
        ratio = hi["lane_claim/5"] / lo["lane_claim/5"]
        rows.append([f"lane claim flat, {lo['lanes']:,} → {hi['lanes']:,} lanes "
                     f"(≤ {bound:.1f}×)",
                     f"{lo['lane_claim/5']:.2f} → {hi['lane_claim/5']:.2f} µs = {ratio:.2f}×",
                     verdict(ratio <= bound)])
    return rows


def ok_e2e(results: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in results.get("e2e", {}).items() if "error" not in v}


def _ratio_row(target: str, ours: float, theirs: float, bound: float, unit: str) -> list[str]:
    ratio = ours / theirs
    return [target, f"{ours:,.0f} / {theirs:,.0f} {unit} = {ratio:.2f}×",
            verdict(ratio >= bound)]


def worker_targets(results: dict[str, Any]) -> list[list[str]]:
    data = results.get("workers")
    if not data:
        return []
    six, five = data["single"]["6"], data["single"]["5"]
    rows = [
        [f"one consumer process (`Consumer` defaults, no-op, wire=6) ≥ "
         f"{TARGETS['consumer_rate']:,} jobs/s",
         f"{six['rate']:,.0f} jobs/s", verdict(six["rate"] >= TARGETS["consumer_rate"])],
        _ratio_row(f"… ≥ {TARGETS['over_get_loop']:.0f} × a redis-py GET loop (one round trip "
                   "each), same run", six["rate"], data["get_loop"], TARGETS["over_get_loop"],
                   "per s"),
    ]
    dramatiq = ok_e2e(results).get("dramatiq")
    if dramatiq:
        rows.append(_ratio_row(f"… ≥ {TARGETS['over_dramatiq']:.0f} × Dramatiq's single "
                               "process (its e2e consume)", six["rate"], dramatiq["consume"],
                               TARGETS["over_dramatiq"], "jobs/s"))
    rows.append(_ratio_row(f"one consumer: wire=6 ≥ {TARGETS['wire6_over_wire5']} × wire=5 "
                           "jobs/s", six["rate"], five["rate"], TARGETS["wire6_over_wire5"],
                           "jobs/s"))
    cpu = six["server_cpu_us_per_job"] / five["server_cpu_us_per_job"]
    rows.append(["valkey-server CPU per job (claim + ack by the consumer): wire=6 ≤ "
                 f"{TARGETS['server_cpu']} × wire=5", f"{six['server_cpu_us_per_job']:.1f} / "
                 f"{five['server_cpu_us_per_job']:.1f} µs = {cpu:.2f}×",
                 verdict(cpu <= TARGETS["server_cpu"])])
    for wire in ("6", "5"):
        lat = data["latency"][wire]
        rows.append([f"parked worker, enqueue → handler start p99 ≤ {TARGETS['p99_ms']:.0f} ms "
                     f"(wire={wire})", f"p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms",
                     verdict(lat["p99_ms"] <= TARGETS["p99_ms"])])
    return rows


def produce_targets(results: dict[str, Any]) -> list[list[str]]:
    e2e = ok_e2e(results)
    ours = (e2e.get("echomq wire=6") or {}).get("produce_batch")
    if not ours:
        return []
    from bench.e2e import BATCH
    rows = [[f"`enqueue_many` ({BATCH} a batch, wire=6) ≥ {TARGETS['produce_batch']:,} jobs/s",
             f"{ours:,.0f} jobs/s", verdict(ours >= TARGETS["produce_batch"])]]
    sets = (e2e.get("echomq wire=6") or {}).get("set_pipeline")
    if sets:
        rows.append(_ratio_row(f"… ≥ {TARGETS['over_set_pipeline']:.1f} × a redis-py pipeline "
                               f"of as many plain `SET`s ({BATCH} a pipeline, same phase)",
                               ours, sets, TARGETS["over_set_pipeline"], "jobs/s"))
    rq = (e2e.get("rq (SimpleWorker)") or {}).get("produce_batch")
    if rq:
        rows.append(_ratio_row(f"… ≥ {TARGETS['over_rq_batch']:.0f} × RQ's `enqueue_many` "
                               f"({BATCH} a pipeline)", ours, rq, TARGETS["over_rq_batch"],
                               "jobs/s"))
    return rows


def memory_targets(results: dict[str, Any]) -> list[list[str]]:
    e2e = ok_e2e(results)
    mine_rows = [v["memory_per_job"] for k, v in e2e.items() if k.startswith("echomq")]
    if mine_rows:
        mine = min(mine_rows)
    elif "memory" in results:
        mine = results["memory"]["breakdown"]["pending_job"]
    else:
        return []
    rows = [[f"memory per pending job ≤ {TARGETS['memory']} B (default ids, payload `noop`)",
             f"{mine:.0f} B", verdict(mine <= TARGETS["memory"])],
            [f"… stretch: ≤ {TARGETS['memory_stretch']} B", f"{mine:.0f} B",
             verdict(mine <= TARGETS["memory_stretch"])]]
    peers = {k: v for k, v in e2e.items() if not k.startswith("echomq")}
    if peers:
        lean = min(peers, key=lambda k: peers[k]["memory_per_job"])
        theirs = peers[lean]["memory_per_job"]
        rows.append([f"… ≤ the leanest peer's ({lean})",
                     f"{mine:.0f} / {theirs:.0f} B = {mine / theirs:.2f}×",
                     verdict(mine <= theirs)])
        task_job = (e2e.get("echomq tasks wire=6") or {}).get("memory_per_job") \
            or results.get("memory", {}).get("tasks", {}).get("task_job")
        if task_job is not None:
            rows.append([f"… a task job (`@app.task`) ≤ the leanest peer's ({lean})",
                         f"{task_job:.0f} / {theirs:.0f} B = {task_job / theirs:.2f}×",
                         verdict(task_job <= theirs)])
    return rows

def core_commands(name: str) -> tuple[str, ...]:
    from bench.cost import BARE
    return BARE[name]["core"]
