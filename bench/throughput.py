"""Throughput of the native commands vs their EVALSHA twins, driven by C clients (no Python in
the loop): ``valkey-benchmark`` (50 clients, with and without ``-P 16``) for claim, and
``valkey-cli --pipe`` for enqueue.

Why not valkey-benchmark for enqueue: it draws a fresh ``__rand_int__`` for every occurrence in a
command, and an enqueue names its id twice (in the row key ``<base>job:<id>`` and as the id
argument), which the protocol requires to match (``EMQKEYS``). So distinct enqueues cannot be
written as one valkey-benchmark command line; ``--pipe`` sends n distinct enqueues instead."""

from __future__ import annotations

import csv
import io
import subprocess
import tempfile
from typing import Any

import redis
from tqdm import tqdm

from bench.common import claim_cmd, enqueue_cmd, ids, mass_insert, script_for, tool
from echomq.engine import transitions as t

PAYLOAD = b'{"task":"noop","args":[]}'


def _fill(port: int, base: str, count: int, workdir: str, tag: str) -> None:
    mass_insert(port, (enqueue_cmd(base, 6, j, PAYLOAD) for j in ids(tag, count)), workdir)


def _benchmark(port: int, command: list[Any], requests: int, pipeline: int) -> float:
    argv = [tool("valkey-benchmark"), "-p", str(port), "-c", "50", "-n", str(requests),
            "-P", str(pipeline), "--csv", *map(str, command)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    rows = list(csv.reader(io.StringIO(done.stdout)))
    return float(rows[1][1])


def run(conn: redis.Redis, port: int, requests: int, reps: int) -> dict[str, Any]:
    results: dict[str, list[float]] = {}
    steps = [(rep, wire, p) for rep in range(reps) for wire in (6, 5) for p in (1, 16)]
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as workdir:
        for rep, wire, pipeline in tqdm(steps, desc="valkey-benchmark claim", unit="run"):
            conn.flushall()
            base = f"emq:{{tp{rep}}}:"
            _fill(port, base, requests + 100, workdir, f"tp{rep}")
            command = claim_cmd(base, wire)
            rps = _benchmark(port, command, requests, pipeline)
            if conn.zcard(f"{base}active") < requests:
                raise RuntimeError(f"claim benchmark wire={wire}: not every call claimed a job")
            results.setdefault(f"claim/{wire}/P{pipeline}", []).append(rps)
        for rep in tqdm(range(reps), desc="valkey-cli --pipe enqueue", unit="run"):
            for wire in (6, 5):
                conn.flushall()
                base = f"emq:{{pipe{rep}}}:"
                jobs = ids(f"pipe{rep}w{wire}", requests)
                replies, seconds = mass_insert(
                    port, (enqueue_cmd(base, wire, j, PAYLOAD) for j in jobs), workdir)
                if conn.zcard(f"{base}pending") != requests:
                    raise RuntimeError("enqueue via --pipe: not every job was admitted")
                results.setdefault(f"enqueue/{wire}/pipe", []).append(replies / seconds)
    conn.flushall()
    best = {name: max(values) for name, values in results.items()}
    return {"requests": requests, "reps": reps, "samples": results, "best": best,
            "claim_command": {str(w): " ".join(map(str, claim_cmd("emq:{b}:", w))) for w in (5, 6)},
            "script_sha": script_for(t.CLAIM).sha}
