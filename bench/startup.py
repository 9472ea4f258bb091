"""The ``startup`` phase of ``python -m bench`` (standalone, ``bench/.env/bin/python -m
bench.startup``, which prints the table): how long a worker takes to start, beside Dramatiq's and
RQ's, each worker one process of its defaults started by its own command line.

- **start to first task**: one job waits in the queue; the worker's command starts; the time
  until its handler starts (the handler stamps the wall clock into the server).
- **cold first result**: the worker's command and a fresh producer process (``python -c``: import
  the task, send it, block on its result) start together; the time until the producer has the
  result and exits. Both interpreters start cold, as a developer's first run does.

The median of ``REPS`` runs each; the machine is small and shared, so read the ratios.
"""

from __future__ import annotations

import compileall
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import redis

REPS = 5
BOUND_S = 60.0  # how long before a run is called a failure
POLL_S = 0.002
STAMP = "bench:startup:ran"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The task of each system, in a module of its own, stamping the wall clock into the server.
APPS = {
    "echomq": """
        import os, time
        import redis
        from echomq import App
        conn = redis.Redis.from_url(os.environ["STARTUP_URL"])
        app = App(conn, queue="startup")

        @app.task(name="stamp", keep_result=True)
        def stamp() -> int:
            conn.set("bench:startup:ran", repr(time.time()))
            return 42
    """,
    "dramatiq": """
        import os, time
        import dramatiq, redis
        from dramatiq.brokers.redis import RedisBroker
        from dramatiq.results import Results
        from dramatiq.results.backends import RedisBackend
        url = os.environ["STARTUP_URL"]
        conn = redis.Redis.from_url(url)
        broker = RedisBroker(url=url)
        broker.add_middleware(Results(backend=RedisBackend(url=url)))
        dramatiq.set_broker(broker)

        @dramatiq.actor(queue_name="startup", store_results=True)
        def stamp() -> int:
            conn.set("bench:startup:ran", repr(time.time()))
            return 42
    """,
    "rq": """
        import os, time
        import redis
        conn = redis.Redis.from_url(os.environ["STARTUP_URL"])

        def stamp() -> int:
            conn.set("bench:startup:ran", repr(time.time()))
            return 42
    """,
}

# What the fresh producer of "cold first result" runs.
PRODUCERS = {
    "echomq": "from startup_echomq import stamp; assert stamp.enqueue().result(timeout=60) == 42",
    "dramatiq": "from startup_dramatiq import stamp; "
                "assert stamp.send().get_result(block=True, timeout=60_000) == 42",
    "rq": "import redis, rq, os; from startup_rq import stamp; "
          "job = rq.Queue('startup', connection=redis.Redis.from_url(os.environ['STARTUP_URL']))"
          ".enqueue(stamp); result = job.latest_result(timeout=60); "
          "assert result is not None and result.return_value == 42",
}

# What the producer sends to have one job waiting before its worker starts.
ENQUEUES = {
    "echomq": "from startup_echomq import stamp; stamp.enqueue()",
    "dramatiq": "from startup_dramatiq import stamp; stamp.send()",
    "rq": "import redis, rq, os; from startup_rq import stamp; "
          "rq.Queue('startup', connection=redis.Redis.from_url(os.environ['STARTUP_URL']))"
          ".enqueue(stamp)",
}


def worker_command(system: str, url: str) -> list[str]:
    """Each system's worker, one process, its defaults otherwise."""
    python = sys.executable
    if system == "echomq":
        return [python, "-m", "echomq", "worker", "startup_echomq:app"]
    if system == "dramatiq":
        return [python, "-m", "dramatiq", "startup_dramatiq", "--processes", "1"]
    return [os.path.join(os.path.dirname(python), "rq"), "worker", "--url", url, "startup"]


def enqueue_waiting(system: str, url: str, where: str) -> None:
    """One job waiting in the system's queue before its worker starts, sent as its producers
    send it (in a process of its own, so this one loads none of the peers)."""
    subprocess.run([sys.executable, "-c", ENQUEUES[system]], cwd=where, env=env_of(url, where),
                   check=True, timeout=BOUND_S)


