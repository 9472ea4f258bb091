"""The registry of live workers: real ``echomq worker`` processes announce themselves, show the job
in hand, drop out within their expiry when killed and at once on a clean stop; the operator reads
them through ``echomq workers``, ``echomq stats`` and the dashboard's ``api/workers``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest
import redis
import redis.asyncio as aredis
from click.testing import CliRunner
from hypothesis import settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from starlette.testclient import TestClient

from echomq import Consumer, Job, Queue, aio
from echomq.cli.main import main
from echomq.consumer.presence import (
    EXPIRY_MS,
    WORKERS_KEY,
    Announcer,
    announced as announced_consumer,
    announced_async,
)
from echomq.consumer.roster import WorkerInfo, live_workers
from echomq.embedded import EmbeddedValkey
from echomq.ops import admin
from echomq.ops.dashboard import create_app
from tests.conftest import start_server
from tests.test_worker import Workers, as_text, wait_until, workers  # noqa: F401

QUEUE = "mailq"
# A record read after its expiry is gone at once (lazy expiry on access); this covers the polling
# step and the time between two reads.
READ_SLACK_MS = 500


def children(supervisor: Workers) -> set[int]:
    return set(supervisor.group()) - {supervisor.process.pid}


def announced(conn: redis.Redis, count: int) -> list[WorkerInfo]:
    found: list[WorkerInfo] = []

    def enough() -> bool:
        found[:] = live_workers(conn)
        return len(found) == count

    assert wait_until(enough, timeout=20), found
    return found


def cli(valkey: EmbeddedValkey, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--url", valkey.url])
    assert result.exit_code == 0, result.output
    return result.output


def test_each_worker_process_announces_itself_and_its_job_in_hand(
        workers: Callable[..., Workers], conn: redis.Redis) -> None:  # noqa: F811
    supervisor = workers(QUEUE, "--concurrency", "2")
    found = announced(conn, 2)
    assert {w.pid for w in found} == children(supervisor)
    assert {(w.queue, w.job) for w in found} == {(QUEUE, None)}
    assert all(w.host and w.beat_ms >= w.started_ms for w in found)

    queue = Queue(conn, QUEUE, wire=5)
    queue.enqueue("JOB:blocks", b"victim")
    assert wait_until(lambda: conn.get("test:victim") is not None, timeout=20)
    victim = int(as_text(conn.get("test:victim") or b""))

    def in_hand(job_id: str) -> WorkerInfo | None:
        return next((w for w in live_workers(conn) if w.job == job_id), None)

    assert wait_until(lambda: in_hand("JOB:blocks") is not None, timeout=10)
    holder = in_hand("JOB:blocks")
    assert holder is not None and holder.pid == victim
    assert holder.job_since_ms is not None
    assert holder.job_since_ms <= admin.server_time_ms(conn)

    # A handler that keeps the CPU busy in Python for longer than the expiry: its worker beats
    # on, so its record never lapses while the job runs.
    queue.enqueue("JOB:spins", b"spin:%d" % (EXPIRY_MS * 2))
    assert wait_until(lambda: in_hand("JOB:spins") is not None, timeout=10)

    def beat_past_expiry() -> bool:
        spinner = in_hand("JOB:spins")
        assert spinner is not None and spinner.job_since_ms is not None, live_workers(conn)
        return spinner.beat_ms - spinner.job_since_ms > EXPIRY_MS

    assert wait_until(beat_past_expiry, timeout=EXPIRY_MS / 1000 + 10)


@pytest.fixture(scope="module")
def bare() -> Iterator[EmbeddedValkey]:
    """A valkey-server with no module loaded."""
    server = start_server(module=False)
    yield server
    server.stop()


def shown_wires(server: EmbeddedValkey) -> dict[int, list[int | str]]:
    """The wire of each live worker's record, by pid, as ``echomq workers`` and the dashboard
    show them (each must show the same)."""
    listed = {w["pid"]: w["wire"] for w in json.loads(cli(server, "workers", "--json"))}
    with server.client() as conn, TestClient(create_app(conn),
                                              base_url="http://127.0.0.1:8042") as page:
        served = {w["pid"]: w["wire"] for w in page.get("/api/workers").json()["workers"]}
    return {pid: [listed[pid], served.get(pid, "missing")] for pid in listed}


def test_worker_processes_on_wire_auto_show_the_wire_the_server_gave_them(
        workers: Callable[..., Workers], valkey: EmbeddedValkey, conn: redis.Redis,  # noqa: F811
        bare: EmbeddedValkey) -> None:
    """On the server with trafikey the first reply was a native command's: 6; on the one
    without, the first native command was refused: 5. Both start with no job waiting."""
    started = [(valkey, workers(QUEUE), 6), (bare, workers(QUEUE, url=bare.url), 5)]
    try:
        for server, supervisor, wire in started:
            shown: list[dict[int, list[int | str]]] = [{}]

            def settled(server: EmbeddedValkey = server, wire: int = wire,
                        shown: list[dict[int, list[int | str]]] = shown) -> bool:
                shown[0] = shown_wires(server)
                return len(shown[0]) == 1 and list(shown[0].values()) == [[wire, wire]]

            assert wait_until(settled, timeout=20), (shown[0], supervisor.log())
            assert set(shown[0]) == children(supervisor)
    finally:
        with bare.client() as bare_conn:
            bare_conn.flushall()


def test_an_announced_consumer_shows_auto_only_until_the_first_reply(
        valkey: EmbeddedValkey, conn: redis.Redis, bare: EmbeddedValkey) -> None:
    """A blocking consumer on the server with trafikey, an asyncio one on the server without:
    their records say ``auto`` until their queue's first call is answered, then the wire it
    took."""
    consumer = Consumer(Queue(conn, QUEUE), lambda job: None)
    with announced_consumer(consumer):
        assert shown_wires(valkey) == {os.getpid(): ["auto", "auto"]}
        consumer.queue.enqueue("JOB:1", b"")
        assert consumer.announcer is not None and consumer.announcer.beat()
        assert shown_wires(valkey) == {os.getpid(): [6, 6]}

    async def on_the_bare_server() -> list[dict[int, list[int | str]]]:
        client = aredis.Redis(port=bare.port)
        consumer = aio.Consumer(aio.Queue(client, QUEUE), lambda job: None)
        shown = []
        try:
            async with announced_async(consumer):
                shown.append(shown_wires(bare))
                await consumer.queues[0].enqueue("JOB:1", b"")
                assert consumer.announcer is not None
                assert await consumer.announcer._awrite(consumer.announcer._arefresh)
                shown.append(shown_wires(bare))
        finally:
            await client.flushall()
            await client.aclose()
        return shown

    assert asyncio.run(on_the_bare_server()) == [{os.getpid(): ["auto", "auto"]},
                                                 {os.getpid(): [5, 5]}]


def test_a_killed_worker_drops_out_within_its_expiry(
        workers: Callable[..., Workers], conn: redis.Redis) -> None:  # noqa: F811
    """Killed busy or parked: its record's own expiry, 6 s after a beat of its thread, three
    park caps (here 3 s) after a park wrote it."""
    workers(QUEUE, "--concurrency", "2", "--park-cap-ms", "1000")
    victim = announced(conn, 2)[0]
    os.kill(victim.pid, signal.SIGKILL)
    last = [victim]

    def gone() -> bool:
        record = {w.key: w for w in live_workers(conn)}.get(victim.key)
        if record is not None:
            last[0] = record
        return record is None

    assert wait_until(gone, timeout=EXPIRY_MS / 1000 + 10)
    assert last[0].expiry_ms <= EXPIRY_MS
    assert admin.server_time_ms(conn) - last[0].beat_ms <= last[0].expiry_ms + READ_SLACK_MS
    assert victim.key.encode() not in conn.smembers(WORKERS_KEY)  # pruned on read


def test_the_operator_lists_workers_and_a_clean_stop_removes_them_all(
        workers: Callable[..., Workers], valkey: EmbeddedValkey,  # noqa: F811
        conn: redis.Redis) -> None:
    Queue(conn, QUEUE).enqueue("JOB:one", b"")
    admin.register_queue(conn, QUEUE)
    supervisor = workers(QUEUE, "--concurrency", "2")
    found = announced(conn, 2)

    listed = json.loads(cli(valkey, "workers", "--json"))
    assert {(w["pid"], w["queue"]) for w in listed} == {(w.pid, QUEUE) for w in found}
    assert set(listed[0]) >= {"host", "pid", "queue", "wire", "started_ms", "job",
                              "job_since_ms", "done", "failed", "beat_ms"}
    table = cli(valkey, "workers")
    # A worker with no job in hand shows "idle", or "parked" once its consumer parks (the
    # record rides the park); the queue's one job is done by then or in hand.
    assert all(str(w.pid) in table for w in found)
    assert "idle" in table or "parked" in table
    (stats,) = json.loads(cli(valkey, "stats", "--json"))
    assert (stats["name"], stats["workers"]) == (QUEUE, 2)
    assert "workers" in cli(valkey, "stats")

    assert supervisor.terminate(within=20) == 0
    assert live_workers(conn) == []
    assert conn.smembers(WORKERS_KEY) == set()
    assert not any(conn.exists(w.key) for w in found)  # deleted, not left to expire
    assert "no live workers" in cli(valkey, "workers")


@pytest.fixture
def no_registry_url(valkey: EmbeddedValkey, conn: redis.Redis) -> Iterator[str]:
    """A user who may run a queue's transitions but not touch the worker registry."""
    conn.acl_setuser("noregistry", enabled=True, passwords=["+secret"],
                     keys=["emq:{*", "emq:queues*", "test:*"], channels=["*"],
                     commands=["+@all"])
    yield f"redis://noregistry:secret@127.0.0.1:{valkey.port}"
    conn.acl_deluser("noregistry")


