"""Parking costs the wire next to nothing, and the recovery bound holds all the same.

An idle consumer sends one re-read and one ``BLPOP`` per park (the park cap, a minute by default),
so it costs at most a tenth of a command a second; one consumer a housekeeping interval runs
recover + promote (the queue's housekeeping token); a claim with nothing in hand sends two watch
tokens in its own flush, so a SIGKILLed holder's lease is back within ``lease_ms +
housekeeping_ms`` although every other consumer parks long — killed as its claim's reply came
back, or after one of its two watchers died; and one enqueue to a parked crowd costs one claim.
Commands are the server's own count (``INFO commandstats``, a script's inner calls included on
``wire=5``); times are the server's clock.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

import pytest
import redis

from echomq import Consumer, Job, Queue, aio
from echomq.consumer.blocking import server_ms
from echomq.consumer.loop import PARK_CAP_MS
from echomq.embedded import EmbeddedValkey
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_consumer import blocked_clients, command_calls, running, wait_until

HOUSEKEEPING_MS = 1_000
ALLOWANCE_MS = 500
# The most commands one park may cost: the re-read (three heads and the jobs waiting) and BLPOP.
PER_PARK = 5


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def total(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: calls - before.get(name, 0) for name, calls in after.items()
            if calls != before.get(name, 0)}


@pytest.mark.pairs(("shell", "wire"), [("sync", 5), ("async", 6)])
def test_idle_consumers_cost_one_read_and_one_blpop_per_park(
        make: Make, conn: redis.Redis, wire: int) -> None:
    consumers, cap_ms, window_s = 4, 1_000, 5.0
    queue = Queue(conn, "idle", wire=wire)
    # Unannounced: the registry's record (4 commands a beat, every 2 s) is a cost of its own.
    crowd = [make(queue, lambda job: None, park_cap_ms=cap_ms, announce=False)
             for _ in range(consumers)]
    with running(*crowd):
        assert wait_until(lambda: blocked_clients(conn) == consumers)
        time.sleep(0.2)  # the first parks settle (each consumer's start is not the idle cost)
        before = command_calls(conn)
        time.sleep(window_s)  # the idle window measured, in the server's own count
        after = command_calls(conn)
    spent = total(before, after)
    parks = spent.get("blpop", 0)
    assert parks <= consumers * (window_s * 1000 / cap_ms + 1)
    per_park = sum(spent.values()) / max(parks, 1)
    assert per_park <= PER_PARK, spent  # no housekeeping, no claim: nothing could fall due
    # So with the default cap an idle consumer costs at most a tenth of a command a second.
    assert per_park / (PARK_CAP_MS / 1000) <= 0.1


# Every subprocess consumer counts the watch tokens it pops on "pops:<its role>", so a test can
# tell where it stands in the line of parked consumers (``first_in_line``); with "hold:<role>"
# set, it leaves the line after its next pop until a token on "go:<role>".
COUNTED = """
import sys
import redis
from echomq.consumer import blocking as consumer
counter = redis.Redis(port=int(sys.argv[1]))
park = consumer.Parker.park
def counted(self, *args, **options):
    popped = park(self, *args, **options)
    if popped == "watch":
        counter.incr("pops:" + ROLE)
        if counter.delete("hold:" + ROLE):  # asked to leave the line until "go:<role>"
            counter.blpop(["go:" + ROLE])
    return popped
consumer.Parker.park = counted
from echomq import aio
blpop = aio.Consumer._blpop
async def counted_async(self, *args, **options):
    popped = await blpop(self, *args, **options)
    if popped == "watch":
        counter.incr("pops:" + ROLE)
    return popped
aio.Consumer._blpop = counted_async
"""

HOLDER = """ROLE = "holder"
""" + COUNTED + """
import sys, time
import redis
from echomq import Consumer, Queue
conn = redis.Redis(port=int(sys.argv[1]))
queue = Queue(conn, "held", wire=int(sys.argv[2]))
def handler(job):
    conn.set("holding", job.id)
    time.sleep(600)
