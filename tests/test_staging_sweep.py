"""Housekeeping ends abandoned staging (docs/PROTOCOL.md "Staged admission"): a job of a staged
graph still held ``staging_timeout_ms`` after its admission is cancelled, with every job waiting
on it, so a graph whose admitting process was SIGKILLed between steps ends — the jobs its seals
released done, every other one cancelled, the body never run, nothing left waiting — on both
wires, blocking and asyncio consumers; a sealed job waiting long for its parents is never
touched; ``echomq recover`` runs the same sweep."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest
import redis

from bench.admission import BODY, chord_graph
from echomq import Job, Queue, Verdict
from echomq.embedded import EmbeddedValkey
from echomq.engine import transitions as t
from echomq.engine.server_time import server_ms
from echomq.queue.graphs import GraphJob, admission_steps
from tests.command_line import cli
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_staged_admission import started

NOW = 1_700_000_000_000
TIMEOUT_MS = 60_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def killed_admission(conn: redis.Redis, valkey: EmbeddedValkey, wire: int, phase: str,
                     admitter: str) -> tuple[list[str], list[str]]:
    """A chord of 600 children whose admitting process (``admitter``: its shell) is SIGKILLed
    in ``phase``: the ids it admitted, and those its seals released."""
    children = 600
    graph = chord_graph(children)
    steps = admission_steps(Queue(conn, "staged", wire=wire).calls, graph, None)
    first_seal = next(n for n, step in enumerate(steps)
                      if any(call[0] is t.AFTER and str(call[2][2]) == "1" for _, call, _ in step))
    sent = 2 if phase == "staging" else first_seal + 2
    process = started(valkey.url, wire, sent, children, admitter)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = steps[:sent]
    rows = [call[2][0] for step in done for _, call, _ in step if call[0] is t.ENQUEUE_AFTER]
    released = [call[2][0] for step in done for _, call, _ in step
                if call[0] is t.AFTER and str(call[2][2]) == "1" and call[2][0] != BODY]
    return rows, released


@pytest.mark.parametrize(("wire", "phase", "admitter"), [
    (5, "staging", "blocking"), (6, "staging", "aio"),
    (5, "sealing", "aio"), (6, "sealing", "blocking")])
def test_a_graph_whose_admitter_was_killed_between_steps_ends_at_the_next_housekeeping(
        conn: redis.Redis, valkey: EmbeddedValkey, make: Make, wire: int, phase: str,
        admitter: str) -> None:
    rows, released = killed_admission(conn, valkey, wire, phase, admitter)
    queue = Queue(conn, "staged", wire=wire, staging_timeout_ms=TIMEOUT_MS)
    held = conn.zcard(queue.key("waiting"))
    assert held == len(rows) - len(released) > 0
    if phase == "sealing":
        assert BODY in rows and len(released) > 0
    # The consumer's clock: the deadline of every job admitted has passed.
    later = server_ms(conn) + TIMEOUT_MS
    ran: list[str] = []

    def handler(job: Job) -> None:
        ran.append(job.id)

    make(queue, handler, clock=lambda: later).beat(park=False)
    assert sorted(ran) == sorted(released) and BODY not in ran  # the body never ran
    for role in ("waiting", "pending", "active", "delayed"):
        assert conn.zcard(queue.key(role)) == 0, role
    states = {job_id: queue.outcome(job_id).state for job_id in rows}
    assert states == {job_id: "done" if job_id in released else "cancelled" for job_id in rows}


def held_graph(queue: Queue, now: int) -> list[Verdict]:
    """A parent left pending, a job sealed waiting on it, and a held job (admitted open, never
    sealed: the first step of a staging) with a job waiting on it, all admitted at ``now``."""
    verdicts = queue.enqueue_graph([GraphJob("JOB:parent", b"p"),
                                    GraphJob("JOB:sealed", b"s", after=("JOB:parent",))],
                                   now=now)
    steps = admission_steps(queue.calls, [GraphJob("JOB:held", b"h"),
                                          GraphJob("JOB:below", b"b", after=("JOB:held",))],
                            now)
    staging = [call for _, call, _ in steps[0] if call[0] is t.ENQUEUE_AFTER
               or str(call[2][2]) == "0"]  # the admissions and the unsealed AFTER, no seal
    queue.executor.call_atomic(queue.conn, staging)
    return verdicts


def test_a_sealed_job_waiting_long_is_never_swept_a_held_one_is_at_its_deadline(
        conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "graphs", wire=wire, staging_timeout_ms=TIMEOUT_MS)
    assert held_graph(queue, NOW) == [Verdict.ENQUEUED, Verdict.WAITING]
    assert conn.hget(queue.key("job", "JOB:held"), "hold") == b"1"
    assert queue.sweep_staging(now=NOW + TIMEOUT_MS - 1) == 0  # not yet
    # a round that does no upkeep (no trim: a consumer's between its trims) sweeps nothing
    assert queue.recover_due(now=NOW + TIMEOUT_MS, trim=False).abandoned == 0
    assert conn.zcard(queue.key("waiting")) == 3
    housekept = queue.recover_due(now=NOW + TIMEOUT_MS)
    assert housekept.abandoned == 2  # both held (JOB:below cancelled by JOB:held's end first)
    assert [queue.outcome(job_id).state for job_id in
            ("JOB:parent", "JOB:sealed", "JOB:held", "JOB:below")] == [
        "pending", "waiting", "cancelled", "cancelled"]
    assert conn.zrange(queue.key("waiting"), 0, -1) == [b"JOB:sealed"]
    # A day later the sealed job still waits for its parent, and runs once the parent ran.
    assert queue.sweep_staging(now=NOW + 86_400_000) == 0
    parent = queue.claim()
    assert parent is not None and parent.id == "JOB:parent"
    assert queue.ack(parent) is Verdict.ACKED
    assert queue.outcome("JOB:sealed").state == "pending"


def test_a_held_job_behind_more_sealed_ones_than_a_sweep_reads_is_reached_by_the_next(
        conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "chain", wire=wire, staging_timeout_ms=TIMEOUT_MS)
    jobs = [GraphJob("JOB:head", b"h"),
            *(GraphJob(f"JOB:s{n}", b"s", after=("JOB:head",)) for n in range(25))]
    queue.enqueue_graph(jobs, now=NOW)  # 25 sealed jobs waiting, admitted first
    held_graph(queue, NOW + 1)
    later = NOW + 1 + TIMEOUT_MS
    # 2 pages of 10 a sweep: the first stops at the 20th sealed job, the next goes on there.
    assert queue.sweep_staging(now=later, limit=10, steps=2) == 0
    assert queue.sweep_staging(now=later, limit=10, steps=2) == 2
    assert queue.outcome("JOB:held").state == queue.outcome("JOB:below").state == "cancelled"
    assert conn.zcard(queue.key("waiting")) == 26  # the sealed ones, and JOB:sealed
    assert queue.sweep_staging(now=later, limit=10, steps=2) == 0


def test_a_queue_without_a_deadline_and_a_sharded_queue_sweep_nothing(
        conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "graphs", wire=wire, staging_timeout_ms=None)
    held_graph(queue, NOW)
    assert queue.recover_due(now=NOW + 10 * 86_400_000).abandoned == 0
    assert conn.hget(queue.key("job", "JOB:held"), "hold") == b"1"
    sharded = Queue(conn, "spread", wire=wire, shards=2)
    assert all(shard.staging_timeout_ms is None for shard in sharded.shard_queues)
    with pytest.raises(ValueError, match="staging_timeout_ms"):
        Queue(conn, "bad", staging_timeout_ms=0)


def test_recover_on_the_command_line_ends_abandoned_staging(
        valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "graphs")
    now = server_ms(conn)
    held_graph(queue, now - 2 * TIMEOUT_MS)
    moved: Any = json.loads(cli(valkey, "recover", "graphs", "--json",
                                "--staging-timeout-ms", str(TIMEOUT_MS)))
    assert moved == {"recovered": 0, "promoted": 0, "abandoned": 2}
    assert queue.outcome("JOB:below").state == "cancelled"
    assert queue.outcome("JOB:sealed").state == "waiting"
