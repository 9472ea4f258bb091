"""Workers' connections: idle consumers never trip a socket timeout, and a dead server is noticed.

The idle spell is longer than every timeout in play (the client's 1 s socket timeout, the park
cap, housekeeping), on both shells; then a job enqueued must run promptly with no warning logged.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq import Job, Queue
from echomq.embedded import EmbeddedValkey
from echomq.queue.connection import async_redis_from_url, redis_from_url, socket_timeout_of
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import parked, running

SOCKET_TIMEOUT_S = 1.0
IDLE_S = 2.6  # past the socket timeout twice over, and past two housekeeping rounds


def connections_made(conn: redis.Redis) -> int:
    return int(conn.info("stats")["total_connections_received"])


@pytest.fixture
def short_timeout(valkey: EmbeddedValkey) -> Iterator[redis.Redis]:
    """A client whose socket timeout is short and is not retried behind the caller's back (as
    on redis-py 5, or as a user may choose): a park that trips it shows."""
    client = valkey.client(socket_timeout=SOCKET_TIMEOUT_S, retry=Retry(NoBackoff(), 0))
    client.flushall()
    yield client
    client.flushall()
    client.close()


@pytest.mark.parametrize("wire", [5, 6])
def test_an_idle_consumer_outlives_every_timeout_then_runs_a_job_at_once(
        make: Make, short_timeout: redis.Redis, wire: int,
        caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(short_timeout, "idle", wire=wire)
    handled = threading.Event()
    consumer = make(queue, lambda job: handled.set(), park_cap_ms=30_000)
    with caplog.at_level(logging.WARNING, logger="echomq"), running(consumer) as threads:
        assert parked(short_timeout)
        connections = connections_made(short_timeout)
        time.sleep(IDLE_S)  # the idle spell itself is what is tested
        assert connections_made(short_timeout) == connections  # no timeout, no reconnect
        assert all(thread.is_alive() for thread in threads), "the loop died while idle"
        started = time.monotonic()
        queue.enqueue("JOB:after-idle", b"x")
        assert handled.wait(2.0)
        assert time.monotonic() - started < 1.0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_redis_from_url_sets_timeouts_keepalive_and_a_health_check(
        valkey: EmbeddedValkey) -> None:
    client = redis_from_url(f"redis://127.0.0.1:{valkey.port}/0")
    options = client.connection_pool.connection_kwargs
    assert options["socket_timeout"] > 0 and options["socket_connect_timeout"] > 0
    assert options["socket_keepalive"] is True and options["socket_keepalive_options"]
    assert options["health_check_interval"] > 0
    assert client.ping()
    assert socket_timeout_of(client) == options["socket_timeout"]
    client.close()
    overridden = redis_from_url(f"valkey://127.0.0.1:{valkey.port}", socket_timeout=2.5)
    assert overridden.ping() and socket_timeout_of(overridden) == 2.5
    overridden.close()
    unix = redis_from_url("unix:///nonexistent.sock")  # no keepalive on a Unix socket
    assert "socket_keepalive" not in unix.connection_pool.connection_kwargs
    asynchronous = async_redis_from_url(f"redis://127.0.0.1:{valkey.port}")
    assert socket_timeout_of(asynchronous) == options["socket_timeout"]


def test_socket_timeout_of_reads_the_effective_default(valkey: EmbeddedValkey) -> None:
    plain = redis.Redis.from_url(f"redis://127.0.0.1:{valkey.port}")
    assert socket_timeout_of(plain) == plain.connection_pool.make_connection().socket_timeout


def test_a_server_that_stops_answering_is_noticed_within_the_timeout() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts into its backlog, never answers
    port = silent.getsockname()[1]
    try:
        client = redis_from_url(f"redis://127.0.0.1:{port}", socket_timeout=0.3,
                                health_check_interval=0)
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        assert time.monotonic() - started < 2.0
    finally:
        silent.close()


def test_a_consumer_on_redis_from_url_parks_below_its_parking_connections_timeout(
        valkey: EmbeddedValkey) -> None:
    client = redis_from_url(f"redis://127.0.0.1:{valkey.port}", socket_timeout=1.0)
    queue = Queue(client, "idle")
    from echomq import Consumer

    consumer = Consumer(queue, lambda job: None, park_cap_ms=60_000, housekeeping_ms=60_000)
    assert consumer.park_timeout_ms() == 60_000
    parking = consumer._parker.bind().conn.connection_pool.connection_kwargs
    assert parking["socket_timeout"] == 65.0  # the park's own connection outlasts it
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 1.0  # the client's
    consumer.close()
    client.close()


def test_jobs_run_on_a_client_from_redis_from_url(make: Make, valkey: EmbeddedValkey) -> None:
    client = redis_from_url(f"redis://127.0.0.1:{valkey.port}")
    queue = Queue(client, "fresh")
    seen: list[Job] = []
    queue.enqueue("JOB:1", b"x")
    assert make(queue, seen.append).beat(park=False) == 1
    assert [job.id for job in seen] == ["JOB:1"]
    client.flushall()
    client.close()
