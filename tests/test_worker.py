"""Supervised worker processes, driven through the ``echomq worker`` command.

The handlers live in ``tests/handlers.py``; ``--on-ack tests.handlers:acked`` records each
(id, attempt) only after its ack returned ACKED, so "acked exactly once" is read off the server.
"""

from __future__ import annotations

import contextlib
import functools
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
from echomq.cli.main import main
from echomq.embedded import EmbeddedValkey, free_port
from echomq.ops import admin
from echomq.worker import (
    QUICK_DEATH_S,
    START_TRIES,
    WorkerSpec,
    build_consumer,
    check_spec,
    load_callable,
)
from tests.conftest import start_server
from tests.process_groups import group
from tests.test_consumer import blocked_clients

ROOT = Path(__file__).resolve().parent.parent


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def reaches(count: Callable[[], int], target: int, stall_s: float) -> bool:
    """Whether ``count`` reaches ``target`` without standing still for ``stall_s``: a bound on
    progress, not on speed (a loaded machine may take as long as it takes)."""
    seen, since = count(), time.monotonic()
    while seen < target:
        time.sleep(0.05)
        now_seen = count()
        if now_seen != seen:
            seen, since = now_seen, time.monotonic()
        elif time.monotonic() - since > stall_s:
            return False
    return True


class Workers:
    """An ``echomq worker`` supervisor in a subprocess, its log in a file."""

    def __init__(self, server: EmbeddedValkey, log: Path, queue: str | None, *options: str,
                 handler: str = "tests.handlers:work", url: str | None = None,
                 on_ack: str | None = "tests.handlers:acked") -> None:
        self.log_path = log
        queues = [] if queue is None else ["--queue", queue]
        hook = [] if on_ack is None else ["--on-ack", on_ack]
        argv = [sys.executable, "-m", "echomq", "worker", handler, *hook, *queues, *options]
        env = {**os.environ, "ECHOMQ_URL": url or server.url}
        with log.open("wb") as sink:
            # A process group of its own: its workers are found by their group, whoever their
            # parent is by then.
            self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                            stdout=sink, stderr=subprocess.STDOUT,
                                            start_new_session=True)

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

    def exit_code(self, within: float) -> int:
        """The supervisor's exit code, which must come by itself within ``within`` seconds."""
        try:
            return self.process.wait(within)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the supervisor did not give up within {within} s:\n{self.log()}")

    def group(self) -> list[int]:
        """The live processes of the supervisor's process group (itself and its workers)."""
        return processes_in_group(self.process.pid)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in self.group():  # a worker that outlived its supervisor fails its test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def processes_in_group(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes whose process group is ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def workers(valkey: EmbeddedValkey, conn: redis.Redis,
            tmp_path: Path) -> Iterator[Callable[..., Workers]]:
    started: list[Workers] = []

    def start(queue: str | None, *options: str, **where: str) -> Workers:
        supervisor = Workers(valkey, tmp_path / f"workers-{len(started)}.log", queue, *options,
                             **where)
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.close()


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
    # the victim waits for the jobs before it to be told acked, so the kill cuts no ``on_ack``
    payloads = [b"victim:100" if n == 100 else b"sleep:5" for n in range(301)]
    supervisor = workers("kill", "--concurrency", "3", "--lease-ms", "1000", "--grace", "5")
    queue.enqueue_many(list(zip(ids, payloads, strict=True)))
    assert wait_until(lambda: conn.get("test:victim") is not None, 20), supervisor.log()
    victim = int(conn.get("test:victim") or 0)
    os.kill(victim, signal.SIGKILL)  # in the middle of its job, the others busy with theirs
    assert reaches(lambda: int(conn.hlen("test:acked")), len(ids), 30), supervisor.log()
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
    assert supervisor.terminate(within=10) == 0
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
    assert supervisor.terminate(within=10) == 0  # not the job's 30 s
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
    assert reaches(lambda: int(conn.hlen("test:acked")), len(ids), 30), supervisor.log()
    assert supervisor.terminate(within=6) == 0
    assert_each_acked_once(conn, queue, ids)


