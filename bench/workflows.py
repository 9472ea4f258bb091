"""The ``workflows`` phase: what the server-side join costs, side by side in one run.

1. **The join on a settle.** A settle of one ``ack`` item and no claim (events off), pipelined
   from Python after ``CONFIG RESETSTAT``, of plain jobs and of chord children (each child's row
   names its body in ``next``, the body waiting on all ``fan_in`` children of its chord), on
   both wires. Per call: ``INFO commandstats`` usec_per_call and the server's dirty counter
   (``rdb_changes_since_last_save`` of ``INFO persistence``; ``CONFIG SET save ""`` for the
   phase, so no save resets it) as key writes. The children before the last of each chord are
   settled in one pipeline (the join's HINCRBY on the body's row), the last ones in another (each
   also moves its body to pending). Target: a child costs at most one key write more than a plain
   job; the baseline in µs is one key write as each executor pays it: a bare ``HINCRBY`` for the
   native commands, for the scripts an EVALSHA of a script doing one HINCRBY less one doing
   nothing with the same arguments (as the events phase holds XADD).
2. **Chord throughput.** One in-process ``Consumer`` with ``app.handler`` drains a chord of N
   no-op children and its body (which is given the N results), against N+1 plain no-op task jobs
   on the same queue; jobs/s of the drain each (best of ``reps``), and the ratio, per wire.
3. **Against Celery's chord.** A chord of N no-op children and a callback, with one worker process
   started and warmed up beforehand; the wall time from the call that sends the chord to the
   callback's result: Celery's ``chord(...).apply_async()`` and ``.get()`` (broker redis db 0,
   result backend redis db 1 of the same server, one ``celery worker --pool=solo``), echomq's
   ``chord(...).enqueue()`` and ``.result()`` served by one ``echomq worker`` of an App
   (concurrency 1: one worker process under its supervisor), on each wire.
"""

from __future__ import annotations

import gc
import importlib
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from importlib.metadata import version
from typing import Any

import redis

from bench.common import call, commandstats, ids, pipelined, reset, stat_name
from echomq import App, Consumer, Queue, chord
from echomq.engine import transitions as t
from echomq.engine.calls import Ack, Job, QueueCalls
from echomq.engine.scripts import script_for
from echomq.queue.graphs import GraphJob, calls_of_graph

PAYLOAD = b'{"task":"noop","args":[]}'
NOW = 1_700_000_000_000
TARGET_WRITES = 1.0  # extra key writes a chord child's settle may cost
WIRES = (6, 5)
FLOWS_QUEUE = "flows"
TIMES = "\N{MULTIPLICATION SIGN}"
# The checkout the workers import ``bench`` (and echomq, as this process does) from.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- 1. the join on a settle ------------------------------------------------------------------

def dirty(conn: redis.Redis) -> int:
    """The server's dirty counter: key writes since the last save."""
    return int(conn.info("persistence")["rdb_changes_since_last_save"])


@contextmanager
def no_saves(conn: redis.Redis) -> Iterator[None]:
    """``CONFIG SET save ""`` for the block (a save would reset the dirty counter), restored
    after."""
    before = str(conn.config_get("save").get("save") or "")
    conn.config_set("save", "")
    try:
        yield
    finally:
        conn.config_set("save", before)


def measured(conn: redis.Redis, name: str, commands: Sequence[Sequence[Any]]) -> dict[str, float]:
    """usec_per_call of ``name`` and key writes per call over ``commands``, pipelined after a
    reset; raises on the first error reply."""
    reset(conn)
    before = dirty(conn)
    replies = pipelined(conn, commands)
    after = dirty(conn)
    bad = [reply for reply in replies if isinstance(reply, Exception)]
    if bad:
        raise RuntimeError(f"workflows bench, {name}: {bad[0]!r}")
    stats = commandstats(conn)[name]
    if int(stats["calls"]) != len(commands):
        raise RuntimeError(f"workflows bench: {stats['calls']} calls of {name}, "
                           f"expected {len(commands)}")
    return {"usec": stats["usec_per_call"], "writes": (after - before) / len(commands),
            "calls": len(commands)}


