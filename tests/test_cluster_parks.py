"""A consumer of several queues on a Valkey Cluster of three primaries (``three_primaries``), on
both shells and both wires: the queues chosen so their slots lie on different primaries, the
consumer parks with one ``BLPOP`` per slot at once, each on a connection of its own to the
slot's node (``echomq.consumer.node_parks``). Jobs of both queues run in strict priority order;
an idle consumer sends each node only its park and the reads before it; a job on the second
node's queue wakes it at once; ``stop()`` returns promptly and leaves no call blocked on any
node (on redis-py's and valkey-py's clients); queues of one slot park with one call; a slot
moved under a park ends it as a wake and the next park follows the slot; an asyncio consumer
with a free place waits on every slot's wake without polling; ``echomq worker --queue a --queue
b --url <one node>`` serves both. The park's calls one by one: tests/test_cluster_park_calls.py.
See docs/CLUSTER.md."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster, key_slot

from echomq import Job, Queue
from echomq.embedded import EmbeddedValkey
from tests.cluster import close_move, open_move, three_primaries
from tests.reliability.servers import owner
from tests.shells import AsyncShell, Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import running, stopped_by_a_signal, wait_until
from tests.test_worker import Workers

PROMPT_S = 1.0  # a wake or a stop this long after its cause is prompt (the park cap is 30 s)


@pytest.fixture(scope="module", name="nodes")
def nodes_fixture() -> Iterator[list[EmbeddedValkey]]:
    with three_primaries() as made:
        yield made


@pytest.fixture(name="rc")
def rc_fixture(nodes: list[EmbeddedValkey]) -> Iterator[RedisCluster]:
    client = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(params=["redis", "valkey"])
def any_rc(nodes: list[EmbeddedValkey], request: pytest.FixtureRequest) -> Iterator[Any]:
    """A blocking cluster client of redis-py, then of valkey-py."""
    import valkey.cluster

    kind = RedisCluster if request.param == "redis" else valkey.cluster.ValkeyCluster
    client = kind(host="127.0.0.1", port=nodes[0].port)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def slot_of(name: str) -> int:
    return int(key_slot(f"emq:{{{name}}}:wake".encode()))


def apart(nodes: list[EmbeddedValkey], prefix: str) -> tuple[str, str]:
    """Two queue names starting with ``prefix`` whose slots lie on different primaries."""
    first = f"{prefix}-a"
    home = owner(nodes, slot_of(first))
    for n in range(100):
        second = f"{prefix}-b{n}"
        if owner(nodes, slot_of(second)) is not home:
            return first, second
    raise LookupError(prefix)


def home_of(nodes: list[EmbeddedValkey], name: str) -> EmbeddedValkey:
    return owner(nodes, slot_of(name))


class Pair:
    """Two queues of ``prefix`` on different primaries, through the cluster client ``rc``."""

    def __init__(self, nodes: list[EmbeddedValkey], rc: Any, prefix: str,
                 wire: int) -> None:
        self.nodes = nodes
        self.names = apart(nodes, prefix)
        self.queues = [Queue(rc, name, wire=wire) for name in self.names]
        self.homes = [home_of(nodes, name) for name in self.names]
        assert self.homes[0].port != self.homes[1].port

    def parked(self) -> bool:
        """Whether a call is blocked on each queue's node."""
        return wait_until(lambda: all(blocked(home) >= 1 for home in self.homes))


def node_info(node: EmbeddedValkey, section: str) -> dict[str, Any]:
    client = node.client()
    try:
        return dict(client.info(section))
    finally:
        client.close()


def blocked(node: EmbeddedValkey) -> int:
    return int(node_info(node, "clients")["blocked_clients"])


def blpop_clients(node: EmbeddedValkey) -> list[dict[str, Any]]:
    """The clients of ``node`` blocked in a ``BLPOP`` now."""
    client = node.client()
    try:
        return [c for c in client.client_list() if c.get("cmd") == "blpop"
                and "b" in str(c.get("flags"))]
    finally:
        client.close()


def parking_clients(node: EmbeddedValkey) -> int:
    """How many of ``node``'s clients are parking lines: their last command a ``BLPOP``, or
    the ``CLIENT ID`` a line asks first."""
    client = node.client()
    try:
        listed = client.client_list()
    finally:
        client.close()
    return sum(1 for entry in listed if entry["cmd"] in ("blpop", "client|id"))


