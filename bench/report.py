# ruff: noqa: RUF001  (the report writes the multiplication sign on purpose)
"""RESULTS.md, the console table and the plots, from the results of one run."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker

from bench import findings
from bench.admission import section as admission_table
from bench.cluster import section as cluster_section
from bench.events import section as events_section
from bench.lanes import section as lanes_section
from bench.parking import report_section as parking_section
from bench.priority import section as priority_section
from bench.startup import report_section as startup_section
from bench.steps import section as steps_section
from bench.targets import GUARANTEES, fig, md_table, ok_e2e, targets
from bench.tasks import section as tasks_section
from bench.workflow_report import section as workflows_section


def cost_section(results: dict[str, Any], out: str) -> str:
    from bench.cost import BARE
    data = results["cost"]
    rows = []
    for name, row in data["table"].items():
        bare = ", ".join(f"{c.upper()} {row['bare_commands'].get(c, 0):.2f}"
                         for c in (*BARE[name]["core"], *BARE[name]["reads"]))
        rows.append([name, fig(row["lua"]), fig(row["native"]), f"{row['native_over_lua']:.2f}",
                     fig(row["bare_core"]), fig(row["bare_all"]),
                     f"{row['native_over_core']:.2f}", f"{row['native_over_all']:.2f}", bare])
    _plot_cost(data["table"], os.path.join(out, "cost.png"))
    return "\n".join([
        "## Server-side cost per transition",
        "",
        f"`INFO commandstats` usec_per_call, {data['count']:,} calls a phase, median of "
        f"{data['reps']} rounds (native, Lua and bare phases interleaved; `CONFIG RESETSTAT` "
        "before each). Lua = `cmdstat_evalsha` (which includes the script's inner commands); "
        "native = `cmdstat_emq.<verb>`. *Bare* = the plain commands the transition performs, "
        "run as their own phase on the same data shapes: **core** are its writes (for enqueue "
        "and claim exactly the issue's HSET+ZADD+RPUSH and ZRANGE+ZREM+HSET+ZADD), **all** adds "
        "the reads that check state (EXISTS, HGET, ZSCORE, …). promote and recover run with "
        "limit=1, so one call moves one job.",
        "",
        md_table(["transition", "Lua µs", "native µs", "native/Lua", "bare core µs",
                "bare all µs", "native/core", "native/all", "bare commands, µs per job"], rows),
        "",
        "![cost per transition](cost.png)",
    ])


def _plot_cost(table: dict[str, Any], path: str) -> None:
    names = list(table)
    series = [("Lua (EVALSHA)", "lua"), ("native (EMQ.*)", "native"),
              ("bare writes", "bare_core"), ("bare writes + reads", "bare_all")]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.2
    for i, (label, key) in enumerate(series):
        ax.bar([x + i * width for x in range(len(names))], [table[n][key] for n in names],
               width, label=label)
    ax.set_xticks([x + 1.5 * width for x in range(len(names))], names)
    ax.set_ylabel("usec_per_call (server side)")
    ax.set_title("Server-side cost per transition (INFO commandstats)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput_section(results: dict[str, Any]) -> str:
    data = results["throughput"]
    best = data["best"]
    rows = []
    for label, native, lua in (
            ("claim, valkey-benchmark -c 50, no pipeline", "claim/6/P1", "claim/5/P1"),
            ("claim, valkey-benchmark -c 50 -P 16", "claim/6/P16", "claim/5/P16"),
            ("enqueue, valkey-cli --pipe (one connection, deep pipeline)", "enqueue/6/pipe",
             "enqueue/5/pipe")):
        rows.append([label, fig(best[native]), fig(best[lua]), f"{best[native] / best[lua]:.2f}×"])
    return "\n".join([
        "## Throughput from C clients",
        "",
        f"{data['requests']:,} requests a run, best of {data['reps']} (runs of both executors "
        "alternate). The queue is pre-filled so every claim gets a job.",
        "",
        md_table(["workload", "EMQ.* ops/s", "EVALSHA ops/s", "native / Lua"], rows),
        "",
        "Enqueue is not driven by valkey-benchmark: it draws a fresh `__rand_int__` for *every* "
        "occurrence in a command line (checked: `HSET h __rand_int__ __rand_int__` writes "
        "different field and value), and an enqueue names its id twice — in the row key "
        "`emq:{q}:job:<id>` and as the id argument — which the protocol requires to match "
        "(`EMQKEYS`). So distinct enqueues cannot be one valkey-benchmark command line; "
        "`valkey-cli --pipe` sends N distinct ones instead.",
        "",
        f"Commands: `{data['claim_command']['6']}` and `{data['claim_command']['5']}`.",
    ])


def e2e_section(results: dict[str, Any], out: str) -> str:
    data = results["e2e"]
    rows, notes = [], []
    for name, row in data.items():
        if "error" in row:
            rows.append([name, "—", "—", "—", "—", "—", "—", f"could not run: {row['error']}"])
            continue
        rows.append([f"{name} {row['version']}", fig(row["produce"]), fig(row["produce_batch"]),
                     fig(row["consume"]), fig(row["roundtrip"]), fig(row["memory_per_job"], 0),
                     row["batch_how"], GUARANTEES.get(name, "")])
        notes += [f"- {name}: {n}" for n in row.get("notes", [])]
        if row["consume_jobs"] != row["jobs"]:
            notes.append(f"- {name}: consume drained {row['consume_jobs']} jobs")
    _plot_e2e(data, os.path.join(out, "e2e.png"))
    _plot_memory(data, results.get("scaling"), os.path.join(out, "memory.png"))
    jobs = next((r["jobs"] for r in data.values() if "jobs" in r), 0)
    return "\n".join([
        "## End to end, from Python",
        "",
        f"Jobs per second with a no-op job, N = {jobs:,} (RQ's forking worker: N/10, at least "
        "200). **produce**: one call per job (echomq: `enqueue(new_job_id(), b\"noop\")`); "
        "**batched**: the peer's bulk API where it has one; **consume**: one worker drains the "
        "N queued jobs (echomq: `claim` + `ack` in a loop; the peers: their own worker, "
        "in-process where the library offers it, Celery as its `celery worker --pool=solo` "
        "subprocess, timed from `add_consumer` so its start-up is excluded); **round trip** = "
        "N / (produce one by one + drain). **B/job** = used_memory growth / N after the "
        "one-by-one produce (everything the system keeps for a pending job: rows, indexes, "
        "events). Same valkey-server, same connection settings, one run.",
        "",
        md_table(["system", "produce /s", "batched /s", "consume /s", "round trip /s", "B/job",
                "batched how", "guarantees (from its docs)"], rows),
        "",
        *notes,
        "",
        "![end to end](e2e.png)",
        "",
        "![memory per pending job](memory.png)",
    ])


def _plot_e2e(data: dict[str, Any], path: str) -> None:
    names = [n for n, r in data.items() if "error" not in r]
    series = [("produce", "produce"), ("batched", "produce_batch"), ("consume", "consume"),
              ("round trip", "roundtrip")]
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.2
    for i, (label, key) in enumerate(series):
        ax.bar([x + i * width for x in range(len(names))],
               [data[n][key] or 0 for n in names], width, label=label)
    ax.set_xticks([x + 1.5 * width for x in range(len(names))], names, rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("jobs per second (log)")
    ax.set_title("End to end from Python, no-op job, one worker")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_memory(data: dict[str, Any], scaling: dict[str, Any] | None, path: str) -> None:
    names = [n for n, r in data.items() if "error" not in r and "fork" not in n]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.bar(names, [data[n]["memory_per_job"] for n in names], color="tab:purple")
    ax.set_ylabel("bytes per pending job (used_memory delta / N)")
    ax.set_title("Memory per pending job")
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def workers_section(results: dict[str, Any], out: str) -> str:
    data = results["workers"]
    single = [[f"wire={w}", fig(data["single"][w]["rate"]),
               fig(data["single"][w]["server_cpu_us_per_job"], 1),
               ", ".join(fig(r["rate"]) for r in data["single_runs"][w])] for w in ("6", "5")]
    scaling = [[f"wire={r['wire']}", str(r["consumers"]), fig(r["rate"]),
                fig(r["server_cpu_us_per_job"], 1),
                f"{r['rate'] * r['server_cpu_us_per_job'] / 1e4:.0f} %"] for r in data["scaling"]]
    latency = [[f"wire={w}", *(fig(r[k]) for k in ("p50_ms", "p99_ms", "max_ms", "mean_ms"))]
               for w, r in data["latency"].items()]
    dramatiq = ok_e2e(results).get("dramatiq")
    _plot_workers(data, os.path.join(out, "workers.png"))
    return "\n".join([
        "## Consumers",
        "",
        f"`Consumer(queue, handler)` with every default and a no-op handler, each in its own "
        f"process (started, connected and waiting before the clock starts), drains "
        f"{data['jobs']:,} jobs queued beforehand with `enqueue_many` (payload `noop`); timed "
        "from the start signal until `pending` and `active` are both empty (polled every 2 ms). "
        "**server CPU** = valkey-server's `used_cpu_sys + used_cpu_user` growth over the drain / "
        "jobs: everything the server did for the consumers (claim, ack, housekeeping, parking, "
        "the reading and writing of every round trip), not only the commands' own time. One "
        f"consumer ran {data['reps']} time{'s' if data['reps'] > 1 else ''} per wire, "
        "interleaved with a redis-py GET loop of the same count on one connection (best run "
        "shown — on a shared machine noise only slows a run down; GET loop "
        f"{fig(data['get_loop'])} calls/s, runs "
        + ", ".join(fig(r) for r in data["get_loops"]) + ")"
        + (f"; Dramatiq's single process (8 threads) drained {fig(dramatiq['consume'])} jobs/s "
           "in the end-to-end phase" if dramatiq else "") + ".",
        "",
        md_table(["one consumer", "jobs/s (best)", "server CPU µs/job (least)", "runs, jobs/s"],
               single),
        "",
        f"K consumer processes on one queue (best of {data.get('scaling_reps', 1)} runs each; "
        "the machine has "
        f"{results['env']['machine'].split(', ')[-1]} shared by the server, the consumers and "
        "the bench itself, so K beyond that measures contention, not the server's ceiling):",
        "",
        md_table(["wire", "K", "jobs/s", "server CPU µs/job", "server core busy"], scaling),
        "",
        "![consumers](workers.png)",
        "",
        f"Latency a user feels: one consumer parked on the wake key (`INFO clients` shows it "
        "blocked before each job), one job enqueued at a time, "
        f"{data['latency']['6']['samples']:,} jobs per wire. The producer reads "
        "`time.perf_counter()` just before `enqueue`, the "
        "handler as it starts, in another process: the same clock "
        f"(`{data['clock']}`, shared by every process on Linux).",
        "",
        md_table(["wire", "p50 ms", "p99 ms", "max ms", "mean ms"], latency),
    ])


def _plot_workers(data: dict[str, Any], path: str) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for wire, colour in (("6", "tab:blue"), ("5", "tab:orange")):
        runs = [r for r in data["scaling"] if str(r["wire"]) == wire]
        counts = [r["consumers"] for r in runs]
        left.plot(counts, [r["rate"] for r in runs], marker="o", color=colour,
                  label=f"wire={wire}")
        right.plot(counts, [r["server_cpu_us_per_job"] for r in runs], marker="o",
                   color=colour, label=f"wire={wire}")
    left.axhline(data["get_loop"], color="grey", linestyle=":", label="redis-py GET loop")
    for ax, label in ((left, "jobs per second (all consumers)"),
                      (right, "valkey-server CPU µs per job")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["consumers"] for r in data["scaling"]}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("consumer processes (K)")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.legend()
    left.set_title("Consumers draining a queue")
    right.set_title("Server CPU per job")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _row_rows(parts: dict[str, Any]) -> list[list[str]]:
    """The row's line: its fields as the measured release wrote them (the one-letter names when
    the run measured the earlier layout beside them)."""
    names = "p, t" if "row_old_names" in parts else "payload, attempts, enqueued_at"
    return [[f"… its row: key + hash ({names})", fig(parts["row"], 1)]]


def _other_layouts(parts: dict[str, Any]) -> list[list[str]]:
    """The rows of the layouts measured beside the one enqueue writes."""
    if "row_old_names" not in parts:  # a run of the release before the one-letter names
        return [["the row with one-letter field names (p, a, t): a protocol change",
                 fig(parts["row_short_names"], 1)]]
    return [["the row with the earlier release's names (payload, attempts, enqueued_at)",
             fig(parts["row_old_names"], 1)],
            ["the row with `a` 0 as well (p, a, t)", fig(parts["row_with_attempts"], 1)]]


def _task_rows(data: dict[str, Any]) -> list[list[str]]:
    """A task job's lines, when the run measured it."""
    if "tasks" not in data:
        return []
    tasks = data["tasks"]
    return [["a pending task job (`@app.task` on the no-op, enqueue_many, default id)",
             fig(tasks["task_job"], 1)],
            ["… with the earlier release's envelope (a map of every field)",
             fig(tasks["task_job_earlier_envelope"], 1)]]