def _run(conn: redis.Redis, wire: int, made: Sequence[Any]) -> list[Any]:
    replies = pipelined(conn, [call(transition, wire, keys, args)
                               for transition, keys, args in made])
    bad = [reply for reply in replies if isinstance(reply, Exception)]
    if bad:
        raise RuntimeError(f"workflows bench setup, wire={wire}: {bad[0]!r}")
    return replies


def _leases(conn: redis.Redis, wire: int, calls: QueueCalls, count: int) -> dict[str, Job]:
    """Claim ``count`` jobs, one call each; their leases by id."""
    replies = _run(conn, wire, [calls.claim(30_000, NOW) for _ in range(count)])
    leases = {}
    for reply in replies:
        if reply is None:
            raise RuntimeError("workflows bench: a claim found no job")
        leases[reply[0].decode()] = Job(reply[0].decode(), b"", int(reply[2]),
                                        fence=int(reply[3]))
    return leases


def _settles(wire: int, calls: QueueCalls, jobs: Sequence[Job]) -> list[list[Any]]:
    """One settle call per job: an ack item, no claim."""
    commands = []
    for job in jobs:
        transition, keys, args = calls.settle([Ack(job)], 0, 30_000, None, NOW)
        commands.append(call(transition, wire, keys, args))
    return commands