Consumer(queue, handler, lease_ms=int(sys.argv[3])).run()
"""


def holder_process(valkey: EmbeddedValkey, wire: int,
                   lease_ms: int) -> AbstractContextManager[Any]:
    return process_of(HOLDER, valkey.port, wire, lease_ms)


def hand_tokens(conn: redis.Redis, queue: Queue, parked: int, count: int = 1) -> None:
    """Hand ``count`` watch tokens, one at a time, to the head of the line of ``parked``
    consumers: each pops one, reads the heads and parks again at the end of the line."""
    for _ in range(count):
        conn.rpush(queue.key("watch"), 1)
        assert wait_until(lambda: conn.llen(queue.key("watch")) == 0
                          and blocked_clients(conn) == parked, timeout=10.0)


def hand_tokens_until(conn: redis.Redis, queue: Queue, role: str, parked: int) -> None:
    """Hand watch tokens one at a time until the consumer counting on ``pops:<role>`` popped
    one: it stands last in the line now."""
    start = int(conn.get("pops:" + role) or 0)
    for _ in range(parked):
        hand_tokens(conn, queue, parked)
        if int(conn.get("pops:" + role) or 0) > start:
            return
    raise AssertionError(f"the {role} never popped a token")


def first_in_line(conn: redis.Redis, queue: Queue, role: str, parked: int) -> None:
    """Make the consumer counting on ``pops:<role>`` the first in the line of ``parked``: the
    next token pushed on the queue (wake or watch) is served to it."""
    hand_tokens_until(conn, queue, role, parked)
    hand_tokens(conn, queue, parked, parked - 1)


def settled(conn: redis.Redis, queue: Queue, parked: int) -> None:
    """Every consumer parked, every watch token of their first claims popped."""
    assert wait_until(lambda: blocked_clients(conn) == parked
                      and conn.llen(queue.key("watch")) == 0, timeout=20.0)


def test_a_sigkilled_holders_lease_is_back_within_the_bound_while_fifty_consumers_park(
        conn: redis.Redis, valkey: EmbeddedValkey, wire: int) -> None:
    lease_ms, crowd_size, idle_s = 1_000, 50, 2.5
    short = valkey.client(socket_timeout=1.0)  # the crowd's client: idle past its timeout
    queue = Queue(short, "held", wire=wire)
    ran: list[tuple[str, int]] = []

    def handler(job: Job) -> None:
        ran.append((job.id, server_ms(conn)))

    with holder_process(valkey, wire, lease_ms) as holder, ExitStack() as stack:
        assert wait_until(lambda: blocked_clients(conn) == 1, timeout=20.0)
        stack.callback(short.close)
        crowd = [Consumer(queue, handler) for _ in range(crowd_size)]
        for consumer in crowd:
            stack.callback(consumer.close)
        stack.enter_context(running(*crowd, stop_within=10.0))
        settled(conn, queue, crowd_size + 1)
        # Idle longer than every timeout: the client's, the housekeeping interval, the lease.
        time.sleep(idle_s)
        first_in_line(conn, queue, "holder", crowd_size + 1)
        before = command_calls(conn)
        queue.enqueue("JOB:held", b"x")  # its wake token goes to the holder
        assert wait_until(lambda: conn.get("holding") == b"JOB:held", timeout=10.0)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        expires_at = conn.zscore(queue.key("active"), "JOB:held")
        assert expires_at is not None  # its lease as its last heartbeat left it
        assert wait_until(lambda: bool(ran), timeout=10.0), "the lost lease never came back"
        after = command_calls(conn)
    job_id, back_at = ran[0]
    assert job_id == "JOB:held"
    assert back_at - int(expires_at) <= HOUSEKEEPING_MS + ALLOWANCE_MS
    # One consumer a housekeeping interval ran recover, not every parked one.
    spent = total(before, after)
    window_s = max(1.0, (back_at - int(expires_at) + lease_ms) / 1000 + 1)
    recovers = spent.get("emq.recover", 0) if wire == 6 else spent.get("zrangebyscore", 0) // 3
    assert recovers <= 2 * (window_s * 1000 / HOUSEKEEPING_MS + 1), spent


def test_one_enqueue_to_two_hundred_parked_consumers_costs_one_claim(
        conn: redis.Redis, valkey: EmbeddedValkey, wire: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    crowd_size = 200
    shared = valkey.client(max_connections=4 * crowd_size)  # the crowd's client, pool and all
    queue = Queue(shared, "crowd", wire=wire)
    claims: list[int] = []
    settle_leased = Queue.settle_leased

    def counted(self: Queue, *args: Any, **options: Any) -> Any:
        verdicts, jobs = settle_leased(self, *args, **options)
        if args[1]:  # a round that claimed: how many jobs it took
            claims.append(len(jobs))
        return verdicts, jobs

    monkeypatch.setattr(Queue, "settle_leased", counted)
    handled = threading.Event()
    crowd = [Consumer(queue, lambda job: handled.set()) for _ in range(crowd_size)]
    try:
        with running(*crowd, stop_within=20.0):
            assert wait_until(lambda: blocked_clients(conn) == crowd_size, timeout=60.0)
            claims.clear()
            queue.enqueue("JOB:one", b"x")
            assert handled.wait(10.0)
            # Settled: the woken consumer parked again, and so did the one its watch token woke.
            assert wait_until(lambda: blocked_clients(conn) == crowd_size
                              and conn.llen(queue.key("watch")) == 0, timeout=10.0)
            time.sleep(2.0)  # a window longer than any housekeeping interval: nobody else claims
            empty = claims.count(0)
            taken = sum(claims)
    finally:
        for consumer in crowd:
            consumer.close()
        shared.close()
    assert taken == 1
    assert empty <= 1, claims  # the woken consumer's own last claim, which carried its ack


def test_a_consumer_that_stops_hands_on_what_it_watched(
        make: Make, conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "watched", wire=wire)
    ran: list[int] = []
    queue.enqueue("JOB:lost", b"x")
    lost = queue.claim(60_000)  # a worker that will die; its lease looks long for now
    assert lost is not None
    stayer = make(queue, lambda job: ran.append(server_ms(conn)))
    with running(stayer):
        assert wait_until(lambda: blocked_clients(conn) == 1)  # parked, the lease a minute off
        queue.extend(lost, lease_ms=1_000)  # news to the stayer: no token says so
        expires_at = server_ms(conn) + 1_000
        leaver = make(queue, lambda job: None)
        with running(leaver):  # reads the new deadline before it parks, then stops
            assert wait_until(lambda: blocked_clients(conn) == 2)
        assert wait_until(lambda: bool(ran), timeout=5.0), "nobody watched the lease"
    assert ran[0] - expires_at <= HOUSEKEEPING_MS + ALLOWANCE_MS


@pytest.mark.parametrize("denied", ["set", "zcard"])
def test_a_user_denied_the_parking_commands_stops_the_loop_saying_which(
        make: Make, valkey: EmbeddedValkey, denied: str,
        caplog: pytest.LogCaptureFixture) -> None:
    from tests.test_server_errors import fails_fatally

    admin = valkey.client()
    admin.flushall()
    admin.execute_command("ACL", "SETUSER", "no-token", "reset", "on", ">pw", "~*", "+@all",
                          f"-{denied}")
    conn = valkey.client(username="no-token", password="pw")
    try:
        queue = Queue(conn, "acl")
        if denied == "zcard":  # asked only in the read after a park's end
            consumer = make(queue, lambda job: None, park_cap_ms=50)
        else:
            consumer = make(queue, lambda job: None)
        message = fails_fatally(consumer, caplog)
        assert denied in message.lower() and "queue acl" in message
    finally:
        admin.execute_command("ACL", "DELUSER", "no-token")
        conn.close()
        admin.close()


# A holder that dies the instant its claim's reply is back, before it sends anything else: the
# settle call that claimed SIGKILLs its own process as it returns with a job.
KILLED_AT_CLAIM = """ROLE = "holder"
""" + COUNTED + """
import asyncio, os, signal, sys
import redis
from echomq import aio, Consumer, Queue
port, wire, lease_ms, shell = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
shells = {"sync": Queue, "async": aio.Queue}
settle_leased = shells[shell].settle_leased
def killed(replies):
    if replies[1]:
        os.kill(os.getpid(), signal.SIGKILL)
    return replies
