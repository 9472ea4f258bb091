"""A chord of 10,000 children drained by 4 worker processes while one of them is SIGKILLed at
random every 1,500 children run and the server is SIGKILLed once (AOF ``appendfsync always``): the
callback runs exactly once with all 10,000 results in order, and no child is lost — counted
from the ledger the handlers write (tests/chord_app.py) and from the server's keyspace."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from echomq import App, Verdict, chord
from echomq.embedded import EmbeddedValkey
from tests.json_lines import Tail, unended_tail, written_records
from tests.reliability.servers import durable_node, wait_until

ROOT = Path(__file__).resolve().parent.parent.parent
ECHOMQ = str(Path(sys.executable).with_name("echomq"))
CHILDREN = 10_000
WORKERS = 4
KILL_EVERY = 1_500  # a worker killed each time this many more children ran
BOUND_S = 600.0  # a loaded 2-core machine: a bound on waiting, never a speed


class Workers:
    """``WORKERS`` ``echomq worker tests.chord_app:app`` processes, each in its own session so
    a kill takes its whole group (supervisor and consumer), replaced at once when killed."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.processes: list[subprocess.Popen[bytes]] = []
        self.kills = 0

    def start_one(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as output:
            return subprocess.Popen(
                [ECHOMQ, "worker", "tests.chord_app:app", "--lease-ms", "2000",
                 "--prefetch", "16", "--park-cap-ms", "1000", "--grace", "0"],
                cwd=ROOT, env=self.env, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True)

    def start(self) -> None:
        self.processes = [self.start_one() for _ in range(WORKERS)]

    def kill_one(self, draw: random.Random) -> None:
        n = draw.randrange(len(self.processes))
        os.killpg(self.processes[n].pid, signal.SIGKILL)
        self.processes[n].wait()
        self.kills += 1
        self.processes[n] = self.start_one()

    def stop(self) -> None:
        for process in self.processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def workers(env: dict[str, str], log: Path) -> Iterator[Workers]:
    crew = Workers(env, log)
    crew.start()
    try:
        yield crew
    finally:
        crew.stop()


@pytest.mark.slow
@pytest.mark.timeout(int(2 * BOUND_S) + 120)  # its own bounds, not the suite's 300 s
@pytest.mark.parametrize("wire", [6])
def test_a_chord_under_kills_runs_its_callback_once_with_every_result(
        wire: int, tmp_path: Path) -> None:
    draw = random.Random(wire)
    ledger = tmp_path / "ledger.jsonl"
    with durable_node("echomq-chord-") as server:
        url = f"redis://127.0.0.1:{server.port}"
        env = {**os.environ, "ECHOMQ_CHORD_URL": url, "ECHOMQ_CHORD_WIRE": str(wire),
               "ECHOMQ_CHORD_LEDGER": str(ledger), "PYTHONPATH": str(ROOT)}
        app, child, fanin = producer(server, wire)
        handle = chord([child.s(n) for n in range(CHILDREN)], fanin.s()).enqueue()
        assert handle.id is not None and handle.verdicts[handle.id] is Verdict.WAITING
        server_killed = False
        with workers(env, tmp_path / "workers.log") as crew:
            deadline = time.monotonic() + BOUND_S
            kills_at = iter(range(KILL_EVERY, CHILDREN, KILL_EVERY))  # by progress, not time
            next_kill: int | None = next(kills_at)
            tail = Tail(ledger)  # each line parsed once: 10,000 of them, polled
            while not any("fanin" in entry for entry in tail.poll()):
                assert time.monotonic() < deadline, (tmp_path / "workers.log").read_text()[-3000:]
                time.sleep(0.05)
                ran = len(tail.records)
                if next_kill is not None and ran >= next_kill:
                    crew.kill_one(draw)
                    next_kill = next(kills_at, None)
                    if not server_killed and ran > CHILDREN // 3:
                        restart(server)
                        server_killed = True
            assert server_killed and crew.kills >= 2
            result = handle.result(timeout=BOUND_S)
        check(app, ledger, result)


def producer(server: EmbeddedValkey, wire: int) -> tuple[App, Any, Any]:
    """The producer's side of tests/chord_app.py: an App with tasks of the same names (the
    workers run them; a job names its task)."""
    app = App(server.client(socket_timeout=10), "chord", wire=wire, max_attempts=10_000)

    @app.task(name="child")
    def child(n: int) -> int:
        raise AssertionError("run by the workers")

    @app.task(name="fanin")
    def fanin(values: list[int]) -> int:
        raise AssertionError("run by the workers")

    return app, child, fanin


def restart(server: EmbeddedValkey) -> None:
    """SIGKILL the server and start it again on its port and directory (it loads its AOF)."""
    server.kill()
    time.sleep(0.3)
    server.start()


def check(app: App, ledger: Path, result: int) -> None:
    assert unended_tail(ledger) == ""  # every handler's line whole
    entries = written_records(ledger)
    fanins = [entry for entry in entries if "fanin" in entry]
    assert fanins == [{"fanin": CHILDREN, "whole": True}]  # once, with every result in order
    assert {entry["child"] for entry in entries if "child" in entry} == set(range(CHILDREN))
    assert result == 2 * sum(range(CHILDREN))
    wait_until(lambda: app.queue.counts() == {"pending": 0, "active": 0, "delayed": 0,
                                              "dead": 0, "lanes": 0, **waiting_none(app)},
               "the queue empty", 60)


def waiting_none(app: App) -> dict[str, int]:
    """The waiting count when the queue's counts include it."""
    return {"waiting": 0} if "waiting" in app.queue.counts() else {}