# failures that cannot heal ----------------------------------------------------------------


def test_wire6_without_trafikey_exits_at_once_saying_why(
        workers: Callable[..., Workers], tmp_path: Path) -> None:
    bare = start_server(module=False)
    try:
        supervisor = workers("q", "--wire", "6", url=bare.url)
        assert supervisor.exit_code(within=20) == 1
    finally:
        bare.stop()
    error, hint = supervisor.log().strip().splitlines()
    assert error.startswith("error: ") and "trafikey" in error, error
    assert hint.startswith("hint: ") and "--loadmodule" in hint, hint


def test_an_unreachable_server_exits_at_once_saying_why(workers: Callable[..., Workers]) -> None:
    """The server named without the URL's password."""
    shown = f"redis://127.0.0.1:{free_port()}"
    supervisor = workers("q", url=shown.replace("//", "//:s3cret-word@"))
    assert supervisor.exit_code(within=20) == 1
    error, hint = supervisor.log().strip().splitlines()
    assert error.startswith("error: ") and shown in error and "Connection refused" in error, error
    assert "s3cret-word" not in supervisor.log()
    assert hint.startswith("hint: "), hint


# A tasks module whose App's server is down: it imports (making an App sends nothing).
DOWN_APP = """\
import redis
from echomq import App

app = App(redis.Redis.from_url("redis://:{password}@127.0.0.1:{port}"), queue="mail")


@app.task
def send(to: str) -> None:
    return None
"""


@pytest.mark.parametrize("given_url", [False, True], ids=["own", "url"])
def test_an_app_whose_server_is_down_exits_1_with_one_line(tmp_path: Path,
                                                           given_url: bool) -> None:
    """``echomq worker myapp:app`` (and with ``--url`` naming the App's server): exit 1, one
    line naming the server (never its password) and why, and a hint; no traceback."""
    port, password = free_port(), "s3cret-word"
    (tmp_path / "downapp.py").write_text(DOWN_APP.format(port=port, password=password))
    url = ["--url", f"redis://:{password}@127.0.0.1:{port}"] if given_url else []
    env = {key: value for key, value in os.environ.items() if key != "ECHOMQ_URL"}
    with group([sys.executable, "-m", "echomq", "worker", "downapp:app", *url], grace_s=5,
               cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL,
               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        out, err = process.communicate(timeout=120)
    assert process.returncode == 1, err
    assert out == "" and password not in err
    error, hint = err.strip().splitlines()
    assert error == (f"error: cannot serve queue mail from redis://127.0.0.1:{port}/0: "
                     f"ConnectionError: Error 111 connecting to 127.0.0.1:{port}. "
                     "Connection refused."), error
    assert hint == ("hint: is the server running? the App's connection names it; "
                    "`echomq serve` starts one"), hint


@pytest.fixture
def no_scripts_user(valkey: EmbeddedValkey, conn: redis.Redis) -> Iterator[str]:
    """The URL of a user who may connect and look around but not run scripts."""
    conn.acl_setuser("noscripts", enabled=True, passwords=["+secret"], keys=["*"],
                     channels=["*"], commands=["+@all", "-evalsha", "-eval", "-script"])
    yield f"redis://noscripts:secret@127.0.0.1:{valkey.port}"
    conn.acl_deluser("noscripts")


def test_workers_that_keep_failing_at_start_make_the_supervisor_give_up(
        workers: Callable[..., Workers], no_scripts_user: str) -> None:
    # scripts it may not run: on wire 5 (auto would run the native commands it may)
    supervisor = workers("q", "--concurrency", "2", "--wire", "5", url=no_scripts_user)
    assert supervisor.exit_code(within=120) == 1
    error, hint = supervisor.log().strip().splitlines()[-2:]
    assert "at start" in error and "NoPermissionError" in error, supervisor.log()
    assert error.startswith("error: ") and hint.startswith("hint: "), supervisor.log()
    assert one_line_reports(supervisor.log()), supervisor.log()
    assert supervisor.group() == []


# A module whose first import works (the supervisor's check) and every later one raises (each
# worker process's): a start failure of the children alone.
FIRST_IMPORT_ONLY = """\
import os
if os.path.exists("imported"):
    raise RuntimeError("imported once already")
open("imported", "w").close()
def handler(job):
    return None
"""


def one_line_reports(log: str) -> bool:
    """No traceback and no frame line anywhere in ``log``."""
    return "Traceback" not in log and not any(
        line.lstrip().startswith('File "') for line in log.splitlines())


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_a_start_failure_of_the_worker_processes_is_one_line_and_a_hint(
        valkey: EmbeddedValkey, tmp_path: Path, debug: bool) -> None:
    (tmp_path / "firstonly.py").write_text(FIRST_IMPORT_ONLY)
    argv = [sys.executable, "-m", "echomq", *(["--debug"] if debug else []), "worker",
            "firstonly:handler", "--queue", "q", "--url", valkey.url]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ended = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=120)
    assert ended.returncode == 1, ended.stderr
    error, hint = ended.stderr.strip().splitlines()[-2:]
    assert error.startswith("error: ") and "failed at start" in error, ended.stderr
    assert "RuntimeError: imported once already" in error
    assert f"{tmp_path / 'firstonly.py'}:3" in error  # where it was raised, in the line
    assert hint.startswith("hint: ") and "--debug" in hint
    if debug:  # the traceback, in the log of each process that failed
        assert "Traceback" in ended.stderr and 'firstonly.py", line 3' in ended.stderr
    else:
        assert one_line_reports(ended.stderr), ended.stderr


