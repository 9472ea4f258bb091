"""Worker processes under handlers that misbehave, driven through the ``echomq worker`` command:
a handler calling ``sys.exit()`` fails its attempt and its process is replaced; a job that kills
its process on a short lease ends dead alone while the supervisor carries on; what a handler
starts inherits no blocked signal. The handlers are ``tests.worker_handlers:misbehave`` and its
all-async App; each job notes ``<id>@<attempt>`` in ``test:starts`` as it starts.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from echomq import Queue
from echomq.ops import admin
from tests import test_worker
from tests.test_worker import Workers, as_text, wait_until

workers = test_worker.workers  # the fixture: ``echomq worker`` supervisors, closed after

TARGETS = {"sync": "tests.worker_handlers:misbehave", "async": "tests.worker_handlers:exiting_app"}


def starts(conn: redis.Redis) -> list[str]:
    return [as_text(entry) for entry in conn.lrange("test:starts", 0, -1)]


def acked(conn: redis.Redis) -> dict[str, int]:
    return {as_text(key): int(count) for key, count in conn.hgetall("test:acked").items()}


@pytest.mark.parametrize(("shell", "wire"), [("sync", 5), ("async", 6)])
def test_a_handler_calling_sys_exit_fails_its_attempt_and_its_worker_is_replaced(
        conn: redis.Redis, workers: Callable[..., Workers], shell: str, wire: int) -> None:
    """One worker process: the job that exits is retried and acked, every later job is served
    by the process that replaced it, and the supervisor never gives up."""
    queue = Queue(conn, "exits", wire=wire)
    ids = [f"JOB:{n}" for n in range(6)]
    queue.enqueue_many([("JOB:0", b"exit"), *[(job_id, b"") for job_id in ids[1:]]])
    supervisor = workers("exits", "--concurrency", "1", "--wire", str(wire),
                         "--retry-delay-ms", "0", handler=TARGETS[shell])
    assert wait_until(lambda: len(acked(conn)) == len(ids), 30), supervisor.log()
    assert acked(conn) == dict.fromkeys(ids, 1)
    assert conn.sismember("test:attempts", "JOB:0@2")  # the failed attempt, then the next
    assert supervisor.process.poll() is None, supervisor.log()
    log = supervisor.log()
    assert "SystemExit" in log and "worker restarted" in log
    assert "at start" not in log
    assert supervisor.terminate(within=10) == 0


@pytest.mark.parametrize("wire", [6])
def test_a_job_that_kills_its_worker_on_a_short_lease_ends_dead_alone(
        conn: redis.Redis, workers: Callable[..., Workers], wire: int) -> None:
    """``os._exit`` at every attempt, ``--lease-ms 500``, two processes: each crash comes soon
    after a replacement started, yet a process that started a job is no failed start; the
    poison job goes dead at its last attempt and every other job is acked once."""
    queue = Queue(conn, "poison", wire=wire)
    ids = [f"JOB:{n:02d}" for n in range(20)]
    queue.enqueue_many([("JOB:poison", b"poison"), *[(job_id, b"") for job_id in ids]])
    supervisor = workers("poison", "--concurrency", "2", "--lease-ms", "500", "--wire",
                         str(wire), handler=TARGETS["sync"])
    assert wait_until(lambda: admin.dead_jobs(conn, "poison") != [], 60), supervisor.log()
    assert wait_until(lambda: all(queue.outcome(job_id).state == "done" for job_id in ids),
                      30), supervisor.log()
    (dead,) = admin.dead_jobs(conn, "poison")
    assert dead.id == "JOB:poison" and dead.attempts == queue.max_attempts
    # ``on_ack`` is not asserted: a process killed just after an ack went out never calls it
    assert starts(conn).count("JOB:poison@1") == 1
    assert supervisor.process.poll() is None, supervisor.log()
    assert "at start" not in supervisor.log()
    assert supervisor.terminate(within=10) == 0


def blocked_signals(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigBlk for {pid}")


def ended(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("shell", ["sync", "async"])
def test_what_a_handler_starts_inherits_no_blocked_signal(
        conn: redis.Redis, workers: Callable[..., Workers], shell: str) -> None:
    """A subprocess and a forked child left behind by a job: SIGTERM is not blocked in either
    and ends each of them."""
    Queue(conn, "exits").enqueue("JOB:spawn", b"spawn")
    supervisor = workers("exits", handler=TARGETS[shell])
    assert wait_until(lambda: conn.llen("test:spawned") == 2, 30), supervisor.log()
    pids = [int(pid) for pid in conn.lrange("test:spawned", 0, -1)]
    for pid in pids:
        assert not blocked_signals(pid) & (1 << (signal.SIGTERM - 1)), pid
        os.kill(pid, signal.SIGTERM)
    assert wait_until(lambda: all(ended(pid) for pid in pids), 10)
    assert supervisor.terminate(within=10) == 0
