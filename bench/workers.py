"""Consumers as users run them: ``Consumer`` with its defaults and a no-op handler, one process
per consumer. How fast K of them drain N queued jobs on each wire, what valkey-server spends per
job meanwhile (``INFO cpu``), a plain redis-py GET loop's rate on the same server for scale, and
how long a job waits from ``enqueue`` to its handler's start when the worker is parked."""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

import redis
from tqdm import tqdm

from echomq import Consumer, Job, Queue, new_job_id

QUEUE = "bench"
PAYLOAD = b"noop"
FILL_BATCH = 500
WAIT_S = 120.0
SCALING_REPS = 2
CONTEXT = multiprocessing.get_context("spawn")  # the bench process runs threads by now


def server_cpu_s(conn: redis.Redis) -> float:
    """valkey-server's CPU time so far (``used_cpu_sys + used_cpu_user``), seconds."""
    info = conn.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def fill(queue: Queue, jobs: int) -> None:
    for start in range(0, jobs, FILL_BATCH):
        queue.enqueue_many([(new_job_id(), PAYLOAD)
                            for _ in range(min(FILL_BATCH, jobs - start))])


def unsettled(conn: redis.Redis, queue: Queue) -> int:
    """Jobs not yet done: pending + active (a prefetched batch is active until settled)."""
    with conn.pipeline(transaction=False) as pipe:
        pipe.zcard(queue.key("pending"))
        pipe.zcard(queue.key("active"))
        return sum(int(n) for n in pipe.execute())


def wait_for(condition: Callable[[], bool], what: str, poll_s: float = 0.002) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(poll_s)


# --- the consumer processes --------------------------------------------------------------------

def _noop(job: Job) -> None:
    return None


def _consumer_main(port: int, wire: int, handler: Callable[[Job], object], go: Event,
                   stop: Event, ready: Any) -> None:
    conn = redis.Redis(host="127.0.0.1", port=port)
    consumer = Consumer(Queue(conn, QUEUE, wire=wire, check_policy=False), handler)
    ready.release()
    go.wait()
    threading.Thread(target=lambda: (stop.wait(), consumer.stop()), daemon=True).start()
    consumer.run()


class Consumers:
    """K consumer processes, started and connected, held until ``go()``."""

    def __init__(self, port: int, wire: int, count: int,
                 handler: Callable[[Job], object] = _noop) -> None:
        self.go_event, self.stop_event = CONTEXT.Event(), CONTEXT.Event()
        ready = CONTEXT.Semaphore(0)
        self.procs = [CONTEXT.Process(target=_consumer_main, daemon=True, args=(
            port, wire, handler, self.go_event, self.stop_event, ready)) for _ in range(count)]
        for proc in self.procs:
            proc.start()
        for _ in self.procs:
            if not ready.acquire(timeout=WAIT_S):
                self.close()
                raise TimeoutError("a consumer process did not start")

    def go(self) -> None:
        self.go_event.set()

    def close(self) -> None:
        self.go_event.set()
        self.stop_event.set()
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
                proc.join(10)

    def __enter__(self) -> Consumers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- drain rate and server CPU -----------------------------------------------------------------

def drain(port: int, wire: int, consumers: int, jobs: int) -> dict[str, float]:
    """K consumer processes drain ``jobs`` queued jobs: jobs/s, and server CPU µs per job."""
    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    queue = Queue(conn, QUEUE, wire=wire, check_policy=False)
    fill(queue, jobs)
    with Consumers(port, wire, consumers) as group:
        cpu_before = server_cpu_s(conn)
        started = time.perf_counter()
        group.go()
        wait_for(lambda: unsettled(conn, queue) == 0, "the consumers to drain the queue",
                 poll_s=0.002)
        elapsed = time.perf_counter() - started
        cpu = server_cpu_s(conn) - cpu_before
    conn.flushall()
    conn.close()
    return {"wire": wire, "consumers": consumers, "jobs": jobs, "seconds": elapsed,
            "rate": jobs / elapsed, "server_cpu_us_per_job": cpu / jobs * 1e6}


