# ruff: noqa: RUF001  (the report writes the multiplication sign on purpose)
"""``python -m bench --only cluster``: what one queue costs on a cluster of three primaries, plain
and sharded, measured by the servers themselves (each node's CPU time, ``INFO cpu``, and its
``COMMAND GETKEYS`` calls, ``INFO commandstats``) and at the client (the commands it sent).

For each wire and each layout (a plain queue; the same queue with ``SHARDS`` shards), ``jobs``
jobs are enqueued in batches of 500, then drained by one consumer with a no-op handler. Per node
and part: the CPU time its process used (commands, network, its own timers), and the calls
``COMMAND GETKEYS`` (a cluster client finding a command's keys: an extra round trip). From
those:

- the spread: each primary's share of the server time of the sharded queue, and the largest
  departure from an even third;
- the claim cost per job of the sharded queue against the plain one (the drain's CPU time a job:
  the consumer's settle calls, which claim and settle, and its reads) and the whole per job;
- the calls per job, sharded against plain, and the extra round trips (``COMMAND``, and calls
  beyond the plain queue's per job).

The cluster runs on this machine's cores with the client beside it: the figures are costs per
job, not a speed-up, and RESULTS.md derives the throughput of k primaries from them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.connection import AbstractConnection

from bench.common import start_server
from echomq import Consumer, Job, Queue
from echomq.embedded import join_cluster

PRIMARIES = 3
SHARDS = 12
BATCH = 500
FORMING_S = 30.0


@contextmanager
def running_cluster(size: int = PRIMARIES) -> Iterator[list[Any]]:
    """``size`` of the bench's servers joined into one cluster, the slots split evenly."""
    nodes = []
    try:
        for _ in range(size):
            server = start_server(cluster=True)
            nodes.append(server)
        join_cluster(nodes, FORMING_S)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def node_stats(client: redis.Redis) -> dict[str, dict[str, float]]:
    return {name.removeprefix("cmdstat_"): {"calls": float(row["calls"]),
                                            "usec": float(row["usec"])}
            for name, row in client.info("commandstats").items()}


def _drain(queue: Queue, jobs: int) -> None:
    done = [0]

    def handler(job: Job) -> None:
        done[0] += 1

    consumer = Consumer(queue, handler)
    while done[0] < jobs:
        consumer.beat(park=False)
    consumer.stop()


def one_run(nodes: list[Any], rc: RedisCluster, wire: int, shards: int,
            jobs: int) -> dict[str, Any]:
    """Enqueue ``jobs`` on a fresh queue, then drain them: every node's CPU time of each part
    alone (the drain's is the consumer's: its claims, settles, reads and parks)."""
    name = f"bench-{wire}-{shards}-{time.monotonic_ns()}"
    queue = Queue(rc, name, wire=wire) if shards == 1 else Queue(rc, name, wire=wire,
                                                                 shards=shards)
    clients = [node.client() for node in nodes]
    cpu = _reset(clients)
    sent = SentCommands()
    with sent.counting():
        for first in range(0, jobs, BATCH):
            queue.enqueue_many([(f"JOB:{n}", b"{}")
                                for n in range(first, min(jobs, first + BATCH))])
    produced = _summaries(clients, cpu, sent.count)
    cpu = _reset(clients)
    sent = SentCommands()
    started = time.perf_counter()
    with sent.counting():
        _drain(queue, jobs)
    elapsed = time.perf_counter() - started
    drained = _summaries(clients, cpu, sent.count)
    for client in clients:
        client.close()
    return {"wire": wire, "shards": shards, "jobs": jobs, "drain_s": elapsed,
            "produce": produced, "drain": drained}


def _summaries(clients: list[redis.Redis], cpu: list[float],
               sent: int) -> list[dict[str, float]]:
    """Each node's CPU time since ``cpu`` (µs) and its COMMAND GETKEYS calls; the calls sent,
    on the first."""
    summaries = []
    for index, (client, before) in enumerate(zip(clients, cpu, strict=True)):
        getkeys = sum(row["calls"] for name, row in node_stats(client).items()
                      if name.startswith("command|getkeys"))
        summaries.append({"usec": (cpu_s(client) - before) * 1e6, "command_calls": getkeys,
                          "calls": float(sent if index == 0 else 0)})
    return summaries


