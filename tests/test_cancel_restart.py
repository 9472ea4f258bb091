"""A cancel lives on the server, not in a worker's memory: it survives the worker that held the
job (a new worker never runs a job cancelled while no worker ran, nor one whose holder died
with its cancel pending) and a server restart from its AOF (the cancel of a waiting job holds,
and the heartbeat of a job cancelled while leased answers CANCELLING after the restart). Both
wires."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from echomq import Consumer, Job, Queue, Verdict
from echomq.embedded import EmbeddedValkey
from tests.reliability.servers import durable_node, persist
from tests.test_cancel import until
from tests.test_consumer import running

LEASE_MS = 1_000
BOUND_S = 60.0


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def durable() -> Iterator[EmbeddedValkey]:
    """A server with the module, writing an fsynced AOF into a directory that outlives it."""
    with durable_node("echomq-cancel-") as server:
        yield server


def test_a_new_worker_never_runs_a_job_cancelled_while_none_ran_or_its_holder_died(
        durable: EmbeddedValkey, wire: int) -> None:
    conn = durable.client()
    queue = Queue(conn, "restarted", wire=wire)
    queue.enqueue_many([("JOB:held", b""), ("JOB:waiting", b""), ("JOB:kept", b"")])
    held = queue.claim(LEASE_MS)  # a worker that takes a job, then dies holding it
    assert held is not None and held.id == "JOB:held"
    assert queue.cancel("JOB:held") is Verdict.CANCELLING
    assert queue.cancel("JOB:waiting") is Verdict.CANCELLED
    ran: list[str] = []
    done = threading.Event()

    def handler(job: Job) -> None:
        ran.append(job.id)
        done.set()

    consumer = Consumer(queue, handler, lease_ms=LEASE_MS, housekeeping_ms=200)
    with running(consumer):
        assert done.wait(BOUND_S)
        # The dead holder's lease runs out: recover ends it cancelled, never back to pending.
        until(lambda: queue.outcome("JOB:held").state == "cancelled", "recover ended it")
    assert ran == ["JOB:kept"]
    assert queue.outcome("JOB:waiting").state == "cancelled"


def test_a_cancel_survives_a_server_restart_from_its_aof(durable: EmbeddedValkey,
                                                         wire: int) -> None:
    conn = durable.client()
    queue = Queue(conn, "durable", wire=wire)
    queue.enqueue_many([("JOB:held", b""), ("JOB:waiting", b"")])
    held = queue.claim(60_000)
    assert held is not None and held.id == "JOB:held"
    assert queue.cancel("JOB:held") is Verdict.CANCELLING
    assert queue.cancel("JOB:waiting") is Verdict.CANCELLED
    durable.kill()
    durable.start()  # same port, same directory: loads the AOF
    conn = durable.client()
    queue = Queue(conn, "durable", wire=wire)
    assert persist(lambda: queue.extend_many([held], lease_ms=60_000)) == [Verdict.CANCELLING]
    assert queue.outcome("JOB:waiting").state == "cancelled"
    assert queue.claim(60_000) is None  # the cancelled job is in no set a claim walks
    assert queue.ack(held) is Verdict.CANCELLED  # the holder's outcome ends it cancelled
    assert queue.outcome("JOB:held").state == "cancelled"