if shell == "sync":
    def at_claim(self, *args, **options):
        return killed(settle_leased(self, *args, **options))
    Queue.settle_leased = at_claim
    Consumer(Queue(redis.Redis(port=port), "held", wire=wire), lambda job: None,
             lease_ms=lease_ms).run()
else:
    async def at_claim_async(self, *args, **options):
        return killed(await settle_leased(self, *args, **options))
    aio.Queue.settle_leased = at_claim_async
    async def main():
        queue = aio.Queue(redis.asyncio.Redis(port=port), "held", wire=wire)
        await aio.Consumer(queue, lambda job: None, lease_ms=lease_ms).run()
    asyncio.run(main())
"""


@contextmanager
def process_of(script: str, *args: object) -> Iterator[Any]:
    process = subprocess.Popen([sys.executable, "-c", script, *map(str, args)])
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def back_within_the_bound(conn: redis.Redis, queue: Queue, ran: list[tuple[str, int]],
                          expires_at: Any) -> None:
    """The lost lease came back to a parked consumer within lease + housekeeping (+ allowance)
    of its deadline, in the server's clock; the crowd parks a minute, so no park's end did it."""
    assert expires_at is not None
    assert wait_until(lambda: bool(ran), timeout=10.0), "the lost lease never came back"
    job_id, back_at = ran[0]
    assert job_id == "JOB:held"
    assert back_at - int(expires_at) <= HOUSEKEEPING_MS + ALLOWANCE_MS


@pytest.mark.parametrize("shell", ["sync", "async"])
def test_a_holder_sigkilled_as_its_claim_returns_has_left_the_watch_token_with_the_claim(
        conn: redis.Redis, valkey: EmbeddedValkey, wire: int, shell: str) -> None:
    lease_ms, crowd_size = 1_000, 10
    queue = Queue(conn, "held", wire=wire)
    ran: list[tuple[str, int]] = []
    with process_of(KILLED_AT_CLAIM, valkey.port, wire, lease_ms, shell) as holder, \
            ExitStack() as stack:
        assert wait_until(lambda: blocked_clients(conn) == 1, timeout=20.0)  # served first
        crowd = [Consumer(queue, lambda job: ran.append((job.id, server_ms(conn))))
                 for _ in range(crowd_size)]
        for consumer in crowd:
            stack.callback(consumer.close)
        stack.enter_context(running(*crowd, stop_within=10.0))
        settled(conn, queue, crowd_size + 1)
        first_in_line(conn, queue, "holder", crowd_size + 1)
        queue.enqueue("JOB:held", b"x")  # its wake token goes to the holder, which dies
        assert holder.wait(10) == -signal.SIGKILL
        back_within_the_bound(conn, queue, ran, conn.zscore(queue.key("active"), "JOB:held"))


WATCHER = """ROLE = "watcher"
""" + COUNTED + """
import sys
import redis
from echomq import Consumer, Queue
queue = Queue(redis.Redis(port=int(sys.argv[1])), "held", wire=int(sys.argv[2]))
Consumer(queue, lambda job: None).run()
"""


def test_a_lease_stays_watched_when_the_watcher_dies_and_then_the_holder(
        conn: redis.Redis, valkey: EmbeddedValkey, wire: int) -> None:
    lease_ms, crowd_size = 1_000, 10
    queue = Queue(conn, "held", wire=wire)
    ran: list[tuple[str, int]] = []
    with holder_process(valkey, wire, lease_ms) as holder, \
            process_of(WATCHER, valkey.port, wire) as watcher, ExitStack() as stack:
        crowd = [Consumer(queue, lambda job: ran.append((job.id, server_ms(conn))))
                 for _ in range(crowd_size)]
        for consumer in crowd:
            stack.callback(consumer.close)
        stack.enter_context(running(*crowd, stop_within=10.0))
        parked = crowd_size + 2
        settled(conn, queue, parked)
        # Blocked clients are served in the order they blocked: line up the holder first and
        # the watcher second (out of the line until the holder's turn has come round).
        conn.set("hold:watcher", 1)
        hand_tokens_until(conn, queue, "watcher", parked)
        hand_tokens_until(conn, queue, "holder", parked)
        conn.rpush("go:watcher", 1)
        assert wait_until(lambda: blocked_clients(conn) == parked, timeout=10.0)
        hand_tokens(conn, queue, parked, parked - 2)
        # The holder takes the wake token; its claim's first watch token is the watcher's.
        queue.enqueue("JOB:held", b"x")
        assert wait_until(lambda: conn.get("holding") == b"JOB:held", timeout=10.0)
        watcher.send_signal(signal.SIGKILL)  # it popped its token when the claim was applied
        watcher.wait(10)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        back_within_the_bound(conn, queue, ran, conn.zscore(queue.key("active"), "JOB:held"))


@pytest.mark.parametrize("shell", ["sync", "async"])
def test_a_claim_refused_with_noscript_is_sent_again_with_its_watch_tokens(
        conn: redis.Redis, valkey: EmbeddedValkey, shell: str) -> None:
    queue = Queue(conn, "flushed", wire=5)
    queue.enqueue("JOB:a", b"x")
    conn.script_flush()  # the server lost its scripts: the claim's first flush meets NOSCRIPT
    if shell == "sync":
        _, jobs = queue.settle_leased([], 1, 1_000, None, None, watch=True)
    else:
        async def claimed() -> list[Job]:
            client = redis.asyncio.Redis(port=valkey.port)
            try:
                aqueue = aio.Queue(client, "flushed", wire=5)
                return (await aqueue.settle_leased([], 1, 1_000, None, None, watch=True))[1]
            finally:
                await client.aclose()
        jobs = asyncio.run(claimed())
    assert [job.id for job in jobs] == ["JOB:a"]
    assert conn.lrange(queue.key("watch"), 0, -1) == [b"1", b"1"]  # two, however many flushes