def test_a_worker_denied_the_registry_logs_once_and_serves(
        workers: Callable[..., Workers], conn: redis.Redis,  # noqa: F811
        no_registry_url: str) -> None:
    supervisor = workers(QUEUE, url=no_registry_url)
    queue = Queue(conn, QUEUE)
    for n in range(3):
        queue.enqueue(f"JOB:{n}", b"")
    assert wait_until(lambda: conn.hlen("test:acked") == 3, timeout=20), supervisor.log()
    assert supervisor.log().count("worker registry could not be written") == 1
    assert live_workers(conn) == []
    # The same user still reads depths: stats shows no workers rather than failing.
    shown = CliRunner().invoke(main, ["stats", "--json", "--url", no_registry_url])
    assert shown.exit_code == 0, shown.output
    assert [(s["name"], s["workers"]) for s in json.loads(shown.output)] == [(QUEUE, 0)]
    assert supervisor.terminate(within=20) == 0


# in process ----------------------------------------------------------------------------------


def test_the_dashboard_lists_live_workers(conn: redis.Redis) -> None:
    announcer = Announcer(conn, "mail", 6)
    release = threading.Event()
    handler = announcer.track(lambda job: release.wait(10))
    running = threading.Thread(target=handler, args=(Job("JOB:1", b"", 1),))
    site = "http://127.0.0.1:8042"
    with TestClient(create_app(conn, csrf_token="page"), base_url=site) as client:
        announcer.start()
        running.start()
        try:
            assert wait_until(lambda: announcer.beat() and bool(
                client.get("/api/workers").json()["workers"][0]["job"]), timeout=5)
            answer = client.get("/api/workers").json()
            (shown,) = answer["workers"]
            assert (shown["pid"], shown["queue"], shown["wire"], shown["job"]) == (
                os.getpid(), "mail", 6, "JOB:1")
            assert shown["job_since_ms"] <= answer["server_time_ms"]
        finally:
            release.set()
            running.join()
            announcer.stop()
        assert client.get("/api/workers").json()["workers"] == []
        # Read-only: even a same-origin POST with the page's token changes nothing here.
        posted = client.post("/api/workers", headers={"Origin": site, "X-EchoMQ-CSRF": "page"})
        assert posted.status_code == 405


