"""``echomq demo``: a minute on an embedded valkey-server with trafikey loaded.

A greedy tenant floods the queue, a few small tenants add a little work after it, a capped tenant
whose lane may run one job at a time (its concurrency limit) adds some too, and worker threads
drain everything while a live line shows progress. It runs twice: on fair lanes (scripts,
``wire=5``: lanes have no native twin) and on the flat FIFO queue through the native module
(``wire=6``). The summary shows how long each tenant waited for its last job, the most jobs of the
capped tenant that ran at once (the limit holds on lanes; the flat queue has none), and the
throughput.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from echomq.consumer.blocking import Consumer
from echomq.embedded import EmbeddedValkey
from echomq.engine.wire import Wire
from echomq.queue.blocking import Job, Queue

Say = Callable[[str], None]
# Called between the demo's steps; raises to stop it (a SIGTERM noted by the command).
Check = Callable[[], None]
GREEDY = "greedy"
CAPPED = "capped"
CAPPED_LIMIT = 1


@dataclass
class Run:
    """What one pass of the demo saw."""

    label: str
    total: int
    started: float = field(default_factory=time.monotonic)
    done: Counter[str] = field(default_factory=Counter)
    finished_at: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_done: threading.Event = field(default_factory=threading.Event)
    running: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)

    def starts(self, job: Job) -> None:
        """A handler starts ``job``: count its tenant's jobs running at once."""
        tenant = job.payload.decode()
        with self.lock:
            self.running[tenant] += 1
            self.peak[tenant] = max(self.peak[tenant], self.running[tenant])

    def ends(self, job: Job) -> None:
        with self.lock:
            self.running[job.payload.decode()] -= 1

    def record(self, job: Job, expected: Counter[str]) -> None:
        tenant = job.payload.decode()
        with self.lock:
            self.done[tenant] += 1
            if self.done[tenant] == expected[tenant]:
                self.finished_at[tenant] = time.monotonic() - self.started
            if sum(self.done.values()) == self.total:
                self.all_done.set()

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def _workload(greedy_jobs: int, tenants: int, per_tenant: int) -> list[tuple[str, str]]:
    """(job id, tenant) in the order they are enqueued: the greedy tenant's flood first."""
    work = [(f"JOB:{GREEDY}-{n:06d}", GREEDY) for n in range(greedy_jobs)]
    for t in range(tenants):
        work += [(f"JOB:t{t}-{n:05d}", f"tenant-{t}") for n in range(per_tenant)]
    return work + [(f"JOB:{CAPPED}-{n:05d}", CAPPED) for n in range(per_tenant)]


def _enqueue(queue: Queue, work: list[tuple[str, str]], lanes: bool, check: Check) -> None:
    for start in range(0, len(work), 500):
        check()
        batch = work[start:start + 500]
        if lanes:
            queue.enqueue_many([(job_id, tenant.encode(), tenant) for job_id, tenant in batch])
        else:
            queue.enqueue_many([(job_id, tenant.encode()) for job_id, tenant in batch])


def _progress(run: Run, expected: Counter[str], say_line: Callable[[str], None],
              check: Check) -> None:
    while not run.all_done.wait(0.25):
        check()
        with run.lock:
            done = sum(run.done.values())
            left = {t: expected[t] - run.done[t] for t in expected}
        rate = done / max(run.elapsed(), 1e-9)
        lanes = " ".join(f"{t}:{n}" for t, n in left.items())
        say_line(f"  {run.label}: {done}/{run.total} done, {rate:,.0f} jobs/s | left {lanes}")


def _one_pass(server: EmbeddedValkey, label: str, wire: int, lanes: bool,
              work: list[tuple[str, str]], workers: int, say_line: Callable[[str], None],
              check: Check) -> Run:
    expected = Counter(tenant for _, tenant in work)
    admin = server.client()
    queue = Queue(admin, f"demo-{label}", wire=wire)
    if lanes:
        queue.set_lane(CAPPED, concurrency=CAPPED_LIMIT)
    _enqueue(queue, work, lanes, check)
    run = Run(label, len(work))

    def handler(job: Job) -> None:
        run.starts(job)
        time.sleep(0.001)  # a little work, as a real job would do
        run.ends(job)

    consumers = [Consumer(Queue(server.client(), queue.name, wire=wire, check_policy=False),
                          handler, lanes=lanes, park_cap_ms=200,
                          on_ack=lambda job: run.record(job, expected))
                 for _ in range(workers)]
    threads = [threading.Thread(target=c.run, daemon=True) for c in consumers]
    run.started = time.monotonic()
    for thread in threads:
        thread.start()
    _progress(run, expected, say_line, check)
    for consumer in consumers:
        consumer.stop()
    for thread in threads:
        thread.join(timeout=10)
    admin.close()
    return run


def _line_writer(say: Say) -> Callable[[str], None]:
    if sys.stdout.isatty():
        return lambda text: print("\r" + text.ljust(110)[:110], end="", flush=True)
    last = [0.0]

    def every_second(text: str) -> None:
        if time.monotonic() - last[0] >= 1.0:
            last[0] = time.monotonic()
            say(text)

    return every_second


def _summary(runs: list[Run], say: Say) -> None:
    tenants = list(runs[0].finished_at)
    say("")
    say("each tenant's wait for its last job (s):")
    say("  " + "tenant".ljust(12) + "".join(run.label.rjust(22) for run in runs))
    for tenant in sorted(tenants, key=lambda t: (t == GREEDY, t)):
        cells = "".join(f"{run.finished_at.get(tenant, float('nan')):22.2f}" for run in runs)
        say("  " + tenant.ljust(12) + cells)
    say(f"most '{CAPPED}' jobs running at once (its lane's limit: {CAPPED_LIMIT}):  " + ",  ".join(
        f"{run.label} {run.peak[CAPPED]}" for run in runs))
    say("throughput (jobs/s):  " + ",  ".join(
        f"{run.label} {run.total / max(run.finished_at.values()):,.0f}" for run in runs))


def run_demo(greedy_jobs: int = 6_000, tenants: int = 5, per_tenant: int = 100,
             workers: int = 4, say: Say = print, check: Check = lambda: None) -> list[Run]:
    """Run the demonstration; returns what each pass saw. ``check`` is called between its steps
    (each batch enqueued, each progress line) and may raise to stop it."""
    work = _workload(greedy_jobs, tenants, per_tenant)
    with EmbeddedValkey(prefer="wheel") as server:
        conn: redis.Redis = server.client()
        version = conn.info("server")["valkey_version"]
        conn.close()
        say(f"valkey-server {version} at {server.url}, trafikey loaded; "
            f"{greedy_jobs} jobs from '{GREEDY}' enqueued before {tenants}x{per_tenant} from "
            f"small tenants; {workers} workers")
        runs = []
        for label, wire, lanes in (("lanes, wire=5", Wire.SCRIPTS, True),
                                   ("flat FIFO, wire=6", Wire.NATIVE, False)):
            runs.append(_one_pass(server, label, wire, lanes, work, workers, _line_writer(say),
                                  check))
            if sys.stdout.isatty():
                print()
            say(f"  {label}: {len(work)} jobs in {max(runs[-1].finished_at.values()):.2f} s")
    _summary(runs, say)
    say("On lanes the small tenants are served in turn with the greedy one and finish at once; "
        "in one FIFO they wait behind its whole flood.")
    return runs
