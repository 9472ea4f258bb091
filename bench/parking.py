"""``python -m bench.parking``: what parked consumers cost the wire, and what recovery costs.

Three measurements on each wire, each on a fresh server state, consumers with their defaults:

- idle: 4 consumers parked on an empty queue for ``--idle-s`` (at least the park cap, 75 s,
  for the figure to mean anything): the server's own count of commands (``INFO commandstats``, a
  script's inner calls included on ``wire=5``) per consumer per second;
- recovery: 5,000 leases of a worker that died (lease 100 ms) ahead of ``--pending`` pending jobs,
  one consumer running: how long after the leases expired the last of them left ``active``
  (server clock), and the rate of recover itself (``Queue.recover_due`` on 5,000
  expired leases: steps of 1,000, wall time);
- lease back: a holder process takes a job (lease 1 s) and 50 consumers park beside it, idle past
  the lease and the housekeeping interval; the holder is SIGKILLed: how long after its lease
  expired (its last heartbeat's deadline, server clock) one of the 50 ran the job (bound:
  ``housekeeping_ms``, 1 s by default);
- wake one: 200 consumers parked, then ``--enqueues`` jobs one at a time (each handled and the
  crowd parked again before the next): claims that came back empty, and BLPOPs, per enqueue.

Measured, not asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from bench.common import running_server
from echomq import Consumer, Job, Queue
from echomq.consumer.blocking import server_ms
from echomq.consumer.loop import HOUSEKEEPING_MS

LOST = 5_000
LOST_LEASE_MS = 100
CROWD = 200
IDLE_CONSUMERS = 4
PARKED = 50
HOLDER_LEASE_MS = 1_000
HOLDER = """
import sys, time
import redis
from echomq import Consumer, Queue
conn = redis.Redis(port=int(sys.argv[1]))
def handler(job):
    conn.set("holding", job.id)
    time.sleep(600)
Consumer(Queue(conn, "held", wire=int(sys.argv[2])), handler, lease_ms=int(sys.argv[3])).run()
"""


def calls(conn: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(row["calls"])
            for name, row in conn.info("commandstats").items() if name != "cmdstat_info"}


def spent(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: n - before.get(name, 0) for name, n in after.items()}


def blocked(conn: redis.Redis) -> int:
    return int(conn.info("clients")["blocked_clients"])


def until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Running:
    """Consumers run in threads for a with-block, stopped and closed at its end."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = consumers
        self.threads = [threading.Thread(target=c.run, daemon=True) for c in consumers]

    def __enter__(self) -> Running:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for consumer in self.consumers:
            consumer.stop()
        for thread in self.threads:
            thread.join(30)
        for consumer in self.consumers:
            consumer.close()


def idle(conn: redis.Redis, wire: int, window_s: float) -> dict[str, Any]:
    conn.flushall()
    queue = Queue(conn, "idle", wire=wire)
    with Running([Consumer(queue, lambda job: None) for _ in range(IDLE_CONSUMERS)]):
        until(lambda: blocked(conn) == IDLE_CONSUMERS, 30)
        time.sleep(1.0)
        before = calls(conn)
        time.sleep(window_s)
        delta = spent(before, calls(conn))
    total = sum(delta.values())
    return {"window_s": window_s, "commands": total,
            "per_consumer_per_s": total / IDLE_CONSUMERS / window_s,
            "blpop": delta.get("blpop", 0)}


def lost_leases(conn: redis.Redis, queue: Queue, pending: int) -> int:
    """5,000 leases of a dead worker, ahead of ``pending`` pending jobs: their deadline (ms)."""
    conn.flushall()
    for first in range(0, LOST, 1_000):
        queue.enqueue_many([(f"JOB:lost{n}", b"x") for n in range(first, first + 1_000)])
    for first in range(0, pending, 1_000):
        queue.enqueue_many([(f"JOB:p{n}", b"x") for n in range(first, first + 1_000)])
    assert len(queue.claim_many(LOST, lease_ms=LOST_LEASE_MS)) == LOST  # the oldest: the lost
    return server_ms(conn) + LOST_LEASE_MS


def recovery(conn: redis.Redis, wire: int, pending: int) -> dict[str, Any]:
    queue = Queue(conn, "backlog", wire=wire)
    expires_at = lost_leases(conn, queue, pending)
    with Running([Consumer(queue, lambda job: None)]):
        until(lambda: conn.zcount(queue.key("active"), "-inf", expires_at) == 0, 60)
        back = server_ms(conn)
    lost_leases(conn, queue, 0)
    time.sleep(LOST_LEASE_MS / 1000 * 2)
    started = time.perf_counter()
    recovered, _, _ = queue.recover_due()
    took = time.perf_counter() - started
    return {"pending": pending, "after_expiry_ms": max(0, back - expires_at),
            "recovered": recovered, "recover_s": took, "rate_per_s": recovered / took}


def crowd_client(conn: redis.Redis, consumers: int) -> redis.Redis:
    """A client whose pool has room for ``consumers`` parked consumers and their pipelines."""
    return redis.Redis(connection_pool=redis.ConnectionPool(
        max_connections=4 * consumers, **conn.connection_pool.connection_kwargs))