def cpu_s(client: redis.Redis) -> float:
    """The CPU time the node's process has used (user and system, s)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


class SentCommands:
    """Counts the commands this process's redis-py connections send (one each, in a pipeline
    too): the calls a client sends, not a script's or the module's inner calls."""

    def __init__(self) -> None:
        self.count = 0

    @contextmanager
    def counting(self) -> Iterator[None]:
        single = AbstractConnection.send_command
        many = AbstractConnection.pack_commands

        def send_command(connection: Any, *args: Any, **options: Any) -> Any:
            self.count += 1
            return single(connection, *args, **options)

        def pack_commands(connection: Any, commands: Any) -> Any:
            commands = list(commands)
            self.count += len(commands)
            return many(connection, commands)

        AbstractConnection.send_command = send_command  # type: ignore[method-assign]
        AbstractConnection.pack_commands = pack_commands  # type: ignore[method-assign]
        try:
            yield
        finally:
            AbstractConnection.send_command = single  # type: ignore[method-assign]
            AbstractConnection.pack_commands = many  # type: ignore[method-assign]


def _reset(clients: list[redis.Redis]) -> list[float]:
    """Every node's command counts reset; its CPU time so far."""
    for client in clients:
        client.config_resetstat()
    return [cpu_s(client) for client in clients]


def _per_job(run: dict[str, Any], part: str, field: str) -> float:
    return float(sum(node[field] for node in run[part])) / run["jobs"]


def compare(plain: dict[str, Any], sharded: dict[str, Any]) -> dict[str, float]:
    """The figures RESULTS.md reports of one wire's plain and sharded runs."""
    shares = [produce["usec"] + drain["usec"]
              for produce, drain in zip(sharded["produce"], sharded["drain"], strict=True)]
    mean = sum(shares) / len(shares)
    figures: dict[str, float] = {
        "spread_max_departure": max(abs(share - mean) / mean for share in shares),
        "jobs": plain["jobs"],
        "command_calls": sum(node["command_calls"] for run in (plain, sharded)
                             for part in ("produce", "drain") for node in run[part]),
    }
    for part in ("produce", "drain"):
        for field in ("usec", "calls"):
            before, after = _per_job(plain, part, field), _per_job(sharded, part, field)
            figures[f"{part}_{field}_plain"] = before
            figures[f"{part}_{field}_sharded"] = after
            figures[f"{part}_{field}_ratio"] = after / before if before else 0.0
    whole = figures["produce_usec_sharded"] + figures["drain_usec_sharded"]
    plain_whole = figures["produce_usec_plain"] + figures["drain_usec_plain"]
    figures["usec_per_job_sharded"] = whole
    figures["node_ceiling_jobs_s"] = 1e6 / whole if whole else 0.0
    figures["plain_ceiling_jobs_s"] = 1e6 / plain_whole if plain_whole else 0.0
    return figures


def run(jobs: int, reps: int = 3) -> dict[str, Any]:
    """Both wires, plain and sharded side by side ``reps`` times, on one cluster of three
    primaries: each figure the median of its reps."""
    out: dict[str, Any] = {"primaries": PRIMARIES, "shards": SHARDS, "reps": reps, "runs": [],
                           "wires": {}}
    with running_cluster() as nodes:
        rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
        for wire in (5, 6):
            compared = []
            for _ in range(reps):
                plain = one_run(nodes, rc, wire, 1, jobs)
                sharded = one_run(nodes, rc, wire, SHARDS, jobs)
                out["runs"] += [plain, sharded]
                compared.append(compare(plain, sharded))
            out["wires"][str(wire)] = {name: statistics.median(figures[name]
                                                               for figures in compared)
                                       for name in compared[0]}
        rc.close()
    return out


SPREAD_BOUND = 0.20
DRAIN_RATIO_BOUND = 1.2
PROJECTED = (1, 2, 3, 4, 8, 16)


