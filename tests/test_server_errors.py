"""Server errors the loop survives (backing off) and those that stop it, on real servers.

A replica refuses writes (READONLY) until it is promoted; a server that sleeps (DEBUG SLEEP)
makes every call time out; SCRIPT FLUSH races the scripts' calls (NOSCRIPT): the loop carries on
and every job is settled. A user without permission (NOPERM), a queue key of the wrong type
(WRONGTYPE) and a server without trafikey (unknown command) cannot heal: ``run()`` raises
FatalServerError with one clear message.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import NodesManager
from redis.retry import Retry

from echomq import Job, Queue
from echomq.consumer.faults import Fault, classify
from echomq.embedded import EmbeddedValkey
from echomq.engine.errors import FatalServerError
from tests.conftest import start_server
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import running, wait_until

NO_RETRY = Retry(NoBackoff(), 0)


def warned(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records
               if record.levelno == logging.WARNING)


# transient ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[EmbeddedValkey, EmbeddedValkey]]:
    master, replica = start_server(), start_server()
    yield master, replica
    replica.stop()
    master.stop()


@pytest.mark.parametrize("wire", [5, 6])
def test_a_replica_refusing_writes_is_waited_out_until_it_is_promoted(
        make: Make, pair: tuple[EmbeddedValkey, EmbeddedValkey], wire: int,
        caplog: pytest.LogCaptureFixture) -> None:
    master, replica = pair
    conn = replica.client()
    conn.replicaof("127.0.0.1", master.port)  # demoted: every write is READONLY
    handled = threading.Event()
    consumer = make(Queue(conn, "failover", wire=wire), lambda job: handled.set(),
                    park_cap_ms=300)
    try:
        with caplog.at_level(logging.WARNING, logger="echomq"), running(consumer) as threads:
            assert wait_until(lambda: warned(caplog, "READONLY") or warned(caplog, "ReadOnly"))
            assert all(thread.is_alive() for thread in threads)
            conn.replicaof("NO", "ONE")  # promoted
            Queue(conn, "failover", wire=wire).enqueue("JOB:after", b"x")
            assert handled.wait(5.0)
    finally:
        conn.replicaof("NO", "ONE")
        conn.flushall()
        conn.close()


@pytest.mark.parametrize("wire", [5, 6])
def test_a_server_that_sleeps_is_waited_out(make: Make, valkey: EmbeddedValkey,
                                            wire: int) -> None:
    conn = valkey.client(socket_timeout=0.5, retry=NO_RETRY)
    conn.flushall()
    queue = Queue(conn, "sleepy", wire=wire)
    handled = threading.Event()
    consumer = make(queue, lambda job: handled.set(), park_cap_ms=300)
    try:
        with running(consumer) as threads:
            valkey.client().execute_command("DEBUG", "SLEEP", "1.2")  # every call times out
            assert all(thread.is_alive() for thread in threads)
            queue.enqueue("JOB:after", b"x")
            assert handled.wait(5.0)
    finally:
        conn.flushall()
        conn.close()


# How many calls the flushes make the server refuse with NOSCRIPT before they stop: a count, not
# a time, so the race is as hard on a loaded machine as on an idle one, and ends.
RACED_CALLS = 30
# A bound on waiting for the jobs once the flushes stop (a loaded 2-core machine), not a speed.
SETTLED_WITHIN_S = 120.0


def noscript_replies(conn: redis.Redis) -> int:
    """How many calls the server has refused with NOSCRIPT since it started."""
    stat = conn.info("errorstats").get("errorstat_NOSCRIPT", {})
    if isinstance(stat, str):  # redis-py 5.0 leaves the row unparsed: "count=N"
        stat = dict(field.split("=", 1) for field in stat.split(","))
    return int(stat.get("count", 0))


def test_script_flushes_racing_the_calls_lose_no_job(make: Make, conn: redis.Redis) -> None:
    queue = Queue(conn, "flushed", wire=5)
    count = 300
    queue.enqueue_many([(f"JOB:{n}", b"x") for n in range(count)])
    acked: list[Job] = []
    done = threading.Event()
    flusher_conn = redis.Redis(connection_pool=conn.connection_pool)
    before = noscript_replies(conn)

    def flush() -> None:
        # Every millisecond, until RACED_CALLS calls have lost their script: a flush landing
        # between a reload and its call sends the NOSCRIPT up to the loop, which backs off.
        while not done.wait(0.001) and noscript_replies(flusher_conn) - before < RACED_CALLS:
            flusher_conn.script_flush()

    flusher = threading.Thread(target=flush, daemon=True)
    consumer = make(queue, lambda job: None, on_ack=acked.append, park_cap_ms=300)
    flusher.start()
    try:
        with running(consumer) as threads:
            assert wait_until(lambda: len(acked) == count, timeout=SETTLED_WITHIN_S)
            assert all(thread.is_alive() for thread in threads)
    finally:
        done.set()
        flusher.join(5.0)
    assert noscript_replies(conn) - before >= 1  # the flushes did race the calls
    assert sorted(job.id for job in acked) == sorted(f"JOB:{n}" for n in range(count))


@pytest.mark.parametrize("message", [
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "CLUSTERDOWN The cluster is down",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "LOADING Valkey is loading the dataset in memory",
    "READONLY You can't write against a read only replica.",
    "NOSCRIPT No matching script.",
    "BUSY Valkey is busy running a script.",
])
def test_transient_codes_are_retried_whatever_class_redis_py_gives_them(message: str) -> None:
    assert classify(redis.ResponseError(message)) is Fault.TRANSIENT


def test_connection_failures_are_transient_and_refused_logins_fatal() -> None:
    assert classify(redis.ConnectionError("reset")) is Fault.TRANSIENT
    assert classify(redis.TimeoutError("slow")) is Fault.TRANSIENT
    assert classify(redis.exceptions.BusyLoadingError("loading")) is Fault.TRANSIENT
    assert classify(redis.AuthenticationError("bad password")) is Fault.FATAL
    assert classify(redis.ResponseError("ERR unknown command 'EMQ.CLAIM'")) is Fault.FATAL
    assert classify(ValueError("a bug")) is None


def test_a_cluster_whose_refresh_reached_no_node_is_waited_out() -> None:
    """redis-py 8.2 raises RedisClusterUnreachableError (no RedisError) when a refresh of the slot
    map reached no node; the nodes coming back heals it. Not transient, it ended the loop."""
    unreachable = getattr(redis.exceptions, "RedisClusterUnreachableError", None)
    if unreachable is None:
        pytest.skip("this redis-py raises the connection error itself")
    assert classify(unreachable("Redis Cluster cannot be connected")) is Fault.TRANSIENT


class FailingNode:
    """A node of a cluster client's table whose reading, like another thread meanwhile, moves
    a failed node to the table's end (redis-py 8.1's ``move_node_to_end_of_cached_nodes``, which
    does it without the table's lock: pop, then insert again)."""

    def __init__(self, manager: SimpleNamespace, failed: str) -> None:
        self.manager, self.failed = manager, failed

    @property
    def server_type(self) -> str:
        table = self.manager.nodes_cache
        table[self.failed] = table.pop(self.failed)
        return "primary"