def _task_note(data: dict[str, Any]) -> list[str]:
    if "tasks" not in data:
        return []
    usage = data["tasks"]["task_row_usage"]
    return ["", f"A task job's payload is `{usage['payload']}` (the earlier release's: "
            f"`{data['tasks']['earlier_payload']}`); its row by `MEMORY USAGE`: "
            f"{usage['memory_usage']} B, encoding `{usage['encoding']}`."]


def memory_section(results: dict[str, Any], out: str) -> str:
    data = results["memory"]
    parts = data["breakdown"]
    tomb = data["tombstone"]
    rest = parts["pending_job"] - parts["row"] - parts["pending_entry"]
    rows = [
        ["a pending job (enqueue_many, default id)", fig(parts["pending_job"], 1)],
        *_row_rows(parts),
        ["… its `pending` zset entry (member = the id, score)", fig(parts["pending_entry"], 1)],
        ["… the rest (wake list; parts measured alone can sum to more than the whole)",
         fig(rest, 1)],
        *_other_layouts(parts),
        *_task_rows(data),
        ["a tombstone (acked job's row: " + ", ".join(tomb["fields"]) + "), with its expiry",
         fig(tomb["tombstone"], 1)],
        ["… the same without the expiry (PERSIST)", fig(tomb["without_expiry"], 1)],
    ]
    lengths = [[str(r["id_bytes"]), fig(r["pending_job"], 1)] for r in data["id_lengths"]]
    usage = parts["row_usage"]
    _plot_id_lengths(data, os.path.join(out, "memory_ids.png"))
    return "\n".join([
        "## Memory per job, piece by piece",
        "",
        f"used_memory growth / N for N = {data['jobs']:,} on a flushed server (wire=6, queue "
        f"`{data['queue']}`, payload `{data['payload']}`, allocator `{data['allocator']}`); the "
        "row and the zset entry are written alone with the same key, fields and score "
        f"enqueue writes. Default ids are {parts['id_bytes']} bytes. One row by `MEMORY USAGE`: "
        f"{usage['memory_usage']} B, encoding `{usage['encoding']}`.",
        *_task_note(data),
        "",
        md_table(["what", "B per job"], rows),
        "",
        "The same pending job with ids of other lengths (random `A-Za-z0-9`, `JOB:` included; "
        "30 bytes is the ULID id `new_job_id()` made before): memory moves in steps of 16 B, the "
        "allocator's size classes, once for the row key and once for the zset member.",
        "",
        md_table(["id bytes", "B per pending job"], lengths),
        "",
        "![memory per pending job vs id length](memory_ids.png)",
    ])


