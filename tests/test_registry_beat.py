"""Every consumer is a live worker by default, and its record costs a parked consumer next to
nothing: the record rides in the flush of the read before a park, written again every other park
or so, and expires ``PARKED_EXPIRY_CAPS`` park caps after it was written; a busy consumer keeps
its 2 s beat, a clean stop removes the record, a SIGKILLed consumer drops out within its expiry.
Commands are the server's own count (``INFO commandstats``); times are the server's clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from starlette.testclient import TestClient

from echomq import Job, Queue
from echomq.cli.main import main
from echomq.consumer.blocking import server_ms
from echomq.consumer.loop import PARK_CAP_MS
from echomq.consumer.presence import PARKED_EXPIRY_CAPS, Announcer
from echomq.consumer.roster import WorkerInfo, live_workers
from echomq.embedded import EmbeddedValkey
from echomq.ops.dashboard import create_app
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import blocked_clients, command_calls, running, wait_until

# The reads of one park (three heads and the jobs waiting) and its BLPOP, as tests/test_parking.py.
PER_PARK = 5
# The record's rewrite: HSET and PEXPIRE.
PER_WRITE = 2


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def cli_workers(valkey: EmbeddedValkey) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["workers", "--json", "--url", valkey.url])
    assert result.exit_code == 0, result.output
    found: list[dict[str, Any]] = json.loads(result.output)
    return found


def parked_record(conn: redis.Redis, queue: str) -> WorkerInfo | None:
    return next((w for w in live_workers(conn) if queue in w.queues and w.parked), None)


def test_a_consumer_with_default_arguments_is_a_live_worker_in_the_cli_and_the_dashboard(
        make: Make, conn: redis.Redis, valkey: EmbeddedValkey, wire: int) -> None:
    queue = Queue(conn, "plain", wire=wire)
    ran: list[str] = []
    consumer = make(queue, lambda job: ran.append(job.id), park_cap_ms=500)
    site = "http://127.0.0.1:8042"
    with TestClient(create_app(conn, csrf_token="page"), base_url=site) as client:
        with running(consumer):
            assert wait_until(lambda: parked_record(conn, "plain") is not None, timeout=20)
            (shown,) = cli_workers(valkey)
            assert (shown["queues"], shown["pid"], shown["wire"]) == (["plain"], os.getpid(), wire)
            assert (shown["job"], shown["running"], shown["parked"]) == (None, 0, True)
            assert shown["expiry_ms"] == PARKED_EXPIRY_CAPS * 500
            (dashboard,) = client.get("/api/workers").json()["workers"]
            assert (dashboard["key"], dashboard["parked"]) == (shown["key"], True)
            queue.enqueue("JOB:1", b"")
            assert wait_until(lambda: ran == ["JOB:1"], timeout=20)
            # Done, shown by the next beat (the thread's, or the park's).
            assert wait_until(lambda: [w["done"] for w in cli_workers(valkey)] == [1],
                              timeout=20)
        assert cli_workers(valkey) == []  # a clean stop takes the record off at once
        assert client.get("/api/workers").json()["workers"] == []


@pytest.mark.parametrize("lanes", [False, True], ids=["flat", "lanes"])
@pytest.mark.pairs(("shell", "wire", "lanes"),
                   [("sync", 5, False), ("async", 6, False), ("async", 5, True)])
def test_idle_announced_consumers_cost_a_tenth_of_a_command_a_second(
        make: Make, conn: redis.Redis, wire: int, lanes: bool) -> None:
    """A lane consumer's park reads one more count (the ring's length) than a flat one's."""
    if lanes and wire == 6:
        pytest.skip("a lane consumer runs on wire=5 (the lane claim has no native twin)")
    consumers, cap_ms = 4, 800
    per_park = PER_PARK + (1 if lanes else 0)
    expiry_ms = PARKED_EXPIRY_CAPS * cap_ms
    window_s = 3 * expiry_ms / 1000  # longer than the park cap and the record's expiry
    queue = Queue(conn, "idle", wire=wire)
    crowd = [make(queue, lambda job: None, park_cap_ms=cap_ms, lanes=lanes)
             for _ in range(consumers)]
    with running(*crowd):
        assert wait_until(lambda: blocked_clients(conn) == consumers)
        assert wait_until(lambda: sum(w.parked for w in live_workers(conn)) == consumers,
                          timeout=20)
        before = command_calls(conn)
        time.sleep(window_s)  # the idle window measured, in the server's own count
        after = command_calls(conn)
        listed = live_workers(conn)  # after the window: still listed, every one parked
    assert len(listed) == consumers and all(w.parked for w in listed)
    spent = {name: calls - before.get(name, 0) for name, calls in after.items()
             if calls != before.get(name, 0)}
    parks = spent.get("blpop", 0)
    writes = spent.get("hset", 0)
    assert parks <= consumers * (window_s * 1000 / cap_ms + 1)
    assert spent.get("pexpire", 0) == writes  # each rewrite: HSET and PEXPIRE in one flush
    # No TIME, no housekeeping, no claim while parked. A SADD only relists a record that lapsed
    # (a consumer starved past its expiry on a busy machine writes it afresh): once per consumer
    # at most, and counted in the cost below.
    assert set(spent) <= {"zrange", "zcard", "llen", "blpop", "hset", "pexpire", "sadd"}, spent
    assert spent.get("sadd", 0) <= consumers, spent
    reads = sum(spent.values()) - PER_WRITE * writes
    assert reads / parks <= per_park, spent
    # Every other park rewrites the record (one more at most per consumer at the window's edges).
    assert writes - consumers <= parks / 2, spent
    # So with the default cap an idle consumer costs at most 6 commands a park (a lane one 7),
    # under 0.1 a second.
    per_capped_park = per_park + PER_WRITE / 2
    assert per_capped_park / (PARK_CAP_MS / 1000) <= 0.1


