"""Priority as the Python client offers it: ``Queue.enqueue(priority=)`` and ``enqueue_many``'s
4-tuples send the optional argument only when it is not 0 (a priority-0 call is the bytes of one
from before priorities), a bad priority is refused before anything is sent, and the readers of
pending scores (``stats``, ``echomq inspect``, ``echomq enqueue --priority``) read a banded
score as a priority and a time."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from echomq import Queue, Verdict
from echomq.cli.views import score_row
from echomq.embedded import EmbeddedValkey
from echomq.engine import transitions as t
from echomq.engine.calls import QueueCalls
from echomq.engine.errors import ArgumentError
from echomq.engine.priority import pending_score, split_score
from echomq.engine.produce import enqueue_many_calls
from echomq.engine.transitions import ERRORS, TIME_CAP
from echomq.ops import admin
from tests.command_line import cli

NOW = 1_700_000_000_000
BAD = [101, -101, 1000, True, 1.5, "5", None]


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def test_a_priority_of_zero_sends_the_call_from_before_priorities() -> None:
    calls = QueueCalls("q")
    for lane in (None, "g"):
        assert calls.enqueue("JOB:1", b"p", lane, NOW, priority=0) == \
            calls.enqueue("JOB:1", b"p", lane, NOW)
        assert calls.enqueue("JOB:1", b"p", lane, NOW, delay_ms=5, priority=0) == \
            calls.enqueue("JOB:1", b"p", lane, NOW, delay_ms=5)
    assert enqueue_many_calls(calls, [("JOB:1", b"p", None, 0)], NOW) == \
        enqueue_many_calls(calls, [("JOB:1", b"p")], NOW)


@pytest.mark.parametrize("lane", [None, "g"])
def test_a_priority_is_the_last_argument_of_every_admission(lane: str | None) -> None:
    calls = QueueCalls("q")
    for call in (calls.enqueue("JOB:1", b"p", lane, NOW, priority=-7),
                 calls.enqueue("JOB:1", b"p", lane, NOW, at_ms=NOW + 5, priority=-7),
                 *enqueue_many_calls(calls, [("JOB:1", b"p", lane, -7)], NOW)):
        transition, _keys, args = call
        if transition is t.ENQUEUE_MANY:  # a flat job of a batch: its priority ends its words
            assert lane is None and args[1:] == ["JOB:1", b"p", "0", "-7"]
            continue
        # a flat job may add its deadline after it; a call without one ends at the priority
        assert transition.optional == (("priority",) if lane else ("priority", "expires_at"))
        assert len(args) == len(transition.args) + 1 and args[-1] == "-7"


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_a_bad_priority_is_refused_before_anything_is_sent(conn: redis.Redis, wire: int,
                                                           bad: Any) -> None:
    queue = Queue(conn, "bad", wire=wire)
    attempts = [lambda: queue.enqueue("JOB:1", b"", priority=bad),
                lambda: queue.enqueue("JOB:1", b"", delay_ms=10, priority=bad),
                lambda: queue.enqueue_many([("JOB:1", b""), ("JOB:2", b"", None, bad)])]
    for attempt in attempts:
        with pytest.raises(ArgumentError) as raised:
            attempt()
        assert str(raised.value) == ERRORS["PRIORITY"].text
    assert conn.keys("*") == []


def test_every_admission_takes_a_priority_on_both_wires(conn: redis.Redis, wire: int) -> None:
    queue = Queue(conn, "ranked", wire=wire)
    assert queue.enqueue("JOB:1", b"", priority=100, now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:2", b"", priority=-100, delay_ms=5, now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue_many([("JOB:3", b"", None, 3), ("JOB:4", b"")], now=NOW) == [
        Verdict.ENQUEUED, Verdict.ENQUEUED]
    if wire == 5:  # lanes are scripts only
        assert queue.enqueue("JOB:5", b"", lane="g", priority=9, now=NOW) is Verdict.ENQUEUED


def test_stats_reads_the_oldest_flat_job_of_every_priority(conn: redis.Redis) -> None:
    """Pending holds a band per priority: the oldest job waiting is the earliest of the bands'
    heads, whatever band the first entry is in."""
    base = "emq:{aged}:"
    admitted = {"JOB:urgent": (10, NOW + 5_000), "JOB:old": (0, NOW), "JOB:low": (-3, NOW + 1),
                "JOB:mid": (4, NOW + 2_000)}
    for job_id, (priority, at) in admitted.items():
        conn.hset(base + "job:" + job_id, mapping={"p": "", "a": 0,
                                                   "t": at})
        conn.zadd(base + "pending", {job_id: pending_score(priority, at)})
    stats = admin.stats(conn, "aged")
    assert stats.pending == 4
    assert stats.oldest_pending_age_ms == stats.server_time_ms - NOW


def test_stats_of_one_priority_reads_its_head(conn: redis.Redis) -> None:
    conn.zadd("emq:{one}:pending", {"JOB:a": pending_score(7, NOW),
                                    "JOB:b": pending_score(7, NOW + 9)})
    stats = admin.stats(conn, "one")
    assert stats.oldest_pending_age_ms == stats.server_time_ms - NOW


def test_inspect_shows_a_pending_score_as_its_priority_and_time() -> None:
    label, shown = score_row("pending", pending_score(5, NOW), NOW + 60_000)
    assert label == "enqueued (priority 5)" and shown == score_row("delayed", NOW, NOW + 60_000)[1]
    assert score_row("pending", float(NOW), NOW)[0] == "enqueued"
    assert split_score(pending_score(-100, TIME_CAP)) == (-100, TIME_CAP)


def test_the_command_line_enqueues_at_a_priority(valkey: EmbeddedValkey,
                                                 conn: redis.Redis) -> None:
    said = json.loads(cli(valkey, "enqueue", "cliq", "hello", "--id", "JOB:c1", "--priority",
                          "-5", "--json"))
    assert said == {"id": "JOB:c1", "verdict": "ENQUEUED"}
    assert conn.hget("emq:{cliq}:job:JOB:c1", "p") == b"hello"