def projected_jobs_s(figures: dict[str, float], primaries: int) -> float:
    """The jobs a second a sharded queue's primaries can serve, its shards spread as measured:
    each primary's core spends the measured server time per job on its jobs, and the busiest
    one (``1 + departure`` times an even share of the work) sets the pace."""
    return figures["node_ceiling_jobs_s"] * primaries / (1 + figures["spread_max_departure"])


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join("| " + " | ".join(row) + " |"
                     for row in [header, ["---"] * len(header), *rows])


def targets(results: dict[str, Any]) -> list[list[str]]:
    """The targets rows: an even spread, the consumer's cost, no extra round trip."""
    rows: list[list[str]] = []
    for wire, figures in results.get("cluster", {}).get("wires", {}).items():
        rows += [
            [f"wire={wire} sharded queue: each primary's server time within "
             f"{SPREAD_BOUND:.0%} of an even share",
             f"largest departure {figures['spread_max_departure']:.1%}",
             verdict(figures["spread_max_departure"] <= SPREAD_BOUND)],
            [f"wire={wire} sharded queue: the consumer's server time per job ≤ "
             f"{DRAIN_RATIO_BOUND} × a plain queue's",
             f"{figures['drain_usec_sharded']:.2f} / {figures['drain_usec_plain']:.2f} µs = "
             f"{figures['drain_usec_ratio']:.2f}×",
             verdict(figures["drain_usec_ratio"] <= DRAIN_RATIO_BOUND)],
            [f"wire={wire} sharded queue: no extra round trip (COMMAND GETKEYS) on a cluster",
             f"{figures['command_calls']:.0f} COMMAND calls",
             verdict(figures["command_calls"] == 0)],
        ]
    return rows


def section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of this phase."""
    data = results["cluster"]
    rows, projected = [], []
    for wire, figures in data["wires"].items():
        for part in ("produce", "drain"):
            rows.append([f"wire={wire} {part}",
                         f"{figures[f'{part}_usec_plain']:.2f}",
                         f"{figures[f'{part}_usec_sharded']:.2f}",
                         f"{figures[f'{part}_usec_ratio']:.2f}×",
                         f"{figures[f'{part}_calls_plain']:.3f}",
                         f"{figures[f'{part}_calls_sharded']:.3f}"])
        projected.append([f"wire={wire}", f"{figures['usec_per_job_sharded']:.2f}",
                          f"{figures['spread_max_departure']:.1%}",
                          *(f"{projected_jobs_s(figures, k):,.0f}" for k in PROJECTED),
                          f"{figures.get('plain_ceiling_jobs_s', 0.0):,.0f}"])
    return "\n".join([
        "## One queue over a cluster (plain and sharded)",
        "",
        f"{data['primaries']} primaries on this machine, one queue plain and with "
        f"{data['shards']} shards, {next(iter(data['wires'].values()))['jobs']:,.0f} jobs "
        "enqueued in batches of 500 and drained by one consumer; the servers' CPU time "
        "(`INFO cpu`) of each part, summed over the nodes, per job (calls: the commands the "
        f"clients sent); each figure the median of {data.get('reps', 1)} runs, plain and "
        "sharded side by side.",
        "",
        table(["part", "plain µs/job", "sharded µs/job", "ratio", "plain calls/job",
                  "sharded calls/job"], rows),
        "",
        "Expected throughput of the sharded queue on k primaries, each with a core of this "
        "machine's speed to itself, from the server time per job and the measured spread "
        "(`k × 10⁶ / µs per job / (1 + largest departure)`): clients on other cores, the "
        "network not the limit, at least as many shards as primaries (a multiple of them, on "
        "equal runs of slots), the work over many ids and lane groups. A plain queue stays on "
        "one primary: its figure (`10⁶ / its µs per job`) holds for any k.",
        "",
        table(["wire", "server µs/job", "largest departure",
               *(f"k={k} jobs/s" for k in PROJECTED), "plain queue, any k"], projected),
    ])
