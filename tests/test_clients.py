"""Both client libraries, redis-py and valkey-py: their errors are told apart by class, alike,
and a consumer on a valkey-py client outlives a server restart on both wires and both shells.

The Queue, Consumer, App and asyncio suites themselves run on both libraries (their ``conn``
fixture is ``library_conn``); this file holds what those suites do not reach.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.exceptions
import valkey
import valkey.asyncio
import valkey.exceptions

from echomq import Job, Queue
from echomq.consumer.faults import classify
from echomq.engine.clients import async_twin, client_library, is_cluster, private_twin, twins
from echomq.engine.errors import EchoMQError
from echomq.queue.connection import (
    SOCKET_TIMEOUT_S,
    client_like,
    server_of,
    server_of_url,
    shown_server,
    shown_url,
)
from tests.conftest import start_server
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import running

REDIS_ERRORS = sorted(
    (kind for _, kind in inspect.getmembers(redis.exceptions, inspect.isclass)
     if issubclass(kind, BaseException) and kind.__module__ == "redis.exceptions"),
    key=lambda kind: kind.__name__)


def valkey_namesake(kind: type[BaseException]) -> type[BaseException] | None:
    name = {"RedisError": "ValkeyError",
            "RedisClusterException": "ValkeyClusterException"}.get(kind.__name__, kind.__name__)
    found = getattr(valkey.exceptions, name, None)
    return found if isinstance(found, type) else None


@pytest.mark.parametrize("kind", [kind for kind in REDIS_ERRORS if valkey_namesake(kind)],
                         ids=lambda kind: kind.__name__)
def test_every_valkey_py_error_is_classified_as_its_redis_py_namesake(
        kind: type[BaseException]) -> None:
    twin = valkey_namesake(kind)
    assert twin is not None and twin in twins(kind)
    for message in ("NOSCRIPT No matching script.", "WRONGTYPE Operation against a key",
                    "LOADING Valkey is loading", "connection reset"):
        try:
            ours, theirs = kind(message), twin(message)
        except (TypeError, ValueError):  # an error that reads its message (ASK, MOVED)
            continue
        assert classify(theirs) == classify(ours), message


def test_twins_leave_other_classes_alone_and_need_no_valkey_for_redis_errors() -> None:
    assert twins(ValueError, EchoMQError) == (ValueError, EchoMQError)
    assert twins(redis.ResponseError) == (redis.ResponseError,
                                          valkey.exceptions.ResponseError)
    assert twins(redis.RedisError)[1] is valkey.exceptions.ValkeyError


def test_each_library_s_clients_are_told_apart() -> None:
    sync, asynchronous = valkey.Valkey(), valkey.asyncio.Valkey()
    assert client_library(sync) == client_library(asynchronous) == "valkey"
    assert client_library(sync.pipeline()) == "valkey"
    assert client_library(redis.Redis()) == client_library(redis.asyncio.Redis()) == "redis"
    assert not is_cluster(sync) and not is_cluster(redis.Redis())


def test_the_parking_connection_is_of_the_client_s_own_library(library_conn: Any) -> None:
    private = private_twin(library_conn, 65.0)
    try:
        assert type(private) is type(library_conn)
        assert private.connection_pool is not library_conn.connection_pool
        assert private.connection_pool.connection_kwargs["socket_timeout"] == 65.0
        assert private.ping()
    finally:
        private.close()
        private.connection_pool.disconnect()
    assert private_twin(object(), 65.0) is None


@pytest.mark.parametrize("wire", [5, 6])
def test_a_consumer_on_valkey_py_outlives_a_server_restart(make: Make, wire: int) -> None:
    """The restarted server has no scripts (wire 5: NOSCRIPT) and no data; the consumer backs
    off through valkey-py's connection errors, then runs the job enqueued after the restart."""
    server = start_server()
    port = server.port
    conn = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=1.0,
                            socket_connect_timeout=1.0)
    queue = Queue(conn, "restarted", wire=wire)
    handled: list[str] = []
    ran = threading.Event()

    def handler(job: Job) -> None:
        handled.append(job.id)
        ran.set()

    consumer = make(queue, handler, park_cap_ms=300, retry_delay_ms=0)
    try:
        with running(consumer) as threads:
            queue.enqueue("JOB:before", b"x")
            assert ran.wait(10.0)
            ran.clear()
            server.stop()
            # The consumer reconnects at once and may set its housekeeping token first.
            server = start_server(port=port, refuse_data=False)
            producer = valkey.Valkey(host="127.0.0.1", port=port)  # not the consumer's pool
            Queue(producer, "restarted", wire=wire).enqueue("JOB:after", b"x")
            producer.close()
            assert ran.wait(30.0), "the consumer did not run a job after the restart"
            assert all(thread.is_alive() for thread in threads)
    finally:
        conn.close()
        server.stop()
    assert handled == ["JOB:before", "JOB:after"]


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://u:s3cret@h:1/2", "redis://h:1/2"),
    ("rediss://h:1/0?password=s3cret&username=u&ssl_cert_reqs=none",
     "rediss://h:1/0?ssl_cert_reqs=none"),
    ("redis://u:s3cret@[::1", "redis://[::1"),  # not a URL, and still without its password
    ("unix://:s3cret@/tmp/v.sock?db=2", "unix:///tmp/v.sock?db=2"),
])
def test_a_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    assert shown_url(url) == shown