def _plot_id_lengths(data: dict[str, Any], path: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = data["id_lengths"]
    ax.step([r["id_bytes"] for r in rows], [r["pending_job"] for r in rows], where="post",
            marker="o")
    ax.axvline(data["breakdown"]["id_bytes"], color="tab:green", linestyle=":",
               label="new_job_id()")
    ax.set_xlabel("job id length, bytes (JOB: included)")
    ax.set_ylabel("bytes per pending job")
    ax.set_title("Memory per pending job vs id length")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def scaling_section(results: dict[str, Any], out: str) -> str:
    data = results["scaling"]
    rows = [[f"{r['pending']:,}", fig(r["claim/6"]), fig(r["claim/5"]), fig(r["enqueue/6"]),
             fig(r["enqueue/5"]), fig(r["memory_per_job"], 0)] for r in data["flat"]]
    lane_rows = [[f"{r['lanes']:,}", f"{r['jobs']:,}", fig(r["lane_claim/5"]),
                  fig(r["lane_enqueue/5"])] for r in data["lanes"]]
    _plot_scaling(data, os.path.join(out, "scaling.png"))
    return "\n".join([
        "## Scaling",
        "",
        f"usec_per_call of {data['calls']:,} calls (median of three phases) at each queue "
        "size; the queue is filled with native enqueues through `valkey-cli --pipe` and topped "
        "up so the claims leave it at its size. Memory per job = used_memory growth since the "
        "empty server / jobs held (pending + active), payload `noop`, ids `JOB:<name>-<9 "
        "digits>`.",
        "",
        md_table(["pending", "claim native µs", "claim Lua µs", "enqueue native µs",
                "enqueue Lua µs", "B/job"], rows),
        "",
        "Lane claim (`Queue.claim_lane`, scripts only), lanes filled with `enqueue_many` of "
        "(id, payload, lane) tuples, 1000 a flush; the enqueue column is the lane enqueue's "
        "own usec_per_call during that fill.",
        "",
        md_table(["non-empty lanes", "jobs", "lane claim µs", "lane enqueue µs"], lane_rows),
        "",
        "![scaling](scaling.png)",
    ])


def _plot_scaling(data: dict[str, Any], path: str) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5),
                                      gridspec_kw={"width_ratios": [2, 1]})
    sizes = [r["pending"] for r in data["flat"]]
    for key, label in (("claim/6", "claim native"), ("claim/5", "claim Lua"),
                       ("enqueue/6", "enqueue native"), ("enqueue/5", "enqueue Lua")):
        left.plot(sizes, [r[key] for r in data["flat"]], marker="o", label=label)
    left.set_xscale("log")
    left.set_ylim(bottom=0)
    left.set_xlabel("pending jobs")
    left.set_ylabel("usec_per_call")
    left.set_title("Flat queue: cost vs size")
    left.legend()
    lanes = data["lanes"]
    right.bar([f"{r['lanes']:,} lanes" for r in lanes], [r["lane_claim/5"] for r in lanes],
              color="tab:green")
    right.set_ylabel("usec_per_call")
    right.set_title("Lane claim (Lua)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def admission_section(results: dict[str, Any]) -> str:
    """The admission stall: how long a staged chord's admission holds the server at a time
    (``bench.admission``)."""
    return "\n".join(["## Admission stall (`python -m bench.admission`)", "",
                      "A chord admitted while another process PINGs the server every 5 ms: "
                      "the longest wait is the longest one step held it (docs/PROTOCOL.md, "
                      "\"Staged admission\"; the target: 50 ms for 100,000 children).", "",
                      admission_table(results["admission"])])


def write(results: dict[str, Any], out: str) -> str:
    env = results["env"]
    parts = [
        "# echomq benchmark results",
        "",
        f"Mode **{results['mode']}**, {env['date']}, commit {env.get('commit', 'not recorded')}: "
        f"Valkey {env['valkey']} "
        f"(`{env['server']}`) with trafikey (`{os.path.basename(env['module'])}`), Python "
        f"{env['python']}, {env['machine']}, loopback. Run with `make bench` "
        "(`make bench BENCH_ARGS=--quick` for a smoke test); the whole run took "
        f"{results['elapsed_s'] / 60:.1f} min. The machine is small and noisy: read the "
        "**ratios** measured side by side in this run, not the absolute figures.",
        "",
        "## Targets",
        "",
        md_table(["target", "measured", "verdict"], targets(results)),
    ]
    analysis = findings.render(results)
    if analysis:
        parts += ["", analysis]
    sections: dict[str, Callable[[], str]] = {
        "cost": lambda: cost_section(results, out),
        "throughput": lambda: throughput_section(results),
        "e2e": lambda: e2e_section(results, out),
        "workers": lambda: workers_section(results, out),
        "memory": lambda: memory_section(results, out),
        "scaling": lambda: scaling_section(results, out),
        "lanes": lambda: lanes_section(results),
        "tasks": lambda: tasks_section(results),
        "parking": lambda: parking_section(results),
        "startup": lambda: startup_section(results),
        "priority": lambda: priority_section(results),
        "events": lambda: events_section(results),
        "workflows": lambda: workflows_section(results),
        "admission": lambda: admission_section(results),
        "cluster": lambda: cluster_section(results),
        "steps": lambda: steps_section(results),
    }
    for phase, section in sections.items():
        if phase in results:
            parts += ["", section()]
    text = "\n".join(parts) + "\n"
    with open(os.path.join(out, "RESULTS.md"), "w") as dest:
        dest.write(text)
    return console(results)


def console(results: dict[str, Any]) -> str:
    lines = ["", "echomq bench — targets (full tables in docs/bench/RESULTS.md)"]
    for target, measured, verdict in targets(results):
        lines.append(f"  {verdict.strip('*'):7} {target}: {measured}")
    if "cost" in results:
        lines.append("\n  transition   Lua µs  native µs  bare µs  native/Lua  native/bare")
        for name, row in results["cost"]["table"].items():
            lines.append(f"  {name:10} {row['lua']:8.2f} {row['native']:10.2f} "
                         f"{row['bare_core']:8.2f} {row['native_over_lua']:11.2f} "
                         f"{row['native_over_core']:12.2f}")
    if "e2e" in results:
        lines.append("\n  system                       produce/s  batched/s  consume/s  "
                     "roundtrip/s  B/job")
        for name, row in results["e2e"].items():
            if "error" in row:
                lines.append(f"  {name:28} could not run: {row['error']}")
                continue
            lines.append(f"  {name:28} {row['produce']:9.0f} {row['produce_batch'] or 0:10.0f} "
                         f"{row['consume']:10.0f} {row['roundtrip']:12.0f} "
                         f"{row['memory_per_job']:6.0f}")
    return "\n".join(lines + _console_workers(results))


def _console_workers(results: dict[str, Any]) -> list[str]:
    if "workers" not in results:
        return []
    lines = ["\n  consumers    K  jobs/s  server CPU µs/job"]
    for row in results["workers"]["scaling"]:
        lines.append(f"  wire={row['wire']}   {row['consumers']:3d} {row['rate']:8.0f} "
                     f"{row['server_cpu_us_per_job']:8.1f}")
    return lines
