"""Supervised worker processes, driven through the ``echomq worker`` command.

The handlers live in ``tests/handlers.py``; ``--on-ack tests.handlers:acked`` records each
(id, attempt) only after its ack returned ACKED, so "acked exactly once" is read off the server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from echomq import Queue
from echomq.cli import main
from echomq.embedded import EmbeddedValkey
from echomq.worker import WorkerSpec, check_spec, load_callable

ROOT = Path(__file__).resolve().parent.parent


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class Workers:
    """An ``echomq worker`` supervisor in a subprocess, its log in a file."""

    def __init__(self, server: EmbeddedValkey, log: Path, queue: str, *options: str) -> None:
        self.log_path = log
        argv = [sys.executable, "-m", "echomq", "worker", "tests.handlers:work",
                "--on-ack", "tests.handlers:acked", "--queue", queue, *options]
        env = {**os.environ, "ECHOMQ_URL": server.url}
        with log.open("wb") as sink:
            self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                            stdout=sink, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, within: float) -> int:
        """SIGTERM the supervisor; its exit code, which must come within ``within`` seconds."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(within)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the supervisor did not exit within {within} s:\n{self.log()}")
        assert time.monotonic() - started < within
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # its workers follow (they die with their parent)
            self.process.wait()


@pytest.fixture
def workers(valkey: EmbeddedValkey, conn: redis.Redis,
            tmp_path: Path) -> Iterator[Callable[..., Workers]]:
    started: list[Workers] = []

    def start(queue: str, *options: str) -> Workers:
        supervisor = Workers(valkey, tmp_path / f"workers-{len(started)}.log", queue, *options)
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.close()


def blocked_clients(conn: redis.Redis) -> int:
    return int(conn.info("clients")["blocked_clients"])


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def assert_each_acked_once(conn: redis.Redis, queue: Queue, ids: list[str]) -> None:
    acked = {as_text(key): int(count) for key, count in conn.hgetall("test:acked").items()}
    assert acked == dict.fromkeys(ids, 1)
    attempts = {as_text(entry).rsplit("@", 1)[0]
                for entry in conn.smembers("test:attempts")}
    assert attempts == set(ids) and conn.scard("test:attempts") == len(ids)
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}


def test_a_killed_worker_loses_nothing_and_is_restarted(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    queue = Queue(conn, "kill")
    ids = [f"JOB:{n:03d}" for n in range(301)]
    payloads = [b"victim" if n == 100 else b"sleep:5" for n in range(301)]
    supervisor = workers("kill", "--concurrency", "3", "--lease-ms", "1000", "--grace", "5")
    queue.enqueue_many(list(zip(ids, payloads, strict=True)))
    assert wait_until(lambda: conn.get("test:victim") is not None, 20), supervisor.log()
    victim = int(conn.get("test:victim") or 0)
    os.kill(victim, signal.SIGKILL)  # in the middle of its job, the others busy with theirs
    assert wait_until(lambda: conn.hlen("test:acked") == len(ids), 30), supervisor.log()
    assert supervisor.terminate(within=6) == 0
    assert_each_acked_once(conn, queue, ids)
    assert conn.sismember("test:attempts", "JOB:100@2")  # the victim's job came back once
    log = supervisor.log()
    assert f"pid {victim}) exited with -9" in log
    assert "worker restarted" in log


def test_sigterm_lets_running_jobs_finish_then_exits_0(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    queue = Queue(conn, "term")
    supervisor = workers("term", "--concurrency", "2", "--grace", "5")
    queue.enqueue_many([("JOB:a", b"started:1000"), ("JOB:b", b"started:1000"),
                        ("JOB:c", b"")])
    assert wait_until(lambda: conn.llen("test:started") == 2, 20), supervisor.log()
    assert supervisor.terminate(within=5) == 0
    acked = set(conn.hkeys("test:acked"))
    assert {b"JOB:a", b"JOB:b"} <= acked  # both finished within the grace period
    counts = queue.counts()
    assert counts["active"] == 0 and counts["pending"] == len({b"JOB:c"} - acked)


def test_a_job_outliving_the_grace_period_comes_back_through_its_lease(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    queue = Queue(conn, "grace")
    supervisor = workers("grace", "--concurrency", "1", "--grace", "0.5",
                         "--lease-ms", "2000")
    queue.enqueue("JOB:stuck", b"started:30000")
    assert wait_until(lambda: conn.llen("test:started") == 1, 20), supervisor.log()
    assert supervisor.terminate(within=3) == 0
    assert "still running after the grace period" in supervisor.log()
    assert queue.counts()["active"] == 1
    seconds, micros = conn.time()
    assert queue.recover(now=seconds * 1000 + micros // 1000 + 2_000) == 1
    job = queue.claim()
    assert job is not None and job.id == "JOB:stuck" and job.attempt == 2


@pytest.mark.slow
def test_a_burst_over_50_lanes_is_acked_once_each(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    queue = Queue(conn, "burst")
    supervisor = workers("burst", "--lanes", "--concurrency", "4", "--lease-ms", "2000",
                         "--grace", "5")
    assert wait_until(lambda: blocked_clients(conn) >= 4, 20), supervisor.log()
    ids = [f"JOB:{n:05d}" for n in range(10_000)]
    for first in range(0, len(ids), 1_000):
        queue.enqueue_many([(job_id, b"", f"lane-{n % 50}")
                            for n, job_id in enumerate(ids[first:first + 1_000], first)])
    assert wait_until(lambda: conn.hlen("test:acked") == len(ids), 60), supervisor.log()
    assert supervisor.terminate(within=6) == 0
    assert_each_acked_once(conn, queue, ids)


# the command line --------------------------------------------------------------------------


def test_the_command_refuses_a_lane_worker_on_wire6() -> None:
    result = CliRunner().invoke(main, ["worker", "tests.handlers:work", "--queue", "q",
                                       "--lanes", "--wire", "6"])
    assert result.exit_code == 2
    assert "gclaim2" in result.output


def test_the_command_refuses_a_handler_it_cannot_import() -> None:
    for target in ("tests.handlers:missing", "tests.nowhere:work", "no-colon"):
        result = CliRunner().invoke(main, ["worker", target, "--queue", "q"])
        assert result.exit_code == 2, target


def test_specs_load_their_handlers() -> None:
    spec = WorkerSpec(handler="tests.handlers:work", queue="q", url="redis://x",
                      on_ack="tests.handlers:acked")
    check_spec(spec)
    assert load_callable("tests.handlers:work").__name__ == "work"
