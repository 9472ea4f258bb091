"""Lane limits: a group's concurrency limit, rate, weight and pause, and the whole queue's pause;
each parks a group out of the ring and brings it back on the event that frees it, never by a
scan, and never holds another group up."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio

from echomq import Queue, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.consumer.blocking import Consumer
from echomq.embedded import EmbeddedValkey
from echomq.engine.calls import Ack, Release, Retry
from echomq.ops import admin
from echomq.queue.lanes import ring_in_turn

NOW = 1_700_000_000_000


def tenants(conn: redis.Redis) -> Queue:
    return Queue(conn, "tenants", wire=5)


def fill(queue: Queue, group: str, n: int) -> None:
    queue.enqueue_many([(f"JOB:{group}{i}", b"", group) for i in range(n)], now=NOW)


def groups_served(queue: Queue, claims: int, now: int = NOW) -> list[str | None]:
    served = []
    for _ in range(claims):
        job = queue.claim_lane(now=now)
        served.append(job.lane if job else None)
    return served


def ring(queue: Queue) -> list[str]:
    """The groups in the ring, in serving order (the entries they left behind skipped)."""
    conn = queue.conn
    return ring_in_turn(conn.lrange(queue.key("ring"), 0, -1), conn.hgetall(queue.key("ringleft")))


def test_a_lane_at_its_limit_leaves_the_ring_and_the_others_go_on(conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane("greedy", concurrency=2)
    fill(queue, "greedy", 5)
    fill(queue, "small", 3)
    assert groups_served(queue, 6) == ["greedy", "small", "greedy", "small", "small", None]
    assert ring(queue) == []
    assert queue.leased_by_lane() == {"greedy": 2, "small": 3}
    assert conn.hget(queue.key("parked"), "greedy") == b"1"


def test_each_way_a_lease_leaves_active_frees_the_slot(conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane("a", concurrency=1)
    fill(queue, "a", 6)
    first = queue.claim_lane(now=NOW)
    assert first is not None and queue.claim_lane(now=NOW) is None
    assert queue.ack(first) is Verdict.ACKED
    second = queue.claim_lane(now=NOW)
    assert second is not None and queue.claim_lane(now=NOW) is None
    assert queue.retry(second, delay_ms=10**9, now=NOW) is Verdict.RETRYING
    third = queue.claim_lane(lease_ms=10, now=NOW)
    assert third is not None and queue.claim_lane(now=NOW) is None
    assert queue.recover(now=NOW + 11) == 1  # back to its lane's head, and the slot is free
    again = queue.claim_lane(now=NOW + 11)
    assert again is not None and again.id == third.id
    verdicts, _ = queue.settle([Release(again)], now=NOW + 11)
    assert verdicts == [Verdict.RELEASED]
    fourth = queue.claim_lane(now=NOW + 11)
    assert fourth is not None and fourth.id == third.id
    verdicts, _ = queue.settle([Retry(fourth, max_attempts=1)], now=NOW + 11)
    assert verdicts == [Verdict.DEAD]
    fifth = queue.claim_lane(now=NOW + 11)
    assert fifth is not None
    verdicts, _ = queue.settle([Ack(fifth)], now=NOW + 11)
    assert verdicts == [Verdict.ACKED]
    assert queue.claim_lane(now=NOW + 11) is not None
    assert queue.leased_by_lane() == {"a": 1}


def test_a_lane_whose_only_lease_is_lost_at_its_last_attempt_comes_back(
        conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane("a", concurrency=1)
    fill(queue, "a", 2)
    assert queue.claim_lane(lease_ms=5, now=NOW) is not None
    assert queue.recover(now=NOW + 6, max_attempts=1) == 1  # dead: the worker was lost
    assert conn.zcard(queue.key("dead")) == 1
    assert ring(queue) == ["a"]


def test_raising_a_limit_brings_the_lane_back_and_lowering_it_parks_it(
        conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane("a", concurrency=1)
    fill(queue, "a", 4)
    fill(queue, "b", 1)
    assert groups_served(queue, 2) == ["a", "b"]
    assert ring(queue) == []
    queue.set_lane("a", concurrency=3)
    assert ring(queue) == ["a"]
    queue.set_lane("a", concurrency=1)
    assert ring(queue) == []
    queue.set_lane("a", concurrency=None)  # no override, no default: no limit
    assert groups_served(queue, 4) == ["a", "a", "a", None]


def test_the_default_limit_applies_to_every_lane_and_an_override_wins(conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane_defaults(concurrency=1)
    queue.set_lane("vip", concurrency=3)
    fill(queue, "a", 3)
    fill(queue, "vip", 3)
    assert groups_served(queue, 5) == ["a", "vip", "vip", "vip", None]
    assert queue.lane_settings("vip")["concurrency"] == 3
    assert queue.lane_settings("a")["concurrency"] == 1
    queue.set_lane_defaults(concurrency=2)  # the parked groups under it come back
    assert ring(queue) == ["a"]


def test_a_lane_over_its_rate_waits_for_its_window_and_promote_brings_it_back(
        conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane("a", rate=2, window_ms=1000)
    fill(queue, "a", 5)
    fill(queue, "b", 5)
    assert groups_served(queue, 5) == ["a", "b", "a", "b", "b"]
    assert conn.zrange(queue.key("throttled"), 0, -1, withscores=True) == [(b"a", NOW + 1000)]
    assert queue.next_due() == NOW + 1000
    assert queue.promote(now=NOW + 999) == 0 and "a" not in ring(queue)
    conn.delete(queue.key("wake"))
    queue.promote(now=NOW + 1000)
    assert ring(queue)[-1] == "a" and conn.llen(queue.key("wake")) == 1
    assert groups_served(queue, 3, now=NOW + 1000) == ["b", "a", "b"]


def test_the_next_lane_claim_reopens_a_window_too(conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane("a", rate=1, window_ms=50)
    fill(queue, "a", 3)
    assert groups_served(queue, 2) == ["a", None]
    assert groups_served(queue, 2, now=NOW + 50) == ["a", None]


def test_a_lane_of_weight_w_is_served_w_times_per_turn(conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane("big", weight=3)
    fill(queue, "big", 7)
    fill(queue, "small", 3)
    assert groups_served(queue, 9) == ["big", "big", "big", "small", "big", "big", "big",
                                       "small", "big"]


def test_a_paused_lane_leaves_the_ring_and_comes_back_on_resume(conn: redis.Redis) -> None:
    queue = tenants(conn)
    fill(queue, "a", 2)
    fill(queue, "b", 2)
    queue.pause("a")
    assert queue.paused() == (False, ["a"])
    assert groups_served(queue, 3) == ["b", "b", None]
    queue.enqueue("JOB:a9", b"", lane="a", now=NOW)  # a paused lane takes jobs, out of the ring
    assert ring(queue) == []
    conn.delete(queue.key("wake"))
    queue.resume("a")
    assert queue.paused() == (False, [])
    assert conn.llen(queue.key("wake")) == 1
    assert groups_served(queue, 4) == ["a", "a", "a", None]


def test_a_paused_queue_leases_nothing_flat_or_lane(conn: redis.Redis) -> None:
    queue = tenants(conn)
    fill(queue, "a", 1)
    queue.enqueue("JOB:flat", b"", now=NOW)
    queue.pause()
    assert queue.paused() == (True, [])
    assert queue.claim(now=NOW) is None
    assert queue.claim_lane(now=NOW) is None
    assert queue.claim_many(5, now=NOW) == []
    assert queue.counts()["pending"] == 1
    queue.resume()
    assert conn.llen(queue.key("wake")) > 0
    assert queue.claim(now=NOW) is not None and queue.claim_lane(now=NOW) is not None


def test_the_asyncio_queue_has_the_same_controls(valkey: EmbeddedValkey) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=valkey.port)
        queue = AsyncQueue(client, "tenants")
        await queue.set_lane_defaults(concurrency=1, now=NOW)
        await queue.set_lane("a", rate=1, window_ms=100, now=NOW)
        await queue.enqueue_many([("JOB:a1", b"", "a"), ("JOB:a2", b"", "a")], now=NOW)
        assert await queue.lane_settings("a") == {"concurrency": 1, "rate": 1,
                                                  "window_ms": 100, "weight": 1}
        assert (await queue.claim_lane(now=NOW)) is not None
        assert await queue.next_due() == NOW + 100
        await queue.pause("a")
        await queue.pause()
        assert await queue.paused() == (True, ["a"])
        await queue.resume()
        await queue.resume("a")
        assert await queue.paused() == (False, [])
        native = AsyncQueue(client, "native", wire=6)
        await native.enqueue("JOB:n", b"", now=NOW)
        await native.pause()
        assert await native.claim(now=NOW) is None
        await native.resume()
        assert await native.claim(now=NOW) is not None
        await client.aclose()

    asyncio.run(scenario())


def test_the_counts_include_the_jobs_of_parked_lanes(conn: redis.Redis) -> None:
    queue = tenants(conn)
    queue.set_lane("capped", concurrency=1)
    fill(queue, "capped", 3)
    fill(queue, "held", 2)
    fill(queue, "open", 1)
    queue.pause("held")
    assert queue.claim_lane(now=NOW) is not None  # capped: parked at its limit, 2 waiting
    assert queue.counts()["lanes"] == 5
    assert queue.lane_depths() == {"open": 1, "capped": 2, "held": 2}
    assert admin.stats(conn, "tenants").lanes == {"open": 1, "capped": 2, "held": 2}


def test_the_asyncio_counts_include_parked_lanes_too(valkey: EmbeddedValkey,
                                                     conn: redis.Redis) -> None:
    queue = tenants(conn)
    fill(queue, "held", 2)
    fill(queue, "open", 1)
    queue.pause("held")

    async def scenario() -> dict[str, int]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=valkey.port)
        counts = await AsyncQueue(client, "tenants").counts()
        await client.aclose()
        return counts

    assert asyncio.run(scenario())["lanes"] == 3


@pytest.mark.parametrize("wire", [5, 6])
def test_a_consumer_of_a_paused_queue_runs_nothing_and_the_resume_wakes_it(
        conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "work", wire=wire)
    ran: list[str] = []
    consumer = Consumer(queue, lambda job: ran.append(job.id), park_cap_ms=60_000)
    try:
        queue.pause()
        queue.enqueue("JOB:1", b"", now=NOW)
        conn.delete(queue.key("wake"))
        assert consumer.drain() == 0 and ran == []
        queue.resume()
        started = time.monotonic()
        assert consumer.park()  # woken by the resume, not the park cap
        assert time.monotonic() - started < 5
        assert consumer.drain() == 1 and ran == ["JOB:1"]
    finally:
        consumer.close()