def calls(node: EmbeddedValkey) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(row["calls"])
            for name, row in node_info(node, "commandstats").items()}


# What the test's own connection sends to read a node's counts.
OWN = ("info", "hello", "client|setinfo")


def sent(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The commands served between two ``calls``, but the test's own (``OWN``)."""
    return {name: count - before.get(name, 0) for name, count in after.items()
            if count != before.get(name, 0) and name not in OWN}


def quiet_windows(homes: list[EmbeddedValkey], windows: int = 5) -> list[list[dict[str, int]]]:
    """What each of ``homes`` served in successive half-seconds, until one where none served
    anything (at most ``windows``). A consumer that polls sends something in every one; one
    that parks sends nothing once its park is in place (the first may still see the last
    steps of a park a loaded machine was slow to finish: a blocked call seen may be the park
    before, not yet ended)."""
    seen: list[list[dict[str, int]]] = []
    while len(seen) < windows and (not seen or seen[-1] != [{} for _ in homes]):
        before = [calls(home) for home in homes]
        time.sleep(0.5)  # the interval measured: a loop that polled would claim in it
        seen.append([sent(b, calls(home)) for b, home in zip(before, homes, strict=True)])
    return seen


def test_jobs_of_both_queues_run_the_first_queue_first(
        nodes: list[EmbeddedValkey], rc: RedisCluster, make: Make, wire: int,
        shell: str) -> None:
    """While the consumer is busy with a job of the second queue, three jobs reach each queue:
    the first queue's three run before the second's."""
    pair = Pair(nodes, rc, f"order-{shell}-{wire}", wire)
    first, second = pair.queues
    order: list[str] = []
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def handler(job: Job) -> None:
        order.append(job.id)
        if job.id == "JOB:busy":
            started.set()
            assert release.wait(10)
        if len(order) == 7:
            finished.set()

    consumer = make(pair.queues, handler, park_cap_ms=30_000, announce=False)
    with running(consumer):
        assert pair.parked()
        second.enqueue("JOB:busy", b"x")
        assert started.wait(5)
        for n in range(3):
            second.enqueue(f"JOB:second{n}", b"x")
            first.enqueue(f"JOB:first{n}", b"x")
        release.set()
        assert finished.wait(10), order
    assert order == ["JOB:busy", "JOB:first0", "JOB:first1", "JOB:first2",
                     "JOB:second0", "JOB:second1", "JOB:second2"]


def test_an_idle_consumer_sends_each_node_its_park_and_the_reads_before_it(
        nodes: list[EmbeddedValkey], rc: RedisCluster, make: Make, wire: int,
        shell: str) -> None:
    """Parked for ten times the park cap (200 ms; housekeeping every 500 ms), the consumer sends
    each queue's node at most one BLPOP per park — the single server's bound, eleven in 2 s
    (tests/test_consumer.py) — and otherwise only the reads before a park (ZRANGE, ZCARD) and
    the housekeeping beats (what a beat without a park sends, on at most five beats). A park
    that ends by its timeout unblocks nothing (every call reaches the same timeout); a beat's
    claim with nothing in hand leaves two watch tokens on each queue, and a park ended by one
    of them may CLIENT UNBLOCK the other node's call: at most two a beat. The third node, which
    holds no served slot, gets nothing."""
    pair = Pair(nodes, rc, f"idle-{shell}-{wire}", wire)
    third = next(n for n in nodes if n not in pair.homes)
    consumer = make(pair.queues, lambda job: None, park_cap_ms=200, housekeeping_ms=500,
                    announce=False)
    before = {node.port: calls(node) for node in nodes}
    consumer.beat(park=False)
    beat = {node.port: sent(before[node.port], calls(node)) for node in nodes}
    with running(consumer):
        assert pair.parked()
        before = {node.port: calls(node) for node in nodes}
        time.sleep(2.0)  # the interval measured: ten park caps, four housekeeping intervals
        after = {node.port: calls(node) for node in nodes}
    for home in pair.homes:
        served = sent(before[home.port], after[home.port])
        assert 1 <= served.get("blpop", 0) <= 11, served
        reads = served.get("zrange", 0) + served.get("zcard", 0)
        assert reads <= 11 * 4 + 5 * sum(beat[home.port].values()), served
        parking = ("blpop", "zrange", "zcard", "time", "client|unblock")
        assert set(served) <= {*parking, *beat[home.port]}, (served, beat[home.port])
        assert served.get("client|unblock", 0) <= 2 * 5, served
        beats = sum(count for name, count in served.items() if name not in parking)
        assert beats <= 5 * sum(beat[home.port].values()), served
    assert sent(before[third.port], after[third.port]) == {}


def test_a_job_on_the_second_nodes_queue_wakes_the_consumer_at_once(
        nodes: list[EmbeddedValkey], any_rc: Any, make: Make, wire: int, shell: str) -> None:
    """On redis-py's and valkey-py's cluster clients."""
    pair = Pair(nodes, any_rc, f"wake-{shell}-{wire}-{type(any_rc).__name__}", wire)
    handled = threading.Event()
    consumer = make(pair.queues, lambda job: handled.set(), park_cap_ms=30_000,
                    announce=False)
    with running(consumer):
        for queue in (pair.queues[1], pair.queues[0]):
            assert pair.parked()
            handled.clear()
            woken = time.monotonic()
            queue.enqueue(f"JOB:{queue.name}", b"x")
            assert handled.wait(PROMPT_S), queue.name
            assert time.monotonic() - woken < PROMPT_S


def test_stop_while_parked_on_several_nodes_returns_and_leaves_no_call_blocked(
        nodes: list[EmbeddedValkey], any_rc: Any, make: Make, wire: int, shell: str) -> None:
    """On redis-py's and valkey-py's cluster clients."""
    pair = Pair(nodes, any_rc, f"stop-{shell}-{wire}-{type(any_rc).__name__}", wire)
    consumer = make(pair.queues, lambda job: None, park_cap_ms=30_000, announce=False)
    with running(consumer, stop_within=PROMPT_S):  # stop() must return the loop within it
        assert pair.parked()
        assert all(blpop_clients(home) for home in pair.homes)
    assert wait_until(lambda: not any(blpop_clients(node) for node in nodes), PROMPT_S), [
        blpop_clients(node) for node in nodes]


def same_slot(name: str) -> str:
    """Another queue name whose slot is ``name``'s (a CRC16 collision, found by counting)."""
    return next(f"{name}-{n}" for n in range(1_000_000)
                if slot_of(f"{name}-{n}") == slot_of(name))


def test_queues_of_one_slot_park_with_one_blpop_as_on_one_server(
        nodes: list[EmbeddedValkey], rc: RedisCluster, make: Make, shell: str) -> None:
    """Two queues whose names share a slot: one group, one BLPOP through the cluster client
    (the single server's park), and a job on either wakes the consumer."""
    names = (f"shared-{shell}", same_slot(f"shared-{shell}"))
    queues = [Queue(rc, name, wire=5) for name in names]
    home = home_of(nodes, names[0])
    handled = threading.Event()
    consumer = make(queues, lambda job: handled.set(), park_cap_ms=30_000, announce=False)
    with running(consumer):
        for queue in reversed(queues):
            assert wait_until(lambda: blocked(home) == 1)
            assert sum(blocked(node) for node in nodes) == 1
            handled.clear()
            queue.enqueue(f"JOB:{queue.name}", b"x")
            assert handled.wait(PROMPT_S)


def test_stop_right_after_start_never_waits_for_the_park_cap(
        nodes: list[EmbeddedValkey], rc: RedisCluster, make: Make, shell: str) -> None:
    """A stop that meets the park's calls on their way out (some sent, some not yet)."""
    pair = Pair(nodes, rc, f"early-{shell}", 5)
    for _ in range(10):
        consumer = make(pair.queues, lambda job: None, park_cap_ms=60_000, announce=False)
        if isinstance(consumer, AsyncShell):
            consumer.connect()  # as the blocking cluster client is: the stop is what is timed
        with running(consumer, stop_within=PROMPT_S):
            pass
    assert wait_until(lambda: not any(blpop_clients(node) for node in nodes), PROMPT_S)


def test_stop_from_a_signal_handler_returns_a_loop_parked_on_several_nodes(
        nodes: list[EmbeddedValkey], rc: RedisCluster) -> None:
    from echomq.consumer.blocking import Consumer

    pair = Pair(nodes, rc, "signal", 5)
    stopped_by_a_signal(Consumer(pair.queues, lambda job: None, park_cap_ms=60_000,
                                 announce=False), 0.5)
    assert wait_until(lambda: not any(blpop_clients(node) for node in nodes), PROMPT_S)


def test_a_slot_moved_under_a_park_ends_it_as_a_wake_and_the_next_park_follows(
        nodes: list[EmbeddedValkey], rc: RedisCluster, make: Make, wire: int, shell: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The second queue's slot moves to the third node while the consumer parks on it there:
    its call gets MOVED, the park ends as a wake (no error, no back-off), the consumer parks
    again on the slot's new node, and a job there wakes it at once; moved back (its reads meet
    ASK on the way), the loop goes on without an error."""
    pair = Pair(nodes, rc, f"moved-{shell}-{wire}", wire)
    third = next(n for n in nodes if n not in pair.homes)
    handled = threading.Event()
    consumer = Watched(make(pair.queues, lambda job: handled.set(), park_cap_ms=30_000,
                            announce=False))
    slot, source = slot_of(pair.names[1]), pair.homes[1]
    caplog.set_level(logging.WARNING, logger="echomq")
    with running(consumer):
        assert pair.parked()
        open_move(slot, source, third)
        close_move(nodes, slot, third)
        try:
            assert wait_until(lambda: blocked(third) >= 1), "no park on the slot's new node"
            woken = time.monotonic()
            pair.queues[1].enqueue("JOB:moved", b"x")
            assert handled.wait(PROMPT_S)
            assert time.monotonic() - woken < PROMPT_S
        finally:
            open_move(slot, third, source)
            close_move(nodes, slot, source)
    assert consumer.raised == []
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()], caplog.text


class Watched:
    """A consumer whose ``run`` keeps what it raised (its thread's end, which a test in its
    ``running`` block would not see)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.raised: list[BaseException] = []

    def run(self) -> None:
        try:
            self.consumer.run()
        except BaseException as exc:
            self.raised.append(exc)
            raise

    def stop(self) -> None:
        self.consumer.stop()


def test_an_async_consumer_with_a_free_place_waits_on_every_slots_wake_without_polling(
        nodes: list[EmbeddedValkey], rc: RedisCluster, wire: int) -> None:
    """``concurrency=2``, one job of the first queue running: the free place waits on both
    queues' wake keys, one BLPOP per slot, sending nothing else meanwhile; a job on the second
    queue starts at once, while the first still runs."""
    from tests.shells import AsyncShell

    pair = Pair(nodes, rc, f"free-{wire}", wire)
    first, second = pair.queues
    release, started = threading.Event(), {"JOB:long": threading.Event(),
                                           "JOB:other": threading.Event()}

    def handler(job: Job) -> None:
        started[job.id].set()
        if job.id == "JOB:long":
            assert release.wait(10)

    consumer = AsyncShell(pair.queues, handler, concurrency=2, park_cap_ms=30_000,
                          announce=False)
    try:
        with running(consumer):
            try:
                first.enqueue("JOB:long", b"x")
                assert started["JOB:long"].wait(5)
                assert pair.parked()
                windows = quiet_windows(pair.homes)
                assert windows[-1] == [{}, {}], windows
                second.enqueue("JOB:other", b"x")
                assert started["JOB:other"].wait(PROMPT_S)
                assert not release.is_set()
            finally:
                release.set()  # whatever failed above, the long job ends and the consumer stops
    finally:
        consumer.close()


def test_the_worker_serves_two_queues_of_a_cluster_from_one_nodes_url(
        nodes: list[EmbeddedValkey], rc: RedisCluster, tmp_path: Any) -> None:
    """``echomq worker --queue a --queue b --url <one node>``: the worker takes the node for a
    cluster's (``INFO cluster``) and serves both queues, the first first; its handler notes
    each payload in ``test:order`` through the node named (the one serving that key). A job
    enqueued once it parks on both wakes it."""
    url_node = owner(nodes, int(key_slot(b"test:order")))
    pair = Pair(nodes, rc, "cli", 5)
    second, first = pair.queues[1], pair.queues[0]
    second.enqueue_many([(f"JOB:second{n}", b"second") for n in range(5)])
    first.enqueue_many([(f"JOB:first{n}", b"first") for n in range(5)])
    order = url_node.client()
    supervisor = Workers(url_node, tmp_path / "workers.log", pair.names[0], "--queue",
                         pair.names[1], "--concurrency", "1", handler="tests.worker_apps:record",
                         url=url_node.url, on_ack=None)
    try:
        assert wait_until(lambda: order.llen("test:order") == 10, 30), supervisor.log()
        assert order.lrange("test:order", 0, -1) == [b"first"] * 5 + [b"second"] * 5
        assert pair.parked(), supervisor.log()
        second.enqueue("JOB:late", b"late")
        # A process of its own to schedule: prompt, against a park of 75 s, is within seconds.
        assert wait_until(lambda: order.llen("test:order") == 11, 5 * PROMPT_S), supervisor.log()
        assert supervisor.terminate(within=10) == 0
    finally:
        supervisor.close()
        order.delete("test:order")
        order.close()
    assert "ERROR" not in supervisor.log(), supervisor.log()


def test_an_async_consumer_stopped_while_parked_leaves_no_client_past_its_loop(
        nodes: list[EmbeddedValkey], wire: int) -> None:
    """Stopped while parked over two slots, then its event loop ended (``asyncio.run``, as the
    worker's asyncio loop ends): every parking connection was closed before the loop, so none is
    left for the garbage collector to close on a loop that is gone ("Event loop is closed")."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    from echomq import aio

    names = apart(nodes, f"loop-end-{wire}")
    homes = [home_of(nodes, name) for name in names]
    raised: list[str] = []
    left: list[int] = []

    async def park_then_stop() -> None:
        client = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port)
        consumer = aio.Consumer([aio.Queue(client, name, wire=wire) for name in names],
                                lambda job: None, park_cap_ms=30_000, announce=False)
        async def stop_once_parked() -> bool:
            parked = await asyncio.to_thread(
                wait_until, lambda: all(blocked(home) >= 1 for home in homes))
            consumer.stop()
            return parked

        stopping = asyncio.ensure_future(stop_once_parked())
        await consumer.run()
        # At once, blocking this loop: nothing it still has to run can close a line meanwhile.
        wait_until(lambda: [parking_clients(home) for home in homes] == [0, 0], PROMPT_S)
        left.extend(parking_clients(home) for home in homes)
        await client.aclose()
        assert await stopping

    previous = sys.unraisablehook
    sys.unraisablehook = lambda hook: raised.append(f"{hook.exc_type.__name__}: {hook.exc_value}")
    try:
        asyncio.run(park_then_stop())
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert left == [0, 0], "parking connections left open once run() returned"
    assert raised == []
    assert wait_until(lambda: all(blocked(home) == 0 for home in homes))


def test_an_async_consumer_stopped_as_it_opens_its_lines_leaves_none_unclosed(
        nodes: list[EmbeddedValkey], wire: int) -> None:
    """``stop()`` at every moment of the consumer's first steps (its claim, the opening of its
    parking lines, its park): once ``run()`` has returned, no client of it is left for the
    garbage collector to find unclosed."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    from echomq import aio

    names = apart(nodes, f"opening-{wire}")
    unclosed: list[str] = []

    async def stop_after(delay_s: float) -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: unclosed.append(f"{delay_s}: {context['message']}"))
        client = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port)
        consumer = aio.Consumer([aio.Queue(client, name, wire=wire) for name in names],
                                lambda job: None, park_cap_ms=30_000, announce=False)
        running_loop = asyncio.ensure_future(consumer.run())
        await asyncio.sleep(delay_s)
        consumer.stop()
        await running_loop
        gc.collect()  # a client left unclosed is finalised now, and says so
        await client.aclose()

    for step in range(15):  # every other millisecond of its first 30
        asyncio.run(stop_after(step * 0.002))
    assert unclosed == []