def test_a_cluster_clients_table_moving_under_a_reader_is_transient() -> None:
    manager = SimpleNamespace(_lock=threading.Lock())
    manager.nodes_cache = {"a:1": FailingNode(manager, "b:2"), "b:2": FailingNode(manager, "a:1")}
    with pytest.raises(RuntimeError, match="during iteration") as raced:
        NodesManager.get_nodes_by_server_type(manager, "primary")  # type: ignore[arg-type]
    assert classify(raced.value) is Fault.TRANSIENT


def test_a_runtime_error_of_anything_but_the_client_is_not_the_servers() -> None:
    table = {"a": 1}
    with pytest.raises(RuntimeError) as raced:
        for key in table:
            table[key + "x"] = table.pop(key)
    assert classify(raced.value) is None
    assert classify(RuntimeError("dictionary changed size during iteration")) is None


# fatal -------------------------------------------------------------------------------------


def fails_fatally(consumer: object, caplog: pytest.LogCaptureFixture) -> str:
    """Run ``consumer`` until it stops: the message of the FatalServerError it raised."""
    with caplog.at_level(logging.ERROR, logger="echomq"), \
            pytest.raises(FatalServerError) as stopped:
        consumer.run()  # type: ignore[attr-defined]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []  # the one message is the error raised, for the caller to report
    assert "waiting will not help" in str(stopped.value)
    return str(stopped.value)


def test_a_user_without_permission_stops_the_loop(make: Make, valkey: EmbeddedValkey,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    admin = valkey.client()
    admin.flushall()
    admin.execute_command("ACL", "SETUSER", "no-park", "reset", "on", ">pw", "~*", "+@all",
                          "-blpop")
    conn = valkey.client(username="no-park", password="pw")
    try:
        message = fails_fatally(make(Queue(conn, "acl"), lambda job: None), caplog)
        assert "blpop" in message.lower() and "queue acl" in message
    finally:
        admin.execute_command("ACL", "DELUSER", "no-park")
        conn.close()
        admin.close()


@pytest.mark.parametrize("wire", [5, 6])
def test_a_queue_key_of_the_wrong_type_stops_the_loop(
        make: Make, conn: redis.Redis, wire: int, caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(conn, "typed", wire=wire)
    conn.set(queue.key("pending"), "not a sorted set")
    assert "WRONGTYPE" in fails_fatally(make(queue, lambda job: None), caplog)


def test_a_server_without_trafikey_stops_a_wire6_loop(
        make: Make, caplog: pytest.LogCaptureFixture) -> None:
    server = start_server(module=False)
    try:
        conn = server.client()
        message = fails_fatally(make(Queue(conn, "plain", wire=6), lambda job: None), caplog)
        assert "EMQ." in message.upper()
        conn.close()
    finally:
        server.stop()
