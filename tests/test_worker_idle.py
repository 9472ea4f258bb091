"""An idle ``echomq worker`` process costs the server what an idle consumer does: its record in the
registry of workers rides in the flush of the read before each park (rewritten every other park
when parks run to their cap), and the record's thread, which beats every 2 s while a job runs,
sends nothing while the consumer parks. ``echomq workers`` still lists it, parked, its last beat
at most two park caps old.

The cost is counted, not timed: the server's own count (``INFO commandstats``) over a window of
whole parks, from just after one ``BLPOP`` began to just after the ``PARKS``-th after it began.
The parks are shortened (``--park-cap-ms``) so the window is short; what a park costs does not
depend on its length, so the count per park gives the cost at the default cap.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from echomq.cli.main import main
from echomq.consumer.loop import PARK_CAP_MS
from echomq.consumer.presence import PARKED_EXPIRY_CAPS, WORKERS_KEY, Announcer
from echomq.consumer.roster import live_workers
from echomq.embedded import EmbeddedValkey
from echomq.engine.server_time import server_ms
from echomq.queue.connection import HEALTH_CHECK_S
from tests.test_consumer import blocked_clients, command_calls
from tests.test_worker import Workers, wait_until, workers  # noqa: F401

CAP_MS = 2_000
# Parks in the window: past the record's expiry (three caps) twice, so a record that only the
# 2 s beat kept alive, or none at all, would show.
PARKS = 8
# One park's read (three ZRANGEs and a ZCARD) and its BLPOP, as tests/test_parking.py counts.
PER_READ, PER_PARK = 4, 5
# The record's rewrite: HSET and PEXPIRE.
PER_WRITE = 2
# A park longer than the worker client's health check interval (HEALTH_CHECK_S, 30 s; the
# default cap) has the client PING before its read: the read goes on a connection of the pool,
# idle since the last park's.
HEALTH_PING = 1
# A snapshot of the count is taken within a 20 ms poll of the BLPOP it follows; on a loaded
# machine it can come late enough that the next park's read (before its BLPOP) is counted too,
# one read at most: the park it starts lasts a whole cap (2 s).
LATE_READS = PER_READ + PER_WRITE
# How old the last beat may be when read: two park caps (the promise) and one second for a late
# wake-up of the consumer on a loaded machine, well under the third cap.
BEAT_SLACK_MS = 1_000
BOUND_S = 60.0

TARGETS = {
    # A plain handler: the blocking consumer.
    "handler": ("idle", "tests.handlers:work"),
    # An App of async tasks: the asyncio consumer, its record still beaten by a thread.
    "async-app": (None, "tests.tasks_app:async_app"),
}


def blpops(conn: redis.Redis) -> int:
    return command_calls(conn).get("blpop", 0)


def after_parks(conn: redis.Redis, count: int, start: int) -> dict[str, int]:
    """The server's count just after the ``count``-th ``BLPOP`` since ``start`` (their number
    then) began."""
    assert wait_until(lambda: blpops(conn) >= start + count,
                      timeout=count * CAP_MS / 1000 + BOUND_S)
    return command_calls(conn)


def listed(valkey: EmbeddedValkey) -> list[dict[str, Any]]:
    result = CliRunner().invoke(main, ["workers", "--json", "--url", valkey.url])
    assert result.exit_code == 0, result.output
    found: list[dict[str, Any]] = json.loads(result.output)
    return found


@pytest.mark.parametrize("target", list(TARGETS))
def test_an_idle_worker_process_costs_a_tenth_of_a_command_a_second(
        workers: Callable[..., Workers], conn: redis.Redis,  # noqa: F811
        valkey: EmbeddedValkey, target: str) -> None:
    queue, handler = TARGETS[target]
    supervisor = workers(queue, "--park-cap-ms", str(CAP_MS), handler=handler, on_ack=None)
    assert wait_until(lambda: blocked_clients(conn) == 1, timeout=BOUND_S), supervisor.log()
    assert wait_until(lambda: len(live_workers(conn)) == 1, timeout=BOUND_S), supervisor.log()
    before = after_parks(conn, 1, blpops(conn))
    after = after_parks(conn, PARKS, before.get("blpop", 0))
    spent = {name: calls - before.get(name, 0) for name, calls in after.items()
             if calls != before.get(name, 0)}

    # Nothing but the parks: no TIME, no SADD (the record's 2 s beat), no housekeeping, no claim.
    assert set(spent) <= {"zrange", "zcard", "blpop", "hset", "pexpire"}, spent
    parks = spent["blpop"]  # PARKS, one more if the last snapshot came a whole cap late
    assert PARKS <= parks <= PARKS + 1, spent
    writes = spent.get("hset", 0)
    assert spent.get("pexpire", 0) == writes, spent  # each rewrite: HSET and PEXPIRE together
    assert writes <= parks // 2 + 1, spent  # every other park (one more at the window's edge)
    reads = sum(spent.values()) - parks - PER_WRITE * writes
    assert reads <= PER_READ * (parks + 1), spent
    per_park = sum(spent.values()) / parks
    assert per_park <= PER_PARK + PER_WRITE / 2 + LATE_READS / parks, spent
    # So at the default cap (75 s) the whole process costs a read and a BLPOP a park, the record
    # every other park, and, its parks being longer than the client's health check interval
    # (30 s), the PING that check sends before each read: 0.093 commands a second.
    assert PARK_CAP_MS / 1000 > HEALTH_CHECK_S > CAP_MS / 1000  # measured here without it
    per_capped_park = PER_PARK + PER_WRITE / 2 + HEALTH_PING
    assert per_capped_park / (PARK_CAP_MS / 1000) <= 0.1

    # Still listed, parked, its last beat within two park caps.
    (shown,) = listed(valkey)
    assert shown["pid"] in set(supervisor.group()) - {supervisor.process.pid}
    assert (shown["parked"], shown["job"], shown["running"]) == (True, None, 0)
    assert shown["expiry_ms"] == PARKED_EXPIRY_CAPS * CAP_MS
    assert server_ms(conn) - shown["beat_ms"] <= 2 * CAP_MS + BEAT_SLACK_MS
    assert supervisor.terminate(within=BOUND_S) == 0
    assert listed(valkey) == []  # a clean stop deleted the record at once


def test_an_asyncio_consumers_park_relists_a_record_kept_on_a_blocking_client(
        conn: redis.Redis) -> None:
    """A worker process's record is kept on a blocking client (its thread beats it); the park of
    its asyncio consumer puts it back on ``emq:workers`` after a lapse through that client."""
    announcer = Announcer(conn, "relisted", 5)
    assert conn.smembers(WORKERS_KEY) == set()
    assert asyncio.run(announcer.arelist()) is True
    assert conn.smembers(WORKERS_KEY) == {announcer.key.encode()}
