"""Claim records through the Queue API (docs/PROTOCOL.md, "Claim records"): a claim, a batched
claim or a lane claim sent again under its claim id answers the leases it made, counting no
attempt again and leasing nothing more; a record that expired leaves the call a claim like any
other; a bad claim id is refused before anything is sent. And the loop core's rule: a claim is
sent again under its id until a reply comes."""

from __future__ import annotations

import time

import pytest
import redis

from echomq import Queue
from echomq.consumer.loop import LoopCore
from echomq.engine.calls import new_claim_id
from echomq.engine.errors import ArgumentError
from tests.test_loop import settings

NOW = 1_700_000_000_000


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def queue(request: pytest.FixtureRequest, conn: redis.Redis) -> Queue:
    made = Queue(conn, "work", wire=int(request.param))
    for n in range(3):
        made.enqueue(f"JOB:{n}", b"x", now=NOW + n)
    return made


def test_a_claim_sent_again_under_its_id_answers_its_lease(queue: Queue,
                                                           conn: redis.Redis) -> None:
    first = queue.claim(now=NOW, claim_id="c-1")
    again = queue.claim(now=NOW, claim_id="c-1")
    assert first == again and first is not None and first.attempt == 1
    assert conn.zrange("emq:{work}:active", 0, -1) == [b"JOB:0"]
    assert conn.hget("emq:{work}:job:JOB:0", "a") == b"1"
    assert 0 < conn.pttl("emq:{work}:claim:c-1") <= 30_000
    other = queue.claim(now=NOW, claim_id="c-2")
    assert other is not None and other.id == "JOB:1"


def test_a_batched_claim_sent_again_answers_its_leases_still_held(queue: Queue) -> None:
    first = queue.claim_many(2, now=NOW, claim_id="c-1")
    assert [job.id for job in first] == ["JOB:0", "JOB:1"]
    queue.ack(first[0])
    verdicts, again = queue.settle([], claim=2, now=NOW, claim_id="c-1")
    assert verdicts == [] and again == first[1:]
    assert queue.counts()["pending"] == 1


def test_a_claim_whose_record_expired_claims_afresh(conn: redis.Redis, queue: Queue) -> None:
    first = queue.claim(lease_ms=1, now=NOW, claim_id="c-1")
    deadline = time.monotonic() + 10
    while conn.exists("emq:{work}:claim:c-1") and time.monotonic() < deadline:
        time.sleep(0.005)  # the server's clock expires the record a millisecond on
    assert not conn.exists("emq:{work}:claim:c-1")
    again = queue.claim(now=NOW, claim_id="c-1")
    assert first is not None and again is not None and again.id == "JOB:1"


def test_a_lane_claim_sent_again_answers_its_lease_and_turns_the_ring_once(
        conn: redis.Redis) -> None:
    queue = Queue(conn, "lanes")
    for n, group in enumerate(["a", "b", "a"]):
        queue.enqueue(f"JOB:{n}", b"x", lane=group, now=NOW + n)
    first = queue.claim_lane(now=NOW, claim_id="c-1")
    state = {key: conn.dump(key) for key in conn.keys("emq:{lanes}:*")}
    again = queue.claim_lane(now=NOW, claim_id="c-1")
    assert first == again and first is not None and first.lane == "a" and first.attempt == 1
    assert {key: conn.dump(key) for key in conn.keys("emq:{lanes}:*")} == state
    other = queue.claim_lane(now=NOW, claim_id="c-2")
    assert other is not None and other.lane == "b"


def test_a_record_that_holds_no_lane_lease_answers_none(conn: redis.Redis) -> None:
    queue = Queue(conn, "lanes")
    queue.enqueue("JOB:0", b"x", lane="a", now=NOW)
    flat = Queue(conn, "lanes")
    flat.enqueue("JOB:1", b"x", now=NOW)
    assert flat.claim(now=NOW, claim_id="c-1") is not None  # a flat lease, recorded
    assert queue.claim_lane(now=NOW, claim_id="c-1") is None
    assert conn.llen("emq:{lanes}:lane:a") == 1


@pytest.mark.parametrize("claim_id", ["", "a b", "c" * 201, "é"])
def test_a_bad_claim_id_is_refused_before_sending(queue: Queue, claim_id: str) -> None:
    with pytest.raises(ArgumentError, match="claim_id"):
        queue.claim(now=NOW, claim_id=claim_id)
    assert queue.counts()["active"] == 0


def test_new_claim_ids_differ() -> None:
    assert len({new_claim_id() for _ in range(1000)}) == 1000


def test_the_loop_sends_a_claim_again_under_its_id_until_a_reply_comes() -> None:
    core = LoopCore(settings(lease_ms=30_000, capacity=4))
    first = core.take_round(2, now=1.0)
    assert first.claim_id is not None
    core.unsent(first, 1.5)
    again = core.take_round(1, now=2.0)
    assert again.claim_id == first.claim_id
    assert core.take_round(0, now=2.5).claim_id is None  # a round claiming nothing names none
    assert core.claim_answered(again.claim_id, 2.0) == 1.0  # its leases count from the first
    fresh = core.take_round(2, now=3.0)
    assert fresh.claim_id not in (None, first.claim_id)
    assert core.claim_answered(fresh.claim_id, 3.0) == 3.0
    lapsed = core.take_round(1, now=4.0)
    core.unsent(lapsed, 4.0)
    later = core.take_round(1, now=4.0 + 30.0)  # a lease on: its record has expired
    assert later.claim_id not in (None, lapsed.claim_id)
