"""A worker and the row layout recorded on the server (``<base>layout``, docs/PROTOCOL.md): read
as the worker starts and again with its housekeeping token while it runs, both shells. A layout
later than this release reads is refused with one line, no job claimed; a change is logged once."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import redis

from echomq import Job, Queue
from echomq.engine.calls import JobOutcome
from echomq.engine.errors import LayoutError
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401

REFUSED = ("queue '{name}' records row layout 3; this release reads layouts up to 2: upgrade "
           "this worker (no job of the queue was claimed)")


def run_to_error(consumer: Any, within: float = 30.0) -> BaseException | None:
    """Run ``consumer``'s loop in a thread; what it raised (None: it returned)."""
    raised: list[BaseException] = []

    def loop() -> None:
        try:
            consumer.run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    thread.join(within)
    if thread.is_alive():
        consumer.stop()
        thread.join(10)
        pytest.fail("the worker did not stop")
    return raised[0] if raised else None


@pytest.mark.parametrize("wire", [5, 6])
def test_a_worker_refuses_a_queue_recorded_in_a_later_layout(
        make: Make, conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, f"later{wire}", wire=wire, check_policy=False)
    queue.enqueue("JOB:1", b"x")
    conn.set(queue.key("layout"), "3")
    ran: list[Job] = []
    consumer = make(queue, ran.append, announce=False)
    raised = run_to_error(consumer)
    assert isinstance(raised, LayoutError)
    assert str(raised) == REFUSED.format(name=queue.name)
    assert "\n" not in str(raised)
    assert ran == []
    assert queue.outcome("JOB:1") == JobOutcome("pending", None, None, 0)


class Changes(logging.Handler):
    """The layout changes the echomq log told of."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "recorded in row layout" in message:
            self.lines.append(message)
            self.seen.set()


@pytest.mark.parametrize("wire", [5, 6])
def test_a_running_worker_notices_the_layout_change_once_and_refuses_a_later_one(
        make: Make, conn: redis.Redis, wire: int) -> None:
    """The first job's handler records layout 2 and waits until the worker, housekeeping while
    it runs, has logged the change; the second's records layout 3 and waits until the worker
    stops (30 s at most each, far above the 50 ms housekeeping interval, for a loaded machine):
    ``run()`` raises LayoutError, the third job not run."""
    queue = Queue(conn, f"change{wire}", wire=wire, check_policy=False)
    layout = queue.key("layout")
    for n in (1, 2, 3):
        queue.enqueue(f"JOB:{n}", b"x")
    changes = Changes()
    ran: list[str] = []
    made: list[Any] = []

    def handle(job: Job) -> None:
        ran.append(job.id)
        if job.id == "JOB:1":
            conn.set(layout, "2")
            assert changes.seen.wait(30), "the change was not noticed"
        elif job.id == "JOB:2":
            conn.set(layout, "3")
            assert wait_until(lambda: made[0].stopping, 30), "the worker did not stop"

    logger = logging.getLogger("echomq")
    logger.addHandler(changes)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        made.append(make(queue, handle, announce=False, housekeeping_ms=50))
        raised = run_to_error(made[0])
    finally:
        logger.removeHandler(changes)
        logger.setLevel(level)
    assert changes.lines == [f"queue {queue.name}: its rows are now recorded in row layout 2 "
                             "(was none)"]
    assert isinstance(raised, LayoutError)
    assert str(raised) == REFUSED.format(name=queue.name).replace(
        "no job of the queue was claimed", "it claims no more of the queue's jobs")
    assert ran == ["JOB:1", "JOB:2"]
    assert queue.outcome("JOB:3") == JobOutcome("pending", None, None, 0)


def wait_until(condition: Any, timeout: float) -> bool:
    done = threading.Event()
    for _ in range(int(timeout * 20)):
        if condition():
            return True
        done.wait(0.05)
    return bool(condition())