def get_loop(port: int, calls: int) -> float:
    """A plain redis-py GET loop on one connection (one round trip each): calls/s."""
    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.set("bench:get", b"noop")
    started = time.perf_counter()
    for _ in range(calls):
        conn.get("bench:get")
    elapsed = time.perf_counter() - started
    conn.delete("bench:get")
    conn.close()
    return calls / elapsed


def rates(port: int, jobs: int, reps: int, counts: list[int]) -> dict[str, Any]:
    """One consumer on each wire ``reps`` times, interleaved with the GET loop, then K =
    ``counts`` consumers per wire (two runs each). Best of the runs: on a shared machine noise
    only ever slows a run down, so the best one is the closest to what the code can do."""
    single: dict[int, list[dict[str, float]]] = {6: [], 5: []}
    loops: list[float] = []
    for _ in tqdm(range(reps), desc="one consumer", unit="round"):
        loops.append(get_loop(port, jobs))
        for wire in (6, 5):
            single[wire].append(drain(port, wire, 1, jobs))
    scaling = [_best([drain(port, wire, k, jobs) for _ in range(SCALING_REPS)])
               for wire in (6, 5) for k in tqdm(counts, desc=f"K consumers, wire={wire}")]
    return {
        "jobs": jobs, "reps": reps, "get_loop": max(loops), "get_loops": loops,
        "single": {str(wire): _best(runs) for wire, runs in single.items()},
        "single_runs": {str(wire): runs for wire, runs in single.items()},
        "scaling": scaling, "scaling_reps": SCALING_REPS,
    }


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    """The fastest run's rate and the least server CPU per job seen (each the best of its own)."""
    return {**max(runs, key=lambda r: r["rate"]),
            "server_cpu_us_per_job": min(r["server_cpu_us_per_job"] for r in runs)}


# --- latency: enqueue → handler start, worker parked -------------------------------------------

class _Stamp:
    """The handler: sends ``time.perf_counter()`` (CLOCK_MONOTONIC, shared by every process on
    Linux) the moment it starts."""

    def __init__(self, sink: Connection) -> None:
        self.sink = sink

    def __call__(self, job: Job) -> None:
        self.sink.send(time.perf_counter())


def parked(conn: redis.Redis) -> bool:
    return int(conn.info("clients")["blocked_clients"]) >= 1


def latency(port: int, wire: int, samples: int) -> dict[str, float]:
    """One job at a time to a parked worker: ms from just before ``enqueue`` to handler start."""
    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    queue = Queue(conn, QUEUE, wire=wire, check_policy=False)
    source, sink = CONTEXT.Pipe(duplex=False)
    waits: list[float] = []
    with Consumers(port, wire, 1, handler=_Stamp(sink)) as group:
        group.go()
        for _ in range(samples):
            wait_for(lambda: parked(conn), "the worker to park", poll_s=0.0005)
            sent = time.perf_counter()
            queue.enqueue(new_job_id(), PAYLOAD)
            if not source.poll(WAIT_S):
                raise TimeoutError("the handler never started")
            waits.append((source.recv() - sent) * 1000)
    conn.flushall()
    conn.close()
    cuts = statistics.quantiles(waits, n=100, method="inclusive")
    return {"wire": wire, "samples": samples, "p50_ms": cuts[49], "p99_ms": cuts[98],
            "max_ms": max(waits), "mean_ms": statistics.fmean(waits)}


def run(port: int, jobs: int, reps: int, counts: list[int], samples: int) -> dict[str, Any]:
    results = rates(port, jobs, reps, counts)
    results["latency"] = {str(wire): latency(port, wire, samples) for wire in (6, 5)}
    results["clock"] = time.get_clock_info("perf_counter").implementation
    return results
