"""A program's first step written now and its reply read later (``echomq.engine.program.Ahead``):
the same reply as driving it whole, the connection back in the pool once read, the steps after
the first (a script loaded again) performed when it is read, and clients that cannot split a
call (one connection, a blocking pool) served whole at once."""

from __future__ import annotations

import pytest
import redis

from echomq import Queue
from echomq.engine.once import sends_ahead
from echomq.engine.program import Ahead, drive
from echomq.queue.methods import QueueMethods


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    return Queue(conn, "ahead-engine", wire=request.param)


def test_a_claim_sent_ahead_replies_as_the_call_would(queue: Queue) -> None:
    queue.enqueue_many([(f"JOB:{n}", b"x") for n in range(3)])
    pool = queue.conn.connection_pool
    ahead = Ahead(QueueMethods.claim_many.program(queue, 2))
    assert sends_ahead(queue.conn) and len(pool._in_use_connections) == 1  # its reply waits
    jobs = ahead.result()
    assert [job.id for job in jobs] == ["JOB:0", "JOB:1"]
    assert len(pool._in_use_connections) == 0  # back in the pool
    assert [job.id for job in drive(QueueMethods.claim_many.program(queue, 2))] == ["JOB:2"]


def test_the_steps_after_the_first_are_performed_when_the_reply_is_read(
        conn: redis.Redis) -> None:
    """A server that lost its scripts answers NOSCRIPT to the call written ahead: reading it
    loads the script and sends the call again, as driving it whole would."""
    queue = Queue(conn, "ahead-noscript", wire=5)
    queue.enqueue("JOB:n", b"x")
    conn.script_flush()
    ahead = Ahead(QueueMethods.claim_many.program(queue, 1))
    assert [job.id for job in ahead.result()] == ["JOB:n"]


@pytest.mark.parametrize("kind", ["single connection", "blocking pool"])
def test_a_client_that_cannot_split_a_call_makes_it_whole_at_once(kind: str,
                                                                  conn: redis.Redis) -> None:
    kwargs = conn.connection_pool.connection_kwargs
    options = {key: kwargs[key] for key in ("host", "port", "path") if key in kwargs}
    client = redis.Redis(single_connection_client=True, **options) \
        if kind == "single connection" else \
        redis.Redis(connection_pool=redis.BlockingConnectionPool(**options))
    queue = Queue(client, "ahead-whole", wire=6)
    queue.enqueue("JOB:w", b"x")
    assert not sends_ahead(client)
    ahead = Ahead(QueueMethods.claim_many.program(queue, 1))
    assert [job.id for job in ahead.result()] == ["JOB:w"]
    client.close()