def test_the_record_counts_jobs_done_and_failed_async_ones_when_they_end(
        conn: redis.Redis) -> None:
    announcer = Announcer(conn, "mail", 5)

    async def later(job: Job) -> None:
        assert announcer.fields(0)["job"] == job.id  # still in hand while awaited
        if job.payload == b"fail":
            raise ValueError("no")

    def plain(job: Job) -> None:
        if job.payload == b"fail":
            raise KeyError("no")

    for handler in (announcer.track(plain), announcer.track(later)):
        for payload in (b"", b"fail"):
            with pytest.raises((KeyError, ValueError)) if payload else _nothing():
                result = handler(Job("JOB:x", payload, 1))
                if asyncio.iscoroutine(result):
                    asyncio.run(result)
    fields = announcer.fields(1_000)
    assert (fields["done"], fields["failed"], fields["job"], fields["job_since_ms"]) == (
        2, 2, "", "")


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_reading_prunes_members_whose_record_expired(conn: redis.Redis) -> None:
    conn.sadd(WORKERS_KEY, "emq:worker:gone:1:1")
    announcer = Announcer(conn, "mail", 5)
    assert announcer.beat()
    assert [w.key for w in live_workers(conn)] == [announcer.key]
    assert conn.smembers(WORKERS_KEY) == {announcer.key.encode()}
    assert 0 < conn.pttl(announcer.key) <= EXPIRY_MS