@pytest.mark.parametrize("make", [redis.Redis, valkey.Valkey], ids=["redis", "valkey"])
def test_a_worker_rebuilds_an_app_s_client_of_its_own_library_and_options(make: Any) -> None:
    app_conn = make(host="localhost", port=7001, db=3, password="secret", socket_timeout=None)
    rebuilt = client_like(app_conn)
    options = rebuilt.connection_pool.connection_kwargs
    assert type(rebuilt) is make and rebuilt.connection_pool is not app_conn.connection_pool
    assert (options["host"], options["port"], options["db"], options["password"]) == (
        "localhost", 7001, 3, "secret")
    assert options["socket_timeout"] == SOCKET_TIMEOUT_S and options["socket_keepalive"]
    assert server_of(rebuilt) == server_of(app_conn) == server_of_url("redis://127.0.0.1:7001/3")
    assert server_of_url("valkey://localhost:7001/3") == server_of(app_conn)
    assert server_of_url("redis://localhost:7002/3") != server_of(app_conn)
    assert server_of_url("redis://localhost:7001/0") != server_of(app_conn)
    assert shown_server(app_conn) == "redis://localhost:7001/3"  # no password shown
    unix = client_like(make(unix_socket_path="/tmp/echomq.sock"))
    assert unix.connection_pool.connection_class.__name__ == "UnixDomainSocketConnection"
    assert server_of(unix) == server_of_url("unix:///tmp/echomq.sock")


def test_the_asyncio_twin_is_of_the_client_s_own_library(library_conn: Any) -> None:
    import asyncio

    twin = async_twin(library_conn)
    expected = valkey.asyncio.Valkey if client_library(library_conn) == "valkey" \
        else redis.asyncio.Redis
    assert type(twin) is expected

    async def same_server() -> bool:
        try:
            await twin.set("twin:probe", b"1")
            return bool(library_conn.get("twin:probe") == b"1")
        finally:
            await twin.aclose()

    assert asyncio.run(same_server())


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_the_asyncio_twin_keeps_the_retry_policy_as_an_asyncio_one(library: str) -> None:
    """redis-py 8.2 would convert a blocking ``Retry`` itself, warning each time; valkey-py (and
    redis-py before) would keep it, and an asyncio connection cannot run its retries."""
    import asyncio
    import importlib
    import warnings

    backoff = importlib.import_module(f"{library}.backoff").ExponentialBackoff()
    blocking_retry = importlib.import_module(f"{library}.retry").Retry(backoff, 4)
    client_class = redis.Redis if library == "redis" else valkey.Valkey
    conn = client_class(port=1, retry=blocking_retry)  # never connected
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        twin = async_twin(conn)
    retry = twin.connection_pool.connection_kwargs["retry"]
    assert isinstance(retry, importlib.import_module(f"{library}.asyncio.retry").Retry)
    assert (type(retry._backoff), retry._retries) == (type(backoff), 4)
    asyncio.run(twin.aclose())


def test_echomq_never_imports_valkey_py_itself() -> None:
    """redis-py users need no valkey-py: only a client of it brings its classes in."""
    import subprocess
    import sys

    probe = ("import sys, echomq, echomq.aio, echomq.cli.main, echomq.worker.build, "
             "echomq.contrib.starlette; print('valkey' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"
