"""End to end from Python: jobs per second to produce (one call per job, and batched), to
consume (one worker drains N queued jobs: claim + ack, or the peer's worker), and the round trip
(N / (produce one by one + drain)); memory per pending job (used_memory delta / N after the
one-by-one produce). echomq on both wires, its task layer (``@app.task`` on the peers' no-op,
wire=6) and five peers, all on the same valkey-server."""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import redis

from bench.common import load_scripts, settle_memory
from bench.peers.tasks import anoop, noop
from echomq import App, Consumer, Queue, new_job_id

PAYLOAD = b"noop"  # names the job, like bullmq's name "noop" with data {}
BATCH = 500
BATCH_REPS = 3  # a batched produce is short at this N: echomq's and RQ's take the median of three
log = logging.getLogger("bench")


@dataclass
class Figures:
    system: str
    version: str
    jobs: int
    produce_s: float = 0.0
    produce_batch_s: float | None = None
    set_pipeline_s: float | None = None  # the same jobs as plain SETs, in the same phase
    consume_s: float = 0.0
    consume_jobs: int = 0
    memory_bytes: int = 0
    batch_how: str = ""
    notes: list[str] = field(default_factory=list)

    def rates(self) -> dict[str, Any]:
        produce = self.jobs / self.produce_s
        consume = self.consume_jobs / self.consume_s
        return {
            "system": self.system, "version": self.version, "jobs": self.jobs,
            "produce": produce,
            "produce_batch": self.jobs / self.produce_batch_s if self.produce_batch_s else None,
            "set_pipeline": self.jobs / self.set_pipeline_s if self.set_pipeline_s else None,
            "consume": consume, "consume_jobs": self.consume_jobs,
            "roundtrip": 1.0 / (1.0 / produce + 1.0 / consume),
            "memory_per_job": self.memory_bytes / self.jobs,
            "batch_how": self.batch_how, "notes": self.notes,
        }


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def _chunks(count: int) -> list[int]:
    return [min(BATCH, count - i) for i in range(0, count, BATCH)]


# --- echomq ------------------------------------------------------------------------------------

def echomq(port: int, jobs: int, wire: int) -> Figures:
    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    queue = Queue(conn, "bench", wire=wire)
    load_scripts(conn)
    queue.counts()
    fig = Figures(f"echomq wire={wire}", "0.1.0 (checkout)", jobs,
                  batch_how=f"enqueue_many, {BATCH} a flush")
    before = settle_memory(conn)

    def produce() -> None:
        for _ in range(jobs):
            queue.enqueue(new_job_id(), PAYLOAD)

    def consume() -> int:
        done = 0
        while (job := queue.claim(lease_ms=30_000)) is not None:
            queue.ack(job)
            done += 1
        return done

    fig.produce_s, _ = _timed(produce)
    fig.memory_bytes = settle_memory(conn) - before
    fig.consume_s, fig.consume_jobs = _timed(consume)
    conn.flushall()
    batched, sets = [], []
    for _ in range(BATCH_REPS):  # side by side: each run of the batch, then the same in SETs
        batched.append(_batched(conn, queue, jobs))
        sets.append(_set_pipeline(conn, jobs))
    fig.produce_batch_s, fig.set_pipeline_s = statistics.median(batched), statistics.median(sets)
    fig.notes.append(f"batched: the median of {BATCH_REPS} timed runs; beside each, a redis-py "
                     f"pipeline of the same jobs as plain SETs ({BATCH} a pipeline)")
    conn.close()
    return fig


def _batched(conn: redis.Redis, queue: Queue, jobs: int) -> float:
    elapsed, _ = _timed(lambda: [
        queue.enqueue_many([(new_job_id(), PAYLOAD) for _ in range(size)])
        for size in _chunks(jobs)])
    conn.flushall()
    return elapsed


def _set_pipeline(conn: redis.Redis, jobs: int) -> float:
    """The floor a batch is held to: the same number of plain ``SET <id> noop``, a redis-py
    pipeline of ``BATCH`` (the batch's own chunks), new ids made as the batch makes them."""
    def sets() -> None:
        for size in _chunks(jobs):
            pipe = conn.pipeline(transaction=False)
            for _ in range(size):
                pipe.set(new_job_id(), PAYLOAD)
            pipe.execute()
    elapsed, _ = _timed(sets)
    conn.flushall()
    return elapsed


