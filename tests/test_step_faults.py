"""Durable steps under crashes, through real ``echomq worker`` processes: a task of three steps
(tests/step_app.py) whose worker is SIGKILLed after each step in turn runs each step's side
effect exactly once, and its result is built from the recorded outputs. The ledger, written by
the step functions alone, is read with tests/json_lines.py.

Each kill waits on an event (the task's ``paused`` line in the ledger), never a duration; the
next attempt comes when the killed lease expires (``--lease-ms 1000``) and a new worker's
housekeeping takes it back: bounded by ``BOUND_S``, a bound on waiting, not a speed."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from echomq import App
from tests import test_worker
from tests.json_lines import written_records
from tests.test_worker import Workers, wait_until

workers = test_worker.workers  # the fixture: ``echomq worker`` supervisors, closed after

TARGETS = {"sync": "tests.step_app:sync_app", "async": "tests.step_app:async_app"}
STEPS = ("charge", "ship", "email")
BOUND_S = 120.0


def paused(ledger: Path, n: int) -> bool:
    return any(record.get("paused") == n for record in written_records(ledger))


def kill(supervisor: Workers) -> None:
    """SIGKILL the supervisor's whole group, worker included: no settlement, no heartbeat."""
    os.killpg(supervisor.process.pid, signal.SIGKILL)
    supervisor.process.wait()
    assert wait_until(lambda: not supervisor.group(), BOUND_S)


@pytest.mark.pairs(("shell", "wire"), [("sync", 5), ("async", 6)])
@pytest.mark.parametrize("wire", [5, 6])
@pytest.mark.parametrize("shell", ["sync", "async"])
def test_a_worker_killed_after_each_step_runs_each_step_once(
        conn: redis.Redis, workers: Callable[..., Workers], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, shell: str, wire: int) -> None:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("ECHOMQ_STEP_LEDGER", str(ledger))
    producer = App(conn, "steps", wire=wire)

    @producer.task(name="three")
    def three(order: str) -> list[str]:
        raise AssertionError("run by the workers")

    handle = three.enqueue("o1")
    options = ("--concurrency", "1", "--lease-ms", "1000", "--wire", str(wire))
    for n in (1, 2, 3):
        supervisor = workers("steps", *options, handler=TARGETS[shell], on_ack=None)
        assert wait_until(lambda n=n: paused(ledger, n), BOUND_S), supervisor.log()
        kill(supervisor)
    supervisor = workers("steps", *options, handler=TARGETS[shell], on_ack=None)
    assert handle.result(timeout=BOUND_S) == [f"{step}:o1" for step in STEPS], supervisor.log()
    effects = [(r["job"], r["step"]) for r in written_records(ledger) if "step" in r]
    assert effects == [("o1", step) for step in STEPS]  # each once, in order
    pauses = [r for r in written_records(ledger) if "paused" in r]
    assert [r["paused"] for r in pauses] == [1, 2, 3]
    assert len({r["pid"] for r in pauses}) == 3  # three worker processes, each killed
    outcome = producer.queue.outcome(handle.id)
    assert (outcome.state, outcome.attempts) == ("done", 4)
    assert supervisor.terminate(within=30) == 0