def env_of(url: str, where: str) -> dict[str, str]:
    path = os.pathsep.join([where, ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "STARTUP_URL": url, "ECHOMQ_URL": url, "PYTHONPATH": path}


@dataclass
class Run:
    first_task_s: float
    first_result_s: float


def stopped(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the worker's process group, then SIGKILL what is left of it."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(20)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(20)


def started_worker(system: str, url: str, where: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(worker_command(system, url), cwd=where, env=env_of(url, where),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def first_task(system: str, conn: redis.Redis, url: str, where: str) -> float:
    """Seconds from the worker's command to its handler's start, one job waiting."""
    conn.flushdb()
    enqueue_waiting(system, url, where)
    started = time.time()
    worker = started_worker(system, url, where)
    try:
        deadline = time.monotonic() + BOUND_S
        while (stamp := conn.get(STAMP)) is None:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise TimeoutError(f"{system}: no task started")
            time.sleep(POLL_S)
        return float(stamp) - started
    finally:
        stopped(worker)


def first_result(system: str, conn: redis.Redis, url: str, where: str) -> float:
    """Seconds from the worker's command and a fresh producer, started together, to the
    producer's exit with the result."""
    conn.flushdb()
    started = time.time()
    worker = started_worker(system, url, where)
    try:
        subprocess.run([sys.executable, "-c", PRODUCERS[system]], cwd=where,
                       env=env_of(url, where), check=True, timeout=BOUND_S)
        return time.time() - started
    finally:
        stopped(worker)


def compiled_checkout() -> None:
    """The checkout's modules compiled to bytecode, as an install compiles them (pip does; the
    peers' were at their install): a run that compiles on import measures the compiler."""
    import echomq

    compileall.compile_dir(os.path.dirname(echomq.__file__), quiet=1)


def measure(system: str, port: int, reps: int = REPS) -> dict[str, Any]:
    if system == "echomq":
        compiled_checkout()
    url = f"redis://127.0.0.1:{port}/2"  # a database of its own on the bench's server
    conn = redis.Redis.from_url(url)
    with tempfile.TemporaryDirectory(prefix="echomq-startup-") as where:
        with open(os.path.join(where, f"startup_{system}.py"), "w") as module:
            module.write(textwrap.dedent(APPS[system]))
        runs = [Run(first_task(system, conn, url, where), first_result(system, conn, url, where))
                for _ in range(reps)]
    conn.flushdb()
    conn.close()
    return {"system": system, "version": version_of(system), "reps": reps,
            "first_task_s": statistics.median(r.first_task_s for r in runs),
            "first_result_s": statistics.median(r.first_result_s for r in runs),
            "first_task_all": [round(r.first_task_s, 3) for r in runs],
            "first_result_all": [round(r.first_result_s, 3) for r in runs]}


def version_of(system: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(system)
    except PackageNotFoundError:
        return "checkout"


SYSTEMS = ("echomq", "dramatiq", "rq")


def run(port: int, reps: int = REPS) -> dict[str, Any]:
    """Each system's row; a peer that cannot run here is reported, not faked."""
    rows: dict[str, Any] = {}
    for system in SYSTEMS:
        try:
            rows[system] = measure(system, port, reps)
        except Exception as exc:
            rows[system] = {"system": system, "error": f"{type(exc).__name__}: {exc}"}
    return rows


def table(rows: dict[str, Any]) -> str:
    lines = ["| worker | version | start → first task (s) | cold first result (s) | runs |",
             "| --- | --- | ---: | ---: | ---: |"]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| {name} | | could not run: {row['error']} | | |")
            continue
        lines.append(f"| {name} | {row['version']} | {row['first_task_s']:.2f} | "
                     f"{row['first_result_s']:.2f} | {row['reps']} |")
    return "\n".join(lines)


def report_section(results: dict[str, Any]) -> str:
    """The RESULTS.md section of the ``startup`` phase (``results["startup"]``)."""
    return "\n".join([
        "## Worker start: to the first task, and a cold first result",
        "",
        "Each worker one process, started by its own command (`echomq worker`, `dramatiq "
        "--processes 1`, `rq worker`): from the command to the handler's start with one job "
        "waiting, and from the command and a fresh producer process started together to the "
        "producer holding the result; the median of the runs each (`echomq`'s modules "
        "compiled to bytecode first, as an install compiles them).",
        "",
        table(results["startup"]),
    ])


def main() -> None:
    from bench.common import running_server

    with running_server() as server:
        print(table(run(server.port)))


if __name__ == "__main__":
    main()