def echomq_tasks(port: int, jobs: int) -> Figures:
    """The task layer, as the peers are measured: ``noop.enqueue()`` one call per job (the
    memory a pending task job holds: its row with its envelope), ``enqueue_many`` batched, and
    one ``Consumer`` draining with ``app.handler``."""
    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    load_scripts(conn)
    app = App(conn, "bench", wire=6, check_policy=False)
    task = app.task(noop)
    app.queue.counts()
    fig = Figures("echomq tasks wire=6", "0.1.0 (checkout)", jobs,
                  batch_how=f"task.enqueue_many, {BATCH} a flush")
    before = settle_memory(conn)
    fig.produce_s, _ = _timed(lambda: [task.enqueue() for _ in range(jobs)])
    fig.memory_bytes = settle_memory(conn) - before
    consumer = Consumer(app.queue, app.handler)
    fig.consume_s, fig.consume_jobs = _timed(consumer.drain)
    consumer.close()
    conn.flushall()
    fig.produce_batch_s, _ = _timed(lambda: [task.enqueue_many([()] * size)
                                             for size in _chunks(jobs)])
    conn.flushall()
    conn.close()
    return fig


# --- RQ ----------------------------------------------------------------------------------------

def rq(port: int, jobs: int, forking: bool = False) -> Figures:
    from rq import Queue as RQQueue, SimpleWorker, Worker

    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    queue = RQQueue("bench", connection=conn)
    name = "rq (Worker: fork per job)" if forking else "rq (SimpleWorker)"
    fig = Figures(name, version("rq"), jobs, batch_how=f"Queue.enqueue_many, {BATCH} a pipeline")
    before = settle_memory(conn)
    fig.produce_s, _ = _timed(lambda: [queue.enqueue(noop) for _ in range(jobs)])
    fig.memory_bytes = settle_memory(conn) - before
    worker_class = Worker if forking else SimpleWorker
    worker = worker_class([queue], connection=conn)
    fig.consume_s, _ = _timed(lambda: worker.work(burst=True, logging_level="WARNING"))
    fig.consume_jobs = jobs
    if len(queue) != 0:
        raise RuntimeError("rq: the worker left jobs behind")
    conn.flushall()

    def batched() -> float:
        elapsed, _ = _timed(lambda: [
            queue.enqueue_many([RQQueue.prepare_data(noop) for _ in range(size)])
            for size in _chunks(jobs)])
        conn.flushall()
        return elapsed

    fig.produce_batch_s = statistics.median(batched() for _ in range(BATCH_REPS))
    fig.notes.append(f"batched: the median of {BATCH_REPS} timed runs, as echomq's")
    return fig


# --- arq ---------------------------------------------------------------------------------------

def arq(port: int, jobs: int) -> Figures:
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    settings = RedisSettings(host="127.0.0.1", port=port)
    fig = Figures("arq", version("arq"), jobs, batch_how="no bulk API")

    async def main() -> None:
        pool = await create_pool(settings)
        await pool.flushall()
        before = settle_memory(redis.Redis(host="127.0.0.1", port=port))
        started = time.perf_counter()
        for _ in range(jobs):
            await pool.enqueue_job("noop")
        fig.produce_s = time.perf_counter() - started
        fig.memory_bytes = settle_memory(redis.Redis(host="127.0.0.1", port=port)) - before
        worker = Worker(functions=[func(anoop, name="noop")], redis_settings=settings,
                        burst=True, handle_signals=False, poll_delay=0.01)
        started = time.perf_counter()
        await worker.main()
        fig.consume_s = time.perf_counter() - started
        fig.consume_jobs = worker.jobs_complete
        await worker.close()
        await pool.flushall()
        await pool.aclose()

    asyncio.run(main())
    return fig


# --- Celery ------------------------------------------------------------------------------------