def lease_back(conn: redis.Redis, wire: int) -> dict[str, Any]:
    """A holder process SIGKILLed with a job in hand, 50 consumers parked beside it: how long
    after its lease expired the job ran again (server clock)."""
    conn.flushall()
    shared = crowd_client(conn, PARKED)
    queue = Queue(shared, "held", wire=wire)
    ran: list[int] = []
    port = conn.connection_pool.connection_kwargs["port"]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(port), str(wire),
                               str(HOLDER_LEASE_MS)])
    try:
        until(lambda: blocked(conn) == 1, 30)
        queue.enqueue("JOB:held", b"x")
        until(lambda: conn.get("holding") == b"JOB:held", 30)
        with Running([Consumer(queue, lambda job: ran.append(server_ms(conn)))
                      for _ in range(PARKED)]):
            until(lambda: blocked(conn) >= PARKED and not conn.llen(queue.key("watch")), 60)
            # Idle past the lease and the housekeeping interval, the holder heartbeating.
            time.sleep((HOLDER_LEASE_MS + HOUSEKEEPING_MS) / 1000 + 0.5)
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
            expires_at = int(float(conn.zscore(queue.key("active"), "JOB:held") or 0))
            until(lambda: bool(ran), 30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
        shared.close()
    return {"parked": PARKED, "lease_ms": HOLDER_LEASE_MS, "bound_ms": HOUSEKEEPING_MS,
            "after_expiry_ms": max(0, ran[0] - expires_at) if ran and expires_at else None}


class CountingQueue(Queue):
    """A queue that counts the claims coming back empty."""

    empty = 0
    taken = 0

    def settle_leased(self, *args: Any, **options: Any) -> Any:
        verdicts, jobs = super().settle_leased(*args, **options)
        if args[1]:
            CountingQueue.empty += not jobs
            CountingQueue.taken += len(jobs)
        return verdicts, jobs


def wake_one(conn: redis.Redis, wire: int, enqueues: int) -> dict[str, Any]:
    conn.flushall()
    shared = crowd_client(conn, CROWD)
    queue = CountingQueue(shared, "crowd", wire=wire)
    handled = threading.Semaphore(0)

    def handler(job: Job) -> None:
        handled.release()

    with Running([Consumer(queue, handler) for _ in range(CROWD)]):
        until(lambda: blocked(conn) == CROWD, 120)
        CountingQueue.empty = CountingQueue.taken = 0
        before = calls(conn)
        for n in range(enqueues):
            queue.enqueue(f"JOB:{n}", b"x")
            handled.acquire(timeout=30)
            until(lambda: blocked(conn) == CROWD and not conn.llen(queue.key("watch")), 30)
        delta = spent(before, calls(conn))
    shared.close()
    return {"enqueues": enqueues, "empty_claims_per_enqueue": CountingQueue.empty / enqueues,
            "jobs_taken": CountingQueue.taken, "blpop_per_enqueue": delta["blpop"] / enqueues}


def run(conn: redis.Redis, idle_s: float, pending: int, enqueues: int) -> dict[str, Any]:
    return {str(wire): {"idle": idle(conn, wire, idle_s), "recovery": recovery(conn, wire, pending),
                        "lease_back": lease_back(conn, wire),
                        "wake_one": wake_one(conn, wire, enqueues)} for wire in (5, 6)}


def phase(conn: redis.Redis, config: dict[str, Any]) -> dict[str, Any]:
    """The ``parking`` phase of ``python -m bench``, on the bench's server."""
    return run(conn, config["parking_idle_s"], config["parking_pending"],
               config["parking_enqueues"])


def report_section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of the ``parking`` phase (the rows of ``results["parking"]``)."""
    return "\n".join([
        "## Parking: idle cost, a lease back after SIGKILL, recovery, wake one",
        "",
        f"Consumers with their defaults (park cap 75 s): {IDLE_CONSUMERS} idle consumers "
        "on an empty queue (the server's own command count, scripts' inner calls included); "
        f"a holder process SIGKILLed with a job in hand (lease {HOLDER_LEASE_MS:,} ms) while "
        f"{PARKED} consumers park beside it, how long after the lease expired one of them ran "
        f"the job (server clock; bound `housekeeping_ms`, {HOUSEKEEPING_MS:,} ms); {LOST:,} "
        "leases of a dead worker expired ahead of a backlog, one consumer running (server "
        f"clock); {CROWD} consumers parked, one enqueue at a time.",
        "",
        section(results["parking"]),
    ])


def _lease_back(row: dict[str, Any] | None) -> str:
    if not row:
        return "—"
    if row["after_expiry_ms"] is None:
        return "never came back"
    return f"{row['after_expiry_ms']:,} ms ({row['parked']} parked)"


def section(results: dict[str, Any]) -> str:
    rows = []
    for wire, r in results.items():
        i, rec, w = r["idle"], r["recovery"], r["wake_one"]
        rows.append(f"| {wire} | {i['per_consumer_per_s']:.3f} ({i['commands']} in "
                    f"{i['window_s']:.0f} s, {IDLE_CONSUMERS} consumers) | "
                    f"{_lease_back(r.get('lease_back'))} | {rec['after_expiry_ms']} ms "
                    f"({LOST:,} leases, {rec['pending']:,} pending) | "
                    f"{rec['rate_per_s']:,.0f} | {w['empty_claims_per_enqueue']:.2f} | "
                    f"{w['blpop_per_enqueue']:.2f} |")
    return "\n".join([
        "| wire | idle: commands/s per consumer | SIGKILLed holder's lease run again, after "
        f"expiry | last expired lease out of `active`, after expiry | recover: leases/s | "
        f"empty claims per enqueue ({CROWD} parked) | BLPOPs per enqueue |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.parking", description=__doc__)
    parser.add_argument("--idle-s", type=float, default=80.0)
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--enqueues", type=int, default=10)
    args = parser.parse_args(argv)
    with running_server() as server:
        print(section(run(server.client(), args.idle_s, args.pending, args.enqueues)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
