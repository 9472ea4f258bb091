"""``wire`` defaults to auto: each transition runs as its native ``EMQ.*`` command where the
server runs trafikey's commands, as its script otherwise (lanes always); the choice is logged
once. Explicit wires are unchanged. Both executors give byte-identical replies, so one queue may
be driven through both at once: every job still runs once, with the outcome it earned."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from echomq import (
    App,
    Job,
    Queue,
    StaleLease,
    TrafikeyMissing,
    Verdict,
    Wire,
    Wire6Unsupported,
    aio,
)
from echomq.consumer.blocking import Consumer
from echomq.embedded import EmbeddedValkey
from echomq.engine.scripts import script_for
from echomq.engine.transitions import LANE_CLAIM
from echomq.queue.graphs import GraphJob
from tests.conftest import start_server

NOW = 1_700_000_000_000
LEASE_MS = 60_000
BOUND_S = 60.0  # a bound on waiting for the consumers, never a speed


@pytest.fixture(scope="module")
def bare() -> Iterator[EmbeddedValkey]:
    """A valkey-server with no module loaded."""
    server = start_server(module=False)
    yield server
    server.stop()


@pytest.fixture
def bare_conn(bare: EmbeddedValkey) -> Iterator[redis.Redis]:
    client = bare.client()
    client.flushall()
    client.script_flush()
    client.config_resetstat()
    yield client
    client.flushall()
    client.close()


def transitions_sent(conn: redis.Redis) -> dict[str, int]:
    """EVALSHA and EMQ.* calls the server ran since its last CONFIG RESETSTAT."""
    return {name.removeprefix("cmdstat_"): int(row["calls"])
            for name, row in conn.info("commandstats").items()
            if (name == "cmdstat_evalsha" or name.startswith("cmdstat_emq.")) and row["calls"]}


def errors(conn: redis.Redis, code: str) -> int:
    """Error replies of ``code`` since the server's last CONFIG RESETSTAT (an unknown command's
    is ``ERR``)."""
    return int(conn.info("errorstats").get(f"errorstat_{code}", {}).get("count", 0))


def choices(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records
            if record.name == "echomq" and "wire auto" in record.getMessage()]


def a_round(queue: Queue, tag: str) -> None:
    """Enqueue two jobs, claim both, ack one and retry the other: the exact state checked."""
    assert queue.enqueue(f"JOB:{tag}-1", b"one", now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue_many([(f"JOB:{tag}-2", b"two")], now=NOW + 1) == [Verdict.ENQUEUED]
    first = queue.claim(lease_ms=LEASE_MS, now=NOW + 2)
    second = queue.claim(lease_ms=LEASE_MS, now=NOW + 2)
    assert first == Job(f"JOB:{tag}-1", b"one", 1, fence=1)
    assert second == Job(f"JOB:{tag}-2", b"two", 1, fence=2)
    assert queue.ack(first) is Verdict.ACKED
    assert queue.retry(second, delay_ms=10, error="boom", now=NOW + 3) is Verdict.RETRYING
    assert queue.outcome(first.id).state == "done"
    assert queue.outcome(second.id).state == "delayed"
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 1, "dead": 0, "lanes": 0}


def test_auto_is_the_default_and_runs_native_where_trafikey_is_loaded(
        conn: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    conn.config_resetstat()
    queue = Queue(conn, "auto")
    assert queue.wire is Wire.AUTO and queue.executor.chosen is None
    a_round(queue, "n")
    assert queue.executor.chosen is Wire.NATIVE
    assert transitions_sent(conn) == {"emq.enqueue": 1, "emq.enqueue_many": 1, "emq.claim": 2,
                                      "emq.ack": 1, "emq.retry": 1}
    [chosen] = choices(caplog)
    assert chosen.levelno == logging.INFO
    assert chosen.getMessage() == (
        "queue auto: wire auto runs each transition as its native EMQ.* command "
        "(the server ran EMQ.ENQUEUE; lanes run their scripts)")


def test_lanes_run_their_scripts_beside_native_transitions(conn: redis.Redis) -> None:
    queue = Queue(conn, "lanes")
    assert queue.enqueue("JOB:flat", b"f", now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:a", b"a", lane="tenant-a", now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:b", b"b", lane="tenant-b", now=NOW) is Verdict.ENQUEUED
    conn.script_load(script_for(LANE_CLAIM).source)
    conn.config_resetstat()
    lane_jobs = [queue.claim_lane(lease_ms=LEASE_MS, now=NOW + 1) for _ in range(2)]
    flat = queue.claim(lease_ms=LEASE_MS, now=NOW + 1)
    assert sorted((job.id, job.lane) for job in lane_jobs if job) == \
        [("JOB:a", "tenant-a"), ("JOB:b", "tenant-b")]
    assert flat == Job("JOB:flat", b"f", 1, fence=3)
    for job in (*lane_jobs, flat):
        assert job is not None and queue.ack(job) is Verdict.ACKED
    assert transitions_sent(conn) == {"evalsha": 2, "emq.claim": 1, "emq.ack": 3}
    assert queue.executor.chosen is Wire.NATIVE
    assert queue.claim_lane(now=NOW + 3) is None
    assert queue.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}


def test_auto_runs_scripts_on_a_server_without_trafikey_and_says_why(
        bare_conn: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    queue = Queue(bare_conn, "bare")
    a_round(queue, "s")
    assert queue.executor.chosen is Wire.SCRIPTS
    assert queue.enqueue("JOB:lane", b"l", lane="g", now=NOW) is Verdict.ENQUEUED
    lane_job = queue.claim_lane(lease_ms=LEASE_MS, now=NOW + 4)
    assert lane_job is not None and lane_job.lane == "g"
    assert queue.ack(lane_job) is Verdict.ACKED
    assert errors(bare_conn, "ERR") == 1  # the first EMQ.ENQUEUE, and never another
    # nine runs, and the first EVALSHA of each script but the first met NOSCRIPT (SCRIPT FLUSH
    # in the fixture): each loaded once and sent again, as on wire 5
    assert errors(bare_conn, "NOSCRIPT") == 6
    assert transitions_sent(bare_conn) == {"evalsha": 9 + 6}
    [chosen] = choices(caplog)
    assert chosen.levelno == logging.INFO
    assert chosen.getMessage() == (
        "queue bare: wire auto runs each transition as its Lua script (the server does not "
        "know EMQ.ENQUEUE: trafikey is not loaded there)")


@pytest.mark.parametrize("first", ["enqueue", "enqueue_many", "enqueue_after", "claim",
                                   "settle_leased", "asyncio"])
def test_whatever_call_comes_first_runs_once_as_its_script(bare_conn: redis.Redis,
                                                           bare: EmbeddedValkey,
                                                           first: str) -> None:
    """The refused native command ran nothing; the call is sent again as its script, once:
    a single call, a pipeline, a transaction, a settle with its watch tokens, asyncio."""
    queue = Queue(bare_conn, "first")
    refused, runs = 1, 1  # native commands refused as unknown; scripts run
    if first == "enqueue":
        assert queue.enqueue("JOB:1", b"x", now=NOW) is Verdict.ENQUEUED
    elif first == "enqueue_many":
        assert queue.enqueue_many([("JOB:1", b"x"), ("JOB:1", b"y")], now=NOW) == \
            [Verdict.ENQUEUED, Verdict.DUPLICATE]
    elif first == "enqueue_after":
        assert queue.enqueue_graph([GraphJob("JOB:1", b"x", ())], now=NOW) == [Verdict.ENQUEUED]
        refused, runs = 2, 2  # its admission and its seal, in one transaction: EXECABORT
        assert errors(bare_conn, "EXECABORT") == 1
    elif first == "asyncio":
        async def enqueue() -> Verdict:
            client = aredis.Redis(port=bare.port)
            try:
                return await aio.Queue(client, "first").enqueue("JOB:1", b"x", now=NOW)
            finally:
                await client.aclose()
        assert asyncio.run(enqueue()) is Verdict.ENQUEUED
        refused = errors(bare_conn, "ERR")  # an asyncio client's handshake meets ERR too
    else:
        Queue(bare_conn, "first", wire=5).enqueue("JOB:1", b"x", now=NOW)
        bare_conn.config_resetstat()
        if first == "claim":
            assert queue.claim(now=NOW) == Job("JOB:1", b"x", 1, fence=1)
        else:
            _, jobs = queue.settle_leased([], 1, LEASE_MS, None, NOW, watch=True)
            assert jobs == [Job("JOB:1", b"x", 1, fence=1)]
    assert errors(bare_conn, "ERR") == refused
    assert transitions_sent(bare_conn) == {"evalsha": runs}
    state = "active" if first in ("claim", "settle_leased") else "pending"
    assert queue.outcome("JOB:1").state == state
    assert bare_conn.hget("emq:{first}:job:JOB:1", "p") == b"x"
    if first != "asyncio":
        assert queue.executor.chosen is Wire.SCRIPTS


def test_a_user_who_cannot_list_modules_gets_native_commands(valkey: EmbeddedValkey,
                                                            conn: redis.Redis) -> None:
    conn.execute_command("ACL", "SETUSER", "worker", "reset", "on", ">pw", "~emq:*",
                         "+@all", "-@admin")
    user = redis.Redis(port=valkey.port, username="worker", password="pw")
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.execute_command("MODULE", "LIST")
        queue = Queue(user, "acl", check_policy=False)
        conn.config_resetstat()
        a_round(queue, "acl")
        assert queue.executor.chosen is Wire.NATIVE
        assert "evalsha" not in transitions_sent(conn)
    finally:
        user.close()
        conn.execute_command("ACL", "DELUSER", "worker")


def test_a_user_denied_the_native_commands_gets_scripts(
        valkey: EmbeddedValkey, conn: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    conn.execute_command("ACL", "SETUSER", "scripted", "reset", "on", ">pw", "~emq:*",
                         "+@all", "-@admin", *(f"-emq.{verb}" for verb in (
                             "enqueue", "enqueue_many", "claim", "ack", "retry")))
    user = redis.Redis(port=valkey.port, username="scripted", password="pw")
    try:
        queue = Queue(user, "denied", check_policy=False)
        conn.config_resetstat()
        a_round(queue, "d")
        assert queue.executor.chosen is Wire.SCRIPTS
        assert set(transitions_sent(conn)) == {"evalsha"}
        assert [record.getMessage() for record in choices(caplog)] == [
            "queue denied: wire auto runs each transition as its Lua script (this ACL user may "
            "not run EMQ.ENQUEUE)"]
    finally:
        user.close()
        conn.execute_command("ACL", "DELUSER", "scripted")


def test_explicit_wires_are_unchanged(conn: redis.Redis, bare_conn: redis.Redis) -> None:
    conn.config_resetstat()
    a_round(Queue(conn, "five", wire=5), "5")
    assert set(transitions_sent(conn)) == {"evalsha"}
    native = Queue(conn, "six", wire=6)
    with pytest.raises(Wire6Unsupported):
        native.claim_lane()
    with pytest.raises(Wire6Unsupported):
        native.enqueue("JOB:1", b"x", lane="g")
    with pytest.raises(TrafikeyMissing):
        Queue(bare_conn, "six", wire=6).enqueue("JOB:1", b"x")
    assert bare_conn.dbsize() == 0


def test_the_app_and_the_sharded_queue_share_one_choice(
        conn: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    app = App(conn, "tasks", check_policy=False)
    assert app.wire is Wire.AUTO and app.queue.wire is Wire.AUTO
    sharded = Queue(conn, "spread", shards=4)
    assert sharded.enqueue_many([(f"JOB:{n}", b"x") for n in range(16)]) == \
        [Verdict.ENQUEUED] * 16
    assert {shard.executor for shard in sharded.shard_queues} == {sharded.executor}
    assert sharded.executor.chosen is Wire.NATIVE
    assert [record.getMessage().split(":")[0] for record in choices(caplog)] == ["queue spread"]


@pytest.mark.parametrize("wires", [(5, 6), (5, "auto")])
def test_a_queue_driven_through_both_executors_runs_each_job_once(
        conn: redis.Redis, wires: tuple[Any, Any]) -> None:
    """A producer and a claimer on each wire (auto: native here), crossing: a job admitted on one
    is leased, renewed, retried, recovered and settled on the other, and every verdict and state
    is exact."""
    five, six = (Queue(conn, "mixed", wire=wire) for wire in wires)
    ids = [f"JOB:{n}" for n in range(6)]
    for n, job_id in enumerate(ids):
        assert (five, six)[n % 2].enqueue(job_id, b"p", now=NOW + n) is Verdict.ENQUEUED
        assert (six, five)[n % 2].enqueue(job_id, b"again", now=NOW + n) is Verdict.DUPLICATE
    jobs = [(six, five)[n % 2].claim(lease_ms=100, now=NOW + 10) for n in range(6)]
    assert [job.id if job else None for job in jobs] == ids
    assert [job.fence if job else None for job in jobs] == [1, 2, 3, 4, 5, 6]
    first, second, third, fourth, fifth, sixth = (job for job in jobs if job)
    assert five.extend(first, lease_ms=LEASE_MS, now=NOW + 20) is Verdict.EXTENDED
    assert six.ack(first) is Verdict.ACKED
    assert five.ack(first) is Verdict.ACKED  # a replay: what the first ack did, nothing more
    assert six.ack(second) is Verdict.ACKED
    assert five.retry(third, delay_ms=5, error="once", now=NOW + 30) is Verdict.RETRYING
    assert six.promote(now=NOW + 40) == 1
    again = five.claim(lease_ms=LEASE_MS, now=NOW + 40)
    assert again == Job(third.id, b"p", 2, fence=7)
    with pytest.raises(StaleLease):  # the first lease's fence is spent
        six.ack(third)
    assert six.ack(again) is Verdict.ACKED
    # fourth, fifth and sixth: their 100 ms leases lapse, recovered by the other wire
    assert five.ack(fifth) is Verdict.ACKED
    assert six.recover(now=NOW + 200) == 2
    back = [five.claim(lease_ms=LEASE_MS, now=NOW + 201), six.claim(lease_ms=LEASE_MS,
                                                                       now=NOW + 201)]
    assert [(job.id, job.attempt) for job in back if job] == [(fourth.id, 2), (sixth.id, 2)]
    for job in back:
        assert job is not None and (six, five)[back.index(job)].ack(job) \
            is Verdict.ACKED
    assert [five.outcome(job_id).state for job_id in ids] == ["done"] * 6
    assert [six.outcome(job_id).attempts for job_id in ids] == [1, 1, 2, 2, 1, 2]
    assert five.counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0, "lanes": 0}
    assert six.wire == Wire.NATIVE or six.executor.chosen is Wire.NATIVE


class Runs:
    """What the consumers' handlers ran: each job's attempts, and how many each wire ran. A job
    whose number is a multiple of 10 fails its first attempt."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.per_job: Counter[str] = Counter()
        self.per_wire: Counter[Any] = Counter()

    def handler(self, wire: Any) -> Callable[[Job], None]:
        def handle(job: Job) -> None:
            with self.lock:
                self.per_job[job.id] += 1
                self.per_wire[wire] += 1
            if job.attempt == 1 and int(job.id.partition(":")[2]) % 10 == 0:
                raise RuntimeError("the first attempt fails")
        return handle