def restarted(supervisor: Workers, times: int) -> bool:
    return supervisor.log().count("worker restarted") == times


def test_workers_that_ran_a_while_are_restarted_however_often_they_crash(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    supervisor = workers("q")
    for crash in range(START_TRIES + 1):  # more crashes in a row than start failures allowed
        assert wait_until(lambda: blocked_clients(conn) == 1, 20), supervisor.log()
        (pid,) = (p for p in supervisor.group() if p != supervisor.process.pid)
        time.sleep(QUICK_DEATH_S + 0.2)  # past the start window: this is a crash, not a start
        os.kill(pid, signal.SIGKILL)
        assert wait_until(functools.partial(restarted, supervisor, crash + 1), 20)
    assert supervisor.terminate(within=6) == 0
    assert "at start" not in supervisor.log()


def test_a_workers_command_line_does_not_show_the_servers_password(
        valkey: EmbeddedValkey, conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    conn.acl_setuser("worker", enabled=True, passwords=["+hunter2"], keys=["*"], channels=["*"],
                     commands=["+@all"])
    try:
        supervisor = workers("q", url=f"redis://worker:hunter2@127.0.0.1:{valkey.port}")
        assert wait_until(lambda: blocked_clients(conn) == 1, 20), supervisor.log()
        lines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in supervisor.group()}
        assert len(lines) == 2 and not any(b"hunter2" in line for line in lines.values())
    finally:
        conn.acl_deluser("worker")


# the supervisor's death ----------------------------------------------------------------------


def clients_besides(conn: redis.Redis) -> list[dict[str, str]]:
    mine = conn.client_id()
    return [client for client in conn.client_list() if int(client["id"]) != mine]


def worker_clients(conn: redis.Redis, before: set[str]) -> list[dict[str, str]]:
    """The server's clients that are neither this test's nor there before the workers started."""
    return [client for client in clients_besides(conn) if client["id"] not in before]


@pytest.mark.parametrize("after", [None, 0.0, 0.05, 0.1, 0.3, 1.0])
def test_workers_die_with_their_supervisor_at_any_point_of_start_up(
        conn: redis.Redis, workers: Callable[..., Workers], after: float | None) -> None:
    """The supervisor is killed as it starts (None), or ``after`` seconds after it spawned its
    last worker: while that worker's interpreter boots and imports, or once it runs jobs."""
    queue = Queue(conn, "orphans")
    ids = [f"JOB:{n:03d}" for n in range(200)]
    queue.enqueue_many([(job_id, b"sleep:20") for job_id in ids])
    before = {client["id"] for client in clients_besides(conn)}  # not the workers'
    supervisor = workers("orphans", "--concurrency", "2", "--lease-ms", "60000")
    if after is not None:
        assert wait_until(lambda: "worker 1 started" in supervisor.log(), 20), supervisor.log()
        time.sleep(after)  # the point of start-up the supervisor dies at
    supervisor.process.kill()
    supervisor.process.wait()
    assert wait_until(lambda: supervisor.group() == [], 20), supervisor.log()
    assert wait_until(lambda: worker_clients(conn, before) == [], 10), worker_clients(conn, before)
    counts = queue.counts()
    assert counts["active"] == 0  # every running job finished; none waits for its lease
    assert counts["pending"] + conn.hlen("test:acked") == len(ids)


# the time limit ------------------------------------------------------------------------------


def test_a_job_past_its_time_limit_fails_and_a_fresh_process_serves_the_next(
        conn: redis.Redis, workers: Callable[..., Workers]) -> None:
    queue = Queue(conn, "limit")
    supervisor = workers("limit", "--time-limit", "0.3", "--max-attempts", "1",
                         handler="tests.worker_handlers:serve")
    hung = [f"JOB:hang-{n}" for n in range(4)]  # more overruns than start failures allowed
    queue.enqueue_many([(job_id, b"hang") for job_id in hung] + [("JOB:next", b"")])
    assert wait_until(lambda: conn.hexists("test:served", "JOB:next"), 40), supervisor.log()
    pids = {int(pid) for pid in conn.lrange("test:hung", 0, -1)}
    assert len(pids) == len(hung)  # each hung job took its process with it
    assert int(conn.hget("test:served", "JOB:next") or 0) not in pids
    dead = {job.id: job.error for job in admin.dead_jobs(conn, "limit")}
    assert set(dead) == set(hung)
    assert all("time limit" in error for error in dead.values()), dead
    assert supervisor.process.poll() is None
    assert supervisor.terminate(within=6) == 0


# the command line --------------------------------------------------------------------------


def test_the_command_refuses_a_lane_worker_on_wire6() -> None:
    result = CliRunner().invoke(main, ["worker", "tests.handlers:work", "--queue", "q",
                                       "--lanes", "--wire", "6"])
    assert result.exit_code == 2
    assert "lane_claim has no native twin" in result.output


def test_the_command_refuses_a_handler_it_cannot_import() -> None:
    for target in ("tests.handlers:missing", "tests.nowhere:work", "no-colon"):
        result = CliRunner().invoke(main, ["worker", target, "--queue", "q"])
        assert result.exit_code == 2, target


def test_specs_load_their_handlers() -> None:
    spec = WorkerSpec(handler="tests.handlers:work", queue="q", url="redis://x",
                      on_ack="tests.handlers:acked")
    check_spec(spec)
    assert load_callable("tests.handlers:work").__name__ == "work"


def test_the_command_passes_prefetch_and_max_attempts_on(valkey: EmbeddedValkey) -> None:
    """--prefetch reaches the consumer; --max-attempts becomes the queue's own limit, so the
    crash path (recover) and the failure path (retry) count against the same number."""
    spec = WorkerSpec(handler="tests.handlers:work", queue="q", url=valkey.url, prefetch=3,
                      max_attempts=2)
    consumer = build_consumer(spec)
    try:
        assert consumer.settings.capacity == 3
        assert consumer.queue.max_attempts == 2
        assert consumer.max_attempts is None
    finally:
        consumer.close()
        consumer.queue.conn.close()