class RecordMachine(RuleBasedStateMachine):
    """Jobs begin and end, beats write the record, a clean stop removes it: what the registry
    shows after each beat is the model's job in hand and counts."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.conn = redis.Redis(port=port)
        self.conn.delete(WORKERS_KEY)
        self.announcer = Announcer(self.conn, "mail", 5)
        self.job: str | None = None
        self.done = self.failed = 0
        self.written = False

    @rule(n=st.integers(0, 9))
    def begin(self, n: int) -> None:
        self.announcer.began(Job(f"JOB:{n}", b"", 1))
        self.job = f"JOB:{n}"

    @precondition(lambda self: self.job is not None)
    @rule(failed=st.booleans())
    def end(self, failed: bool) -> None:
        self.announcer.ended(failed=failed)
        self.job = None
        self.failed += failed
        self.done += not failed

    @rule()
    def beat(self) -> None:
        assert self.announcer.beat()
        self.written = True
        (shown,) = live_workers(self.conn)
        assert (shown.job, shown.done, shown.failed) == (self.job, self.done, self.failed)
        assert (shown.job_since_ms is None) == (self.job is None)
        assert shown.job_since_ms is None or shown.job_since_ms <= shown.beat_ms

    @rule()
    def stop(self) -> None:
        self.announcer.stop()
        self.written = False
        assert live_workers(self.conn) == []

    @invariant()
    def listed_only_once_written(self) -> None:
        assert len(self.conn.smembers(WORKERS_KEY)) == int(self.written)

    def teardown(self) -> None:
        self.conn.delete(self.announcer.key, WORKERS_KEY)
        self.conn.close()


def test_the_record_follows_its_worker(valkey: EmbeddedValkey) -> None:
    run_state_machine_as_test(lambda: RecordMachine(valkey.port),
                              settings=settings(max_examples=40, stateful_step_count=30,
                                                deadline=None))


# Consumers run in a process of the user's own (a script, a web process) ----------------------


def record_of(conn: redis.Redis, queue: str) -> WorkerInfo | None:
    return next((w for w in live_workers(conn) if queue in w.queues), None)


def in_hand_shown(conn: redis.Redis, queue: str, job_id: str) -> bool:
    record = record_of(conn, queue)
    return record is not None and (record.job, record.running) == (job_id, 1)


@pytest.mark.parametrize("wire", [5, 6])
def test_a_consumer_run_in_the_users_process_is_a_live_worker(
        conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "script", wire=wire)
    started, release = threading.Event(), threading.Event()

    def handler(job: Job) -> None:
        started.set()
        release.wait(30)

    consumer = Consumer(queue, handler, park_cap_ms=200, announce=True)
    thread = threading.Thread(target=consumer.run)
    thread.start()
    try:
        (record,) = announced(conn, 1)
        assert (record.queues, record.pid, record.wire) == (["script"], os.getpid(), wire)
        assert (record.job, record.running) == (None, 0)
        queue.enqueue("JOB:held", b"")
        assert started.wait(20)
        assert wait_until(lambda: in_hand_shown(conn, "script", "JOB:held"), timeout=20)
    finally:
        release.set()
        consumer.stop()
        thread.join()
    assert live_workers(conn) == []  # a clean stop takes the record off at once

    ran = threading.Event()
    unlisted = Consumer(queue, lambda job: ran.set(), park_cap_ms=200, announce=False)
    thread = threading.Thread(target=unlisted.run)
    thread.start()
    try:
        queue.enqueue("JOB:unlisted", b"")
        assert ran.wait(20)
        assert live_workers(conn) == []
    finally:
        unlisted.stop()
        thread.join()


@pytest.mark.parametrize("wire", [5, 6])
def test_an_asyncio_consumer_run_in_the_users_process_is_a_live_worker(
        valkey: EmbeddedValkey, conn: redis.Redis, wire: int) -> None:

    async def poll(condition: Callable[[], bool], timeout: float) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout
        while not await asyncio.to_thread(condition):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def scenario() -> None:
        client = aredis.Redis(port=valkey.port)
        queue = aio.Queue(client, "web", wire=wire)
        started, release = asyncio.Event(), asyncio.Event()

        async def handler(job: Job) -> None:
            started.set()
            await release.wait()

        consumer = aio.Consumer(queue, handler, park_cap_ms=200, concurrency=2, announce=True)
        running = asyncio.create_task(consumer.run())
        try:
            assert await poll(lambda: record_of(conn, "web") is not None, timeout=20)
            record = record_of(conn, "web")
            assert record is not None
            assert (record.queues, record.pid, record.wire) == (["web"], os.getpid(), wire)
            assert (record.job, record.running) == (None, 0)
            await queue.enqueue("JOB:awaited", b"")
            await asyncio.wait_for(started.wait(), 20)
            assert await poll(lambda: in_hand_shown(conn, "web", "JOB:awaited"), timeout=20)
        finally:
            release.set()
            consumer.stop()
            await running
            await client.aclose()
        assert live_workers(conn) == []  # a clean stop takes the record off at once

    asyncio.run(scenario())