KILLED = """
import asyncio, sys
import redis
import redis.asyncio as aredis
from echomq import Consumer, Queue, aio
port, wire, cap_ms, shell = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
if shell == "sync":
    Consumer(Queue(redis.Redis(port=port), "killed", wire=wire), lambda job: None,
             park_cap_ms=cap_ms).run()
else:
    async def main():
        queue = aio.Queue(aredis.Redis(port=port), "killed", wire=wire)
        await aio.Consumer(queue, lambda job: None, park_cap_ms=cap_ms).run()
    asyncio.run(main())
"""


@contextmanager
def process_of(script: str, *args: object) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", script, *map(str, args)])
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


@pytest.mark.parametrize("shell", ["sync", "async"])
def test_a_sigkilled_parked_consumer_drops_out_within_its_expiry(
        conn: redis.Redis, valkey: EmbeddedValkey, wire: int, shell: str) -> None:
    cap_ms = 1_000
    expiry_ms = PARKED_EXPIRY_CAPS * cap_ms
    with process_of(KILLED, valkey.port, wire, cap_ms, shell) as victim:
        assert wait_until(lambda: parked_record(conn, "killed") is not None, timeout=30)
        record = parked_record(conn, "killed")
        assert record is not None and record.pid == victim.pid
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    assert record.expiry_ms == expiry_ms
    left_ms = conn.pttl(record.key)
    read_at = server_ms(conn)
    # Its last write (a flush it sent before it died included) expires within the expiry.
    assert 0 < left_ms <= expiry_ms
    assert wait_until(lambda: server_ms(conn) > read_at + left_ms, timeout=expiry_ms / 1000 + 10)
    assert [w.key for w in live_workers(conn)] == []
    assert cli_workers(valkey) == []


def test_a_busy_consumer_beats_every_two_seconds_and_parks_with_the_long_expiry(
        make: Make, conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "busy", wire=wire)
    started: list[Job] = []

    def slow(job: Job) -> None:
        started.append(job)
        time.sleep(5)

    consumer = make(queue, slow, park_cap_ms=10_000)
    with running(consumer, stop_within=10):
        assert wait_until(lambda: parked_record(conn, "busy") is not None, timeout=20)
        (parked,) = live_workers(conn)
        assert 2 * 10_000 < conn.pttl(parked.key) <= PARKED_EXPIRY_CAPS * 10_000
        queue.enqueue("JOB:slow", b"")
        assert wait_until(lambda: bool(started), timeout=20)

        def busy_beat() -> bool:
            found = live_workers(conn)
            return bool(found) and found[0].job == "JOB:slow" and not found[0].parked

        assert wait_until(busy_beat, timeout=10)  # the thread's (task's) beat, within 2 s
        (busy,) = live_workers(conn)
        assert 0 < conn.pttl(busy.key) <= busy.expiry_ms == 6_000
        # Back in its park: the record is the park's again.
        assert wait_until(lambda: parked_record(conn, "busy") is not None, timeout=20)


def test_a_consumer_denied_the_registry_parks_serves_and_logs_it_once(
        make: Make, conn: redis.Redis, valkey: EmbeddedValkey, wire: int,
        caplog: pytest.LogCaptureFixture) -> None:
    conn.acl_setuser("noregistry", enabled=True, passwords=["+secret"],
                     keys=["emq:{*", "emq:queues*"], channels=["*"], commands=["+@all"])
    try:
        denied = redis.Redis.from_url(f"redis://noregistry:secret@127.0.0.1:{valkey.port}")
        queue = Queue(denied, "denied", wire=wire)
        ran: list[str] = []
        consumer = make(queue, lambda job: ran.append(job.id), park_cap_ms=200)
        with caplog.at_level("WARNING", logger="echomq"), running(consumer):
            assert wait_until(lambda: blocked_clients(conn) == 1, timeout=20)
            time.sleep(1.0)  # parks past the record's expiry: each tries its rewrite again
            Queue(conn, "denied", wire=wire).enqueue("JOB:1", b"")
            assert wait_until(lambda: ran == ["JOB:1"], timeout=20)
        refusals = [r for r in caplog.records if "registry could not be written" in r.message]
        assert len(refusals) == 1
        assert live_workers(conn) == []
        denied.close()
    finally:
        conn.acl_deluser("noregistry")


def test_consumers_started_in_one_millisecond_keep_a_record_each(conn: redis.Redis) -> None:
    announcers = [Announcer(conn, "same", 5) for _ in range(50)]
    assert len({announcer.key for announcer in announcers}) == 50
    for announcer in announcers:
        assert announcer.beat()
    assert len(live_workers(conn)) == 50