def settle_costs(conn: redis.Redis, wire: int, count: int, fan_in: int) -> dict[str, Any]:
    """Settles of ``count`` plain jobs and of ``count`` chord children (``fan_in`` a chord), all
    leased beforehand, measured in turn: half the plain jobs, the children before the last of
    each chord, the other half of the plain jobs, the last children (the plain figure is the two
    halves together, so neither side gains from going first or last)."""
    conn.flushall()
    for transition in (t.ENQUEUE, t.ENQUEUE_AFTER, t.AFTER, t.CLAIM, t.SETTLE):
        conn.script_load(script_for(transition).source)
    name = stat_name(t.SETTLE, wire)
    plain = QueueCalls(f"plain{wire}")
    _run(conn, wire, [plain.enqueue(job, PAYLOAD, None, NOW) for job in ids("plain", count)])
    plain_leases = list(_leases(conn, wire, plain, count).values())
    chords = max(1, count // fan_in)
    flows = QueueCalls(f"chords{wire}")
    graph: list[GraphJob] = []
    children: list[list[str]] = []
    for c in range(chords):
        header = ids(f"c{c:05d}", fan_in)
        children.append(header)
        graph += [GraphJob(child, PAYLOAD) for child in header]
        graph.append(GraphJob(f"JOB:body-{c:05d}", PAYLOAD, after=tuple(header)))
    made, _ = calls_of_graph(flows, graph, NOW)
    _run(conn, wire, made)
    if conn.zcard(flows.key("waiting")) != chords:
        raise RuntimeError("workflows bench: the bodies are not all waiting")
    leases = _leases(conn, wire, flows, chords * fan_in)
    first = [leases[child] for header in children for child in header[:-1]]
    last = [leases[header[-1]] for header in children]
    half = max(1, len(plain_leases) // 2)
    out: dict[str, Any] = {"chords": chords}
    out["plain_before"] = measured(conn, name, _settles(wire, plain, plain_leases[:half]))
    if first:
        out["child"] = measured(conn, name, _settles(wire, flows, first))
    if plain_leases[half:]:
        out["plain_after"] = measured(conn, name, _settles(wire, plain, plain_leases[half:]))
    out["last"] = measured(conn, name, _settles(wire, flows, last))
    if conn.zcard(flows.key("waiting")) or conn.zcard(flows.key("pending")) != chords:
        raise RuntimeError("workflows bench: the last children did not release every body")
    halves = [out[k] for k in ("plain_before", "plain_after") if k in out]
    calls = sum(h["calls"] for h in halves)
    out["plain"] = {k: sum(h[k] * h["calls"] for h in halves) / calls
                    for k in ("usec", "writes")} | {"calls": calls}
    return out


def bare_hincrby(conn: redis.Redis, count: int) -> dict[str, float]:
    """usec_per_call and key writes per call of ``HINCRBY`` on one row."""
    conn.flushall()
    conn.hset("bench:row", mapping={"p": PAYLOAD, "waits": count + 1})
    return measured(conn, "hincrby", [("HINCRBY", "bench:row", "waits", -1)
                                      for _ in range(count)])


# The scripts of the scripts' baseline: one HINCRBY of the row named, and the same call doing
# nothing; both reply nil, so only the HINCRBY sets them apart.
SCRIPT_HINCRBY = "redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])"
SCRIPT_NOTHING = "local _ = KEYS[1]"


def evalsha(conn: redis.Redis, source: str, count: int) -> dict[str, float]:
    conn.flushall()
    conn.hset("bench:row", mapping={"p": PAYLOAD, "waits": count + 1})
    sha = conn.script_load(source)
    return measured(conn, "evalsha", [("EVALSHA", sha, 1, "bench:row", "waits", -1)
                                      for _ in range(count)])


def baseline(data: dict[str, Any], wire: str) -> tuple[str, float]:
    """The key write a call of ``wire`` is held to, in µs: the scripts' own HINCRBY for
    wire=5, the bare one for wire=6."""
    if wire == "5":
        return "script HINCRBY", data["script_hincrby"]
    return "bare HINCRBY", data["hincrby"]["usec"]


def join_rows(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per wire: the extra µs and key writes of a chord child's settle over a plain job's, for
    the children before the last, the last (its body released) and the chord as a whole."""
    rows = {}
    for wire, runs in data["settles"].items():
        fan_in = data["fan_in"]
        plain = {k: statistics.median(run["plain"][k] for run in runs) for k in ("usec", "writes")}
        last = {k: statistics.median(run["last"][k] for run in runs) for k in ("usec", "writes")}
        if fan_in > 1:
            child = {k: statistics.median(run["child"][k] for run in runs)
                     for k in ("usec", "writes")}
        else:
            child = last
        whole = {k: ((fan_in - 1) * child[k] + last[k]) / fan_in for k in ("usec", "writes")}
        _, against = baseline(data, wire)
        for label, row in (("child", child), ("last", last), ("chord", whole)):
            extra_us = row["usec"] - plain["usec"]
            rows[f"{label}/{wire}"] = {
                "plain_us": plain["usec"], "us": row["usec"], "extra_us": extra_us,
                "extra_over_baseline": extra_us / against, "plain_writes": plain["writes"],
                "writes": row["writes"], "extra_writes": row["writes"] - plain["writes"]}
    return rows


def join_costs(conn: redis.Redis, count: int, fan_in: int, reps: int) -> dict[str, Any]:
    settles: dict[str, list[dict[str, Any]]] = {}
    with no_saves(conn):
        for _ in range(reps):
            for wire in WIRES:
                settles.setdefault(str(wire), []).append(
                    settle_costs(conn, wire, count, fan_in))
        hincrby = [bare_hincrby(conn, count) for _ in range(reps)]
        scripted = [(evalsha(conn, SCRIPT_HINCRBY, count), evalsha(conn, SCRIPT_NOTHING, count))
                    for _ in range(reps)]
    conn.flushall()
    data: dict[str, Any] = {
        "count": count, "fan_in": fan_in, "reps": reps, "settles": settles,
        "hincrby": {k: statistics.median(run[k] for run in hincrby) for k in ("usec", "writes")},
        "evalsha_hincrby": {k: statistics.median(pair[0][k] for pair in scripted)
                            for k in ("usec", "writes")},
        "evalsha_nothing": {k: statistics.median(pair[1][k] for pair in scripted)
                            for k in ("usec", "writes")},
    }
    data["script_hincrby"] = data["evalsha_hincrby"]["usec"] - data["evalsha_nothing"]["usec"]
    data["table"] = join_rows(data)
    return data


# --- 2. chord throughput ------------------------------------------------------------------------

def noop() -> None:
    """Does nothing: the bench measures the queue, not the job."""


def collect(values: list[Any]) -> int:
    """The chord's body: how many results it was given."""
    return len(values)


def make_app(conn: Any, wire: int, queue: str = FLOWS_QUEUE) -> tuple[App, Any, Any]:
    """An App on ``queue`` with the no-op task and the body: (app, noop, collect)."""
    app = App(conn, queue, wire=wire, check_policy=False)
    return app, app.task(name="noop")(noop), app.task(name="collect")(collect)


def drain(queue: Queue, handler: Callable[[Any], object]) -> tuple[int, float]:
    """(jobs run, seconds) of one Consumer calling ``drain`` until a call runs nothing: a
    chord's last child is settled by a call whose claim was planned before its items, so the
    body it released is claimed by the next ``drain``."""
    consumer = Consumer(queue, handler)
    try:
        started = time.perf_counter()
        ran = total = consumer.drain()
        while ran:
            ran = consumer.drain()
            total += ran
        return total, time.perf_counter() - started
    finally:
        consumer.close()


def chord_drain(conn: redis.Redis, wire: int, children: int,
                chord_first: bool = True) -> dict[str, float]:
    """jobs/s of one Consumer draining a chord of ``children`` + its body, and of as many plain
    task jobs (children + 1), on a flushed server each; the chord first or second."""

    def chord_rate() -> float:
        conn.flushall()
        app, task, body = make_app(conn, wire)
        handle = chord([task.s() for _ in range(children)], body.s()).enqueue()
        ran, seconds = drain(app.queue, app.handler)
        if ran != children + 1 or handle.result(timeout=10) != children:
            raise RuntimeError(f"workflows bench: the chord drain ran {ran} jobs")
        return ran / seconds

    def flat_rate() -> float:
        conn.flushall()
        app, task, _ = make_app(conn, wire)
        for _ in range(children + 1):
            task.enqueue()
        ran, seconds = drain(app.queue, app.handler)
        if ran != children + 1:
            raise RuntimeError(f"workflows bench: the flat drain ran {ran} jobs")
        return ran / seconds

    if chord_first:
        rates = {"chord": chord_rate(), "flat": flat_rate()}
    else:
        rates = {"flat": flat_rate(), "chord": chord_rate()}
    conn.flushall()
    return rates


def throughput(conn: redis.Redis, children: int, reps: int) -> dict[str, Any]:
    """Best jobs/s of ``reps`` runs per wire, the chord drained first in every other run."""
    runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(reps):
        for wire in WIRES:
            runs.setdefault(str(wire), []).append(
                chord_drain(conn, wire, children, chord_first=rep % 2 == 0))
    table: dict[str, dict[str, Any]] = {}
    for name, figures in runs.items():
        best = {k: max(run[k] for run in figures) for k in ("chord", "flat")}
        table[name] = {**best, "ratio": best["chord"] / best["flat"],
                       "runs": figures}
    return {"children": children, "reps": reps, "table": table}


# --- 3. against Celery's chord --------------------------------------------------------------------

def _wait_for(ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str,
              timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start in {timeout:.0f} s")
        time.sleep(0.05)


def _path() -> str:
    """PYTHONPATH for a worker: the checkout first, then what this process was given."""
    return os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def echomq_chord(port: int, wire: int, children: int) -> dict[str, Any]:
    """Seconds from ``chord(...).enqueue()`` to its body's result, served by one ``echomq
    worker`` (concurrency 1) of the App of ``bench.peers.echomq_flows``."""
    url = f"redis://127.0.0.1:{port}/0"
    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    _, task, body = make_app(conn, wire)
    worker = subprocess.Popen(
        [sys.executable, "-m", "echomq", "worker", "bench.peers.echomq_flows:app",
         "--concurrency", "1", "--log-level", "warning"],
        env={**os.environ, "BENCH_FLOWS_URL": url, "BENCH_FLOWS_WIRE": str(wire),
             "PYTHONPATH": _path()},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        warm = task.enqueue()
        _wait_for(lambda: bool(conn.exists(f"emq:{{{FLOWS_QUEUE}}}:ended:{warm.id}")), worker,
                  "echomq worker")
        warm.result(timeout=10)
        started = time.perf_counter()
        handle = chord([task.s() for _ in range(children)], body.s()).enqueue()
        value = handle.result(timeout=600)
        elapsed = time.perf_counter() - started
    finally:
        _stop(worker)
        conn.flushall()
        conn.close()
    if value != children:
        raise RuntimeError(f"echomq chord: the body was given {value} results")
    return {"system": f"echomq wire={wire}", "version": "checkout", "children": children,
            "seconds": elapsed, "jobs_per_s": (children + 1) / elapsed,
            "worker": "`echomq worker bench.peers.echomq_flows:app --concurrency 1` "
                      "(one worker process under its supervisor, prefetch 64)"}


def celery_chord(port: int, children: int) -> dict[str, Any]:
    """Seconds from ``chord(...).apply_async()`` to the callback's result, one ``celery worker
    --pool=solo``, broker db 0 and result backend db 1 of the bench's server."""
    broker, backend = f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1"
    os.environ["BENCH_FLOWS_BROKER"], os.environ["BENCH_FLOWS_BACKEND"] = broker, backend
    celery = importlib.import_module("celery")
    flows = importlib.import_module("bench.peers.celery_flows")
    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    worker = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "celery"), "-A",
         "bench.peers.celery_flows", "worker", "--pool=solo", "--concurrency=1", "-Q", "flows",
         "-l", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        env={**os.environ, "PYTHONPATH": _path()}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: bool(flows.app.control.ping(timeout=0.5)), worker, "celery worker")
        flows.noop.delay().get(timeout=30)
        started = time.perf_counter()
        result = celery.chord([flows.noop.s() for _ in range(children)])(flows.collect.s())
        value = result.get(timeout=600)
        elapsed = time.perf_counter() - started
        del result  # its pending results unsubscribe now, while the server runs
        gc.collect()
    finally:
        _stop(worker)
        conn.flushall()
        conn.close()
    if value != children:
        raise RuntimeError(f"celery chord: the callback was given {value} results")
    return {"system": "celery", "version": version("celery"), "children": children,
            "seconds": elapsed, "jobs_per_s": (children + 1) / elapsed,
            "worker": "`celery worker --pool=solo --concurrency=1` (redis broker db 0, redis "
                      "result backend db 1)"}


def peers(port: int, children: int) -> dict[str, Any]:
    """Each system's chord, or why it could not run here."""
    systems: dict[str, Callable[[], dict[str, Any]]] = {
        f"echomq wire={wire}": partial(echomq_chord, port, wire, children) for wire in WIRES}
    systems["celery"] = lambda: celery_chord(port, children)
    rows: dict[str, Any] = {}
    for name, measure in systems.items():
        try:
            rows[name] = measure()
        except Exception as exc:  # a peer that cannot run here is reported, not faked
            rows[name] = {"system": name, "children": children,
                          "error": f"{type(exc).__name__}: {exc}",
                          "trace": traceback.format_exc(limit=3)}
    return rows


# --- the phase ----------------------------------------------------------------------------------

def run(conn: redis.Redis, port: int, config: dict[str, Any]) -> dict[str, Any]:
    """The phase of ``python -m bench``: its three parts on the bench's server."""
    return {
        "join": join_costs(conn, config["flow_settles"], config["flow_fan_in"],
                           config["flow_reps"]),
        "throughput": throughput(conn, config["flow_chord"], config["flow_reps"]),
        "peers": peers(port, config["flow_peer_chord"]),
    }
