"""``python -m bench [--quick]``: start a private valkey-server with trafikey, run every phase,
print the tables and write docs/bench/RESULTS.md, results.json and the PNG plots."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from bench import (
    admission,
    cluster,
    cost,
    e2e,
    events,
    lanes,
    memory,
    parking,
    priority,
    report,
    scaling,
    startup,
    steps,
    tasks,
    throughput,
    workers,
    workflows,
)
from bench.common import load_scripts, missing_tools, running_server, server_version
from echomq.engine.native import module_path

FULL = {"cost_calls": 20_000, "cost_reps": 3, "bench_requests": 100_000, "bench_reps": 2,
        "e2e_jobs": 10_000, "sizes": [10**3, 10**4, 10**5, 10**6], "lanes": [10, 100_000],
        "scale_calls": 3_000, "worker_jobs": 50_000, "worker_reps": 5,
        "worker_counts": [1, 2, 4, 8], "latency_samples": 1_000, "memory_jobs": 20_000,
        "limit_lanes": [10, 100, 1_000, 10_000, 100_000], "limit_calls": 3_000,
        "control_lanes": [10, 1_000, 100_000], "control_runs": 5,
        "task_jobs": 20_000, "task_reps": 3, "parking_idle_s": 80.0,
        "parking_pending": 200_000, "parking_enqueues": 10,
        "priority_calls": 20_000, "priority_behind": 1_000_000, "priority_groups": 100,
        "events_calls": 20_000, "events_reps": 3,
        "flow_settles": 20_000, "flow_fan_in": 100, "flow_chord": 10_000, "flow_peer_chord": 1_000,
        "flow_reps": 3, "admission_children": 100_000, "admission_interval_ms": 5.0,
        "cluster_jobs": 50_000, "startup_reps": 5,
        "steps_calls": 5_000, "steps_reps": 5}
QUICK = {"cost_calls": 1_000, "cost_reps": 1, "bench_requests": 10_000, "bench_reps": 1,
         "e2e_jobs": 300, "sizes": [10**3, 10**4], "lanes": [10, 1_000], "scale_calls": 300,
         "worker_jobs": 2_000, "worker_reps": 1, "worker_counts": [1, 2], "latency_samples": 50,
         "memory_jobs": 2_000, "limit_lanes": [10, 1_000], "limit_calls": 300,
         "control_lanes": [10, 1_000], "control_runs": 5,
         "task_jobs": 1_000, "task_reps": 1, "parking_idle_s": 5.0,
         "parking_pending": 10_000, "parking_enqueues": 3,
         "priority_calls": 2_000, "priority_behind": 1_000_000, "priority_groups": 10,
         "events_calls": 1_000, "events_reps": 1,
         "flow_settles": 2_000, "flow_fan_in": 20, "flow_chord": 2_000, "flow_peer_chord": 200,
         "flow_reps": 3, "admission_children": 5_000, "admission_interval_ms": 5.0,
         "cluster_jobs": 1_000, "startup_reps": 1, "steps_calls": 500, "steps_reps": 5}
PHASES = ("cost", "throughput", "e2e", "workers", "startup", "memory", "scaling", "lanes",
          "tasks", "parking", "priority", "events", "workflows", "admission", "cluster", "steps")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke test")
    parser.add_argument("--only", choices=PHASES, action="append", help="run only these phases")
    parser.add_argument("--out", help="where RESULTS.md and the plots go (default docs/bench; "
                        "with --quick bench/.env/quick, so a smoke test never overwrites the "
                        "published results)")
    parser.add_argument("--render", action="store_true", help="measure nothing: write RESULTS.md "
                        "and the plots again from the results.json in --out (after an edit of "
                        "FINDINGS.md or of the report)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    config = QUICK if args.quick else FULL
    args.out = args.out or ("bench/.env/quick" if args.quick else "docs/bench")
    if args.render:
        with open(os.path.join(args.out, "results.json")) as source:
            print(report.write(json.load(source), args.out))
        return 0
    phases = [phase for phase in PHASES if phase in (args.only or PHASES)]
    missing = missing_tools(phases)
    if missing:
        print("\n".join(missing), file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "config": config}
    with running_server() as server:
        conn = server.client()
        load_scripts(conn)
        results["env"] = {
            "valkey": server_version(conn), "server": server.server, "module": module_path(),
            "python": sys.version.split()[0], "machine": f"{platform.machine()}, "
            f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": checkout_commit(),
        }
        for phase in phases:
            results[phase] = run_phase(phase, conn, server.port, config)
            if phase == "e2e":
                load_scripts(conn)  # the peers flush the server
        conn.close()
    results["elapsed_s"] = time.time() - started
    with open(os.path.join(args.out, "results.json"), "w") as out:
        json.dump(results, out, indent=1, default=str)
    print(report.write(results, args.out))
    return 0


def checkout_commit() -> str:
    """The commit the measured checkout is at (``+changes`` when its files differ from it)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.dirname(__file__))).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "unknown (not a git checkout)"
    return commit + (" +changes" if git("status", "--porcelain", "--untracked-files=no")
                     else "")


def run_phase(phase: str, conn: Any, port: int, config: dict[str, Any]) -> Any:
    """One phase's results, on the bench's server (``conn`` to it, ``port`` for new clients)."""
    runs: dict[str, Callable[[], Any]] = {
        "cost": lambda: cost.run(conn, config["cost_calls"], config["cost_reps"]),
        "throughput": lambda: throughput.run(conn, port, config["bench_requests"],
                                             config["bench_reps"]),
        "e2e": lambda: run_e2e(port, config["e2e_jobs"]),
        "workers": lambda: workers.run(port, config["worker_jobs"], config["worker_reps"],
                                       config["worker_counts"], config["latency_samples"]),
        "startup": lambda: startup.run(port, config["startup_reps"]),
        "memory": lambda: memory.run(port, config["memory_jobs"]),
        "scaling": lambda: scaling.run(conn, port, config["sizes"], config["lanes"],
                                       config["scale_calls"]),
        "lanes": lambda: lanes.run(conn, config["limit_lanes"], config["limit_calls"],
                                   config["control_lanes"], config["control_runs"]),
        "tasks": lambda: tasks.run(conn, config["task_jobs"], config["task_reps"]),
        "parking": lambda: parking.phase(conn, config),
        "priority": lambda: priority.run(conn, port, config["priority_calls"],
                                         config["priority_behind"], config["priority_groups"]),
        "events": lambda: events.run(conn, config["events_calls"], config["events_reps"]),
        "workflows": lambda: workflows.run(conn, port, config),
        "admission": lambda: admission.run(conn, port, config["admission_children"],
                                           config["admission_interval_ms"] / 1000),
        "cluster": lambda: cluster.run(config["cluster_jobs"]),  # a cluster of its own
        "steps": lambda: steps.run(conn, config["steps_calls"], config["steps_reps"]),
    }
    return runs[phase]()


def run_e2e(port: int, jobs: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, system in tqdm(e2e.SYSTEMS.items(), desc="end to end", unit="system"):
        try:
            rows[name] = system(port, jobs).rates()
        except Exception as exc:  # a peer that cannot run here is reported, not faked
            rows[name] = {"system": name, "error": f"{type(exc).__name__}: {exc}",
                          "trace": traceback.format_exc(limit=3)}
    return rows


if __name__ == "__main__":
    sys.exit(main())
