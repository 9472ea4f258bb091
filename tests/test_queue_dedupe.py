"""Dedupe, debounce and throttle as a producer meets them (``Queue.enqueue(..., dedupe=,
debounce=, throttle=)``, the unique enqueue of docs/PROTOCOL.md), on both wires against a real
server: a dedupe key held while its job lives, a debounce that keeps one delayed job carrying the
last call's payload — under many concurrent producers too — and a throttle admitting at most one
job a window. Clocks are explicit (``now=``) wherever the API takes one; a throttle's window is
the key's own TTL on the server's clock, waited for by reading the key, never by sleeping."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
import redis
import redis.asyncio

from echomq import ArgumentError, Queue, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey

T = 1_700_000_000_000
BOUND_S = 60.0  # a loaded machine: a bound on waiting, never a speed


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def queue(conn: redis.Redis, wire: int, request: pytest.FixtureRequest) -> Queue:
    return Queue(conn, f"dedupe{wire}-{request.node.name[:40]}", wire=wire)


def row(queue: Queue, job_id: str) -> dict[bytes, bytes]:
    return queue.conn.hgetall(queue.calls.key("job", job_id))  # type: ignore[no-any-return]


def dedupe_key(queue: Queue, name: str) -> str:
    return queue.calls.key("dedupe", lane=name)


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"not in {BOUND_S} s: {what}"
        time.sleep(0.005)


def run_all(queue: Queue, now: int) -> list[tuple[str, bytes]]:
    """Promote whatever is due at ``now`` and claim (and ack) every job: (id, payload) each."""
    queue.promote(now=now)
    ran = []
    while (job := queue.claim(now=now)) is not None:
        ran.append((job.id, bytes(job.payload)))
        queue.ack(job, retention_ms=0)
    return ran


# ---- dedupe ----------------------------------------------------------------------------------


def test_dedupe_admits_one_job_while_it_lives(queue: Queue) -> None:
    assert queue.enqueue("JOB:a", b"1", dedupe="order-7", now=T) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:b", b"2", dedupe="order-7", now=T + 1) is Verdict.DUPLICATE
    assert queue.enqueue("JOB:c", b"3", dedupe="order-8", now=T + 2) is Verdict.ENQUEUED
    assert queue.conn.get(dedupe_key(queue, "order-7")) == b"JOB:a"
    assert row(queue, "JOB:a")[b"dedupe"] == b"dedupe:order-7"
    assert b"dedupe_ms" not in row(queue, "JOB:a")
    assert not queue.conn.exists(queue.calls.key("job", "JOB:b"))
    assert run_all(queue, T + 3) == [("JOB:a", b"1"), ("JOB:c", b"3")]


def test_dedupe_writes_its_window_and_a_delay(queue: Queue) -> None:
    verdict = queue.enqueue("JOB:a", b"1", dedupe="k", dedupe_ms=5_000, delay_ms=100, now=T)
    assert verdict is Verdict.ENQUEUED
    assert row(queue, "JOB:a")[b"dedupe_ms"] == b"5000"
    assert queue.conn.zscore(queue.calls.key("delayed"), "JOB:a") == T + 100
    assert queue.enqueue("JOB:b", b"2", dedupe="k", now=T + 1) is Verdict.DUPLICATE


def test_a_dedupe_key_whose_job_is_gone_admits_again(queue: Queue) -> None:
    assert queue.enqueue("JOB:a", b"1", dedupe="k", now=T) is Verdict.ENQUEUED
    assert run_all(queue, T) == [("JOB:a", b"1")]  # acked without a tombstone: the row is gone
    assert queue.enqueue("JOB:b", b"2", dedupe="k", now=T + 1) is Verdict.ENQUEUED
    assert queue.conn.get(dedupe_key(queue, "k")) == b"JOB:b"


def test_dedupe_ms_holds_the_key_after_the_job_ended(queue: Queue) -> None:
    assert queue.enqueue("JOB:a", b"1", dedupe="k", dedupe_ms=60_000, now=T) is Verdict.ENQUEUED
    job = queue.claim(now=T)
    assert job is not None
    queue.ack(job, retention_ms=0)
    assert 0 < queue.conn.pttl(dedupe_key(queue, "k")) <= 60_000
    assert queue.enqueue("JOB:b", b"2", dedupe="k", now=T + 1) is Verdict.DUPLICATE


def test_a_dedupe_key_without_a_window_goes_when_its_job_ends(queue: Queue) -> None:
    assert queue.enqueue("JOB:a", b"1", dedupe="k", now=T) is Verdict.ENQUEUED
    job = queue.claim(now=T)
    assert job is not None
    queue.ack(job)  # a tombstone kept: the row exists, the key is released all the same
    assert not queue.conn.exists(dedupe_key(queue, "k"))
    assert queue.enqueue("JOB:b", b"2", dedupe="k", now=T + 1) is Verdict.ENQUEUED


# ---- debounce --------------------------------------------------------------------------------


def test_debounce_keeps_one_delayed_job_with_the_last_payload(queue: Queue) -> None:
    first = queue.enqueue("JOB:1", b"one", debounce="save", debounce_ms=1_000, now=T)
    assert first is Verdict.ENQUEUED
    assert queue.enqueue("JOB:2", b"two", debounce="save", debounce_ms=1_000,
                         now=T + 500) is Verdict.DEBOUNCED
    assert queue.enqueue("JOB:3", b"three", debounce="save", debounce_ms=1_000,
                         now=T + 900) is Verdict.DEBOUNCED
    assert queue.conn.zscore(queue.calls.key("delayed"), "JOB:1") == T + 1_900
    assert run_all(queue, T + 1_899) == []  # not due yet: the window moved with each call
    assert run_all(queue, T + 1_900) == [("JOB:1", b"three")]
    # the job left delayed: the next call starts a new one
    assert queue.enqueue("JOB:4", b"four", debounce="save", debounce_ms=1_000,
                         now=T + 2_000) is Verdict.ENQUEUED
    assert row(queue, "JOB:4")[b"dedupe"] == b"dedupe:save"


def test_debounce_uses_its_default_window(queue: Queue) -> None:
    assert queue.enqueue("JOB:1", b"x", debounce="d", now=T) is Verdict.ENQUEUED
    assert queue.conn.zscore(queue.calls.key("delayed"), "JOB:1") == T + 1_000


def test_concurrent_debouncers_of_one_key_run_once_with_the_last_arguments(
        valkey: EmbeddedValkey, wire: int) -> None:
    name, producers, calls_each = f"debounce-many{wire}", 8, 25
    barrier = threading.Barrier(producers)
    verdicts: list[Verdict] = []
    lock = threading.Lock()

    def produce(n: int) -> None:
        client = valkey.client()
        mine = Queue(client, name, wire=wire)
        barrier.wait()
        got = [mine.enqueue(f"JOB:{n}-{i}", f"{n}-{i}".encode(), debounce="k",
                            debounce_ms=10_000, now=T + i) for i in range(calls_each)]
        with lock:
            verdicts.extend(got)
        client.close()

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND_S)
    assert len(verdicts) == producers * calls_each
    assert verdicts.count(Verdict.ENQUEUED) == 1
    assert verdicts.count(Verdict.DEBOUNCED) == producers * calls_each - 1
    # the last call, after every other: its arguments are the ones that run
    client = valkey.client()
    queue = Queue(client, name, wire=wire)
    assert queue.enqueue("JOB:last", b"last", debounce="k", debounce_ms=10_000,
                         now=T + 100) is Verdict.DEBOUNCED
    assert run_all(queue, T + 10_099) == []
    ran = run_all(queue, T + 10_100)
    assert [payload for _id, payload in ran] == [b"last"]
    assert run_all(queue, T + 10**9) == []


def test_concurrent_asyncio_debouncers_also_admit_one(valkey: EmbeddedValkey, wire: int) -> None:
    async def main() -> list[Verdict]:
        client = redis.asyncio.Redis(port=valkey.port)
        queue = AsyncQueue(client, f"debounce-aio{wire}", wire=wire)
        got = await asyncio.gather(*(queue.enqueue(f"JOB:{i}", str(i), debounce="k",
                                                   debounce_ms=5_000, now=T)
                                     for i in range(50)))
        await client.aclose()
        return list(got)

    verdicts = asyncio.run(main())
    assert verdicts.count(Verdict.ENQUEUED) == 1
    assert verdicts.count(Verdict.DEBOUNCED) == 49


# ---- throttle --------------------------------------------------------------------------------


def test_throttle_admits_at_most_one_job_a_window(valkey: EmbeddedValkey, wire: int) -> None:
    name, producers = f"throttle-many{wire}", 8
    barrier = threading.Barrier(producers)
    verdicts: list[Verdict] = []
    lock = threading.Lock()

    def produce(n: int) -> None:
        client = valkey.client()
        mine = Queue(client, name, wire=wire)
        barrier.wait()
        got = [mine.enqueue(f"JOB:{n}-{i}", b"x", throttle="mail", throttle_ms=600_000)
               for i in range(20)]
        with lock:
            verdicts.extend(got)
        client.close()

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND_S)
    assert verdicts.count(Verdict.ENQUEUED) == 1
    assert verdicts.count(Verdict.THROTTLED) == producers * 20 - 1


def test_a_throttle_window_reopens_when_its_key_expires(queue: Queue) -> None:
    assert queue.enqueue("JOB:1", b"x", throttle="t", throttle_ms=200) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:2", b"x", throttle="t", throttle_ms=200) is Verdict.THROTTLED
    key = dedupe_key(queue, "t")
    assert 0 < queue.conn.pttl(key) <= 200
    assert b"dedupe" not in row(queue, "JOB:1")
    until(lambda: not queue.conn.exists(key), "the throttle's window closed")
    assert queue.enqueue("JOB:3", b"x", throttle="t", throttle_ms=200) is Verdict.ENQUEUED


def test_a_throttle_window_of_zero_throttles_nothing(queue: Queue) -> None:
    assert {queue.enqueue(f"JOB:{i}", b"x", throttle="t", throttle_ms=0, now=T)
            for i in range(3)} == {Verdict.ENQUEUED}
    assert not queue.conn.exists(dedupe_key(queue, "t"))


# ---- the options, checked before anything is sent -------------------------------------------


@pytest.mark.parametrize("options", [
    {"dedupe": "a", "debounce": "b"}, {"throttle": "a", "dedupe": "a"},
    {"dedupe_ms": 5}, {"debounce_ms": 5, "dedupe": "a"}, {"dedupe": ""}, {"dedupe": "a b"},
    {"throttle": "x" * 201}, {"dedupe": "a", "dedupe_ms": -1}, {"debounce": "a", "lane": "g"},
    {"throttle": "a", "at_ms": T},
], ids=lambda options: "-".join(options))
def test_bad_options_are_refused_before_sending(queue: Queue, options: dict[str, object]) -> None:
    with pytest.raises(ArgumentError):
        queue.enqueue("JOB:1", b"x", now=T, **options)  # type: ignore[arg-type]
    assert not queue.conn.exists(queue.calls.key("job", "JOB:1"))


def test_the_servers_mode_error_is_an_argument_error(queue: Queue) -> None:
    from echomq.engine.transitions import ENQUEUE_UNIQUE, keys_for

    keys = keys_for(queue.calls.base, ENQUEUE_UNIQUE, "JOB:1", "k")
    with pytest.raises(ArgumentError, match="EMQMODE"):
        queue.executor.call(queue.conn, ENQUEUE_UNIQUE, keys,
                            ["JOB:1", b"x", str(T), "unique", "0", "0"])


# ---- the task layer --------------------------------------------------------------------------


def test_a_tasks_options_and_with_options(conn: redis.Redis, wire: int) -> None:
    from echomq import App

    app = App(conn, f"dedupe-tasks{wire}", wire=wire, check_policy=False)

    @app.task(dedupe=lambda order_id: f"order-{order_id}")
    def ship(order_id: int) -> None: ...

    @app.task(debounce="reindex", debounce_ms=60_000)
    def reindex(what: str) -> None: ...

    assert ship.enqueue(7).verdict is Verdict.ENQUEUED
    assert ship.enqueue(7).verdict is Verdict.DUPLICATE
    assert ship.enqueue(8).verdict is Verdict.ENQUEUED
    assert reindex.enqueue("a").verdict is Verdict.ENQUEUED
    assert reindex.enqueue("b").verdict is Verdict.DEBOUNCED
    # with_options replaces the task's own: a throttle instead of its dedupe
    assert ship.with_options(throttle="burst", throttle_ms=600_000).enqueue(7).verdict \
        is Verdict.ENQUEUED
    assert ship.with_options(throttle="burst", throttle_ms=600_000).enqueue(9).verdict \
        is Verdict.THROTTLED
    with pytest.raises(ArgumentError):
        ship.with_options(dedupe="a", throttle="b")
    with pytest.raises(ArgumentError):
        app.task(debounce_ms=5)(lambda: None)
    with pytest.raises(TypeError):
        ship.with_options(dedup="a")


# ---- the command line ------------------------------------------------------------------------


def test_echomq_enqueue_takes_the_modes(valkey: EmbeddedValkey, wire: int) -> None:
    from click.testing import CliRunner

    from echomq.cli.main import main

    def enqueue(*flags: str) -> str:
        result = CliRunner().invoke(main, ["enqueue", f"cli-dedupe{wire}", "p", "--wire",
                                           str(wire), *flags], env={"ECHOMQ_URL": valkey.url})
        return result.output.split(" ", 1)[0] if result.exit_code == 0 else result.output

    assert enqueue("--throttle", "t", "--window-ms", "600000") == "ENQUEUED"
    assert enqueue("--throttle", "t") == "THROTTLED"
    assert enqueue("--debounce", "d", "--window-ms", "60000") == "ENQUEUED"
    assert enqueue("--debounce", "d") == "DEBOUNCED"
    assert enqueue("--dedupe", "x", "--id", "JOB:cli1") == "ENQUEUED"
    assert enqueue("--dedupe", "x") == "DUPLICATE"
    assert "--window-ms" in enqueue("--window-ms", "5")
    assert "--window-ms" in enqueue("--dedupe", "a", "--throttle", "b")


# ---- step 6: the holder's row, a derived key -------------------------------------------------


@pytest.mark.parametrize("mode", ["dedupe", "debounce"])
def test_the_holders_row_is_checked_against_the_callers_acl(valkey: EmbeddedValkey, wire: int,
                                                            mode: str) -> None:
    """A user allowed every key of the call but the row of the job the dedupe key names gets
    NOPERM from both executors, nothing written; a throttle never reads that row."""
    from echomq.engine.errors import error_reply
    from echomq.engine.transitions import queue_base

    name = f"acl-{mode}{wire}"
    base = queue_base(name)
    admin = valkey.client()
    admin.set(base + "dedupe:k", "JOB:held")
    user = f"dedupe-{mode}{wire}"
    allowed = [f"~{base}{suffix}" for suffix in ("pending", "delayed", "wake", "dedupe:k",
                                                 "job:JOB:1")]
    admin.execute_command("ACL", "SETUSER", user, "reset", "on", ">pw", *allowed, "+@all")
    client = redis.Redis(port=valkey.port, username=user, password="pw")
    queue = Queue(client, name, wire=wire, check_policy=False)
    with pytest.raises(redis.exceptions.NoPermissionError) as refused:
        queue.enqueue("JOB:1", b"x", now=T, **{mode: "k"})  # type: ignore[arg-type]
    assert error_reply(refused.value).code == "NOPERM"
    assert not admin.exists(base + "job:JOB:1")
    assert queue.enqueue("JOB:1", b"x", throttle="k", now=T) is Verdict.THROTTLED
    client.close()