@contextmanager
def running(consumers: list[Consumer]) -> Iterator[None]:
    """``consumers`` each run in a thread of its own; stopped and joined on the way out."""
    threads = [threading.Thread(target=consumer.run, daemon=True) for consumer in consumers]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for consumer in consumers:
            consumer.stop()
        for thread in threads:
            thread.join(BOUND_S)


@pytest.mark.parametrize("wires", [(5, 6), (6, 5), ("auto", 5)])
def test_consumers_on_two_wires_share_a_queue_and_run_each_job_once(
        valkey: EmbeddedValkey, conn: redis.Redis, wires: tuple[Any, Any]) -> None:
    """Two consumers, one on each wire, and a producer on each, on one queue: every job done
    exactly once; a job that fails its first attempt is retried and done on its second."""
    count = 200
    runs = Runs()
    consumers = [Consumer(Queue(valkey.client(), "both", wire=wire, check_policy=False),
                          runs.handler(wire), retry_delay_ms=0, max_attempts=3, announce=False,
                          lease_ms=LEASE_MS)
                 for wire in wires]
    producers = [Queue(conn, "both", wire=wire, check_policy=False) for wire in wires]
    ids = [f"JOB:{n}" for n in range(count)]
    with running(consumers):
        for n, job_id in enumerate(ids):
            assert producers[n % 2].enqueue(job_id, b"x") is Verdict.ENQUEUED
        assert until(lambda: all(producers[0].outcome(job_id).state == "done"
                                 for job_id in ids))
    failing = set(ids[::10])
    assert runs.per_job == Counter({job_id: 2 if job_id in failing else 1 for job_id in ids})
    assert [producers[1].outcome(job_id).attempts for job_id in sorted(failing)] == \
        [2] * len(failing)
    assert producers[0].counts() == {"pending": 0, "active": 0, "delayed": 0, "dead": 0,
                                     "lanes": 0}
    assert sum(runs.per_wire.values()) == count + len(failing)


def until(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` until it holds, within ``BOUND_S`` (a bound on waiting)."""
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