def celery(port: int, jobs: int) -> Figures:
    url = f"redis://127.0.0.1:{port}/0"
    os.environ["BENCH_BROKER"] = url
    from celery import group

    from bench.peers.celery_app import app, noop as task

    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    fig = Figures("celery", version("celery"), jobs,
                  batch_how=f"group(...).apply_async(), {BATCH} a group")
    with app.producer_or_acquire() as warm:  # open the broker connection before timing
        warm.connection.ensure_connection()
    task.delay()
    _drain_queue_keys(conn)
    before = settle_memory(conn)
    fig.produce_s, _ = _timed(lambda: [task.delay() for _ in range(jobs)])
    fig.memory_bytes = settle_memory(conn) - before
    worker = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "celery"), "-A",
         "bench.peers.celery_app", "worker", "--pool=solo", "--concurrency=1", "-Q", "idle",
         "-l", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        env={**os.environ, "BENCH_BROKER": url}, cwd=os.getcwd(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=0.5):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("celery worker did not start")
        started = time.perf_counter()
        app.control.add_consumer("bench", reply=False)
        while conn.llen("bench") or conn.hlen("unacked"):
            time.sleep(0.002)
        fig.consume_s = time.perf_counter() - started
        fig.consume_jobs = jobs
    finally:
        worker.terminate()
        worker.wait(30)
    conn.flushall()
    fig.produce_batch_s, _ = _timed(lambda: [
        group(task.s() for _ in range(size)).apply_async() for size in _chunks(jobs)])
    fig.notes.append("consume timed from add_consumer on a started worker (startup excluded)")
    conn.flushall()
    return fig


def _drain_queue_keys(conn: redis.Redis) -> None:
    conn.delete("bench", "unacked", "unacked_index")


# --- Dramatiq ----------------------------------------------------------------------------------

def dramatiq(port: int, jobs: int) -> Figures:
    import dramatiq as dq
    from dramatiq.brokers.redis import RedisBroker

    conn = redis.Redis(host="127.0.0.1", port=port)
    conn.flushall()
    broker = RedisBroker(host="127.0.0.1", port=port)
    dq.set_broker(broker)
    actor = dq.actor(noop, actor_name="noop", queue_name="bench", broker=broker)
    fig = Figures("dramatiq", version("dramatiq"), jobs,
                  batch_how=f"group(...).run(), {BATCH} a group")
    before = settle_memory(conn)
    fig.produce_s, _ = _timed(lambda: [actor.send() for _ in range(jobs)])
    fig.memory_bytes = settle_memory(conn) - before
    worker = dq.Worker(broker)

    def consume() -> None:
        worker.start()
        broker.join("bench", interval=2)
        worker.join()

    fig.consume_s, _ = _timed(consume)
    fig.consume_jobs = jobs
    worker.stop()
    conn.flushall()
    fig.produce_batch_s, _ = _timed(lambda: [
        dq.group(actor.message() for _ in range(size)).run() for size in _chunks(jobs)])
    conn.flushall()
    broker.close()
    return fig


# --- BullMQ (Python) ---------------------------------------------------------------------------

def bullmq(port: int, jobs: int) -> Figures:
    from bullmq import Queue as BQueue, Worker as BWorker

    url = f"redis://127.0.0.1:{port}"
    opts = {"removeOnComplete": True}
    fig = Figures("bullmq (python)", version("bullmq"), jobs,
                  batch_how=f"Queue.addBulk, {BATCH} a call")
    conn = redis.Redis(host="127.0.0.1", port=port)

    async def main() -> None:
        conn.flushall()
        queue = BQueue("bench", {"connection": url})
        await queue.add("noop", {}, opts)
        conn.flushall()
        before = settle_memory(conn)
        started = time.perf_counter()
        for _ in range(jobs):
            await queue.add("noop", {}, opts)
        fig.produce_s = time.perf_counter() - started
        fig.memory_bytes = settle_memory(conn) - before
        done = asyncio.Event()
        seen = 0

        async def process(job: Any, token: str) -> None:
            nonlocal seen
            seen += 1
            if seen >= jobs:
                done.set()

        started = time.perf_counter()
        worker = BWorker("bench", process, {"connection": url})
        await done.wait()
        fig.consume_s = time.perf_counter() - started
        fig.consume_jobs = seen
        await worker.close()
        conn.flushall()
        started = time.perf_counter()
        for size in _chunks(jobs):
            await queue.addBulk([{"name": "noop", "data": {}, "opts": opts}] * size)
        fig.produce_batch_s = time.perf_counter() - started
        await queue.close()
        conn.flushall()

    asyncio.run(main())
    return fig


SYSTEMS: dict[str, Callable[[int, int], Figures]] = {
    "echomq wire=6": lambda port, n: echomq(port, n, 6),
    "echomq wire=5": lambda port, n: echomq(port, n, 5),
    "echomq tasks wire=6": echomq_tasks,
    "rq (SimpleWorker)": lambda port, n: rq(port, n),
    "rq (Worker: fork per job)": lambda port, n: rq(port, max(200, n // 10), forking=True),
    "arq": arq,
    "celery": celery,
    "dramatiq": dramatiq,
    "bullmq (python)": bullmq,
}
