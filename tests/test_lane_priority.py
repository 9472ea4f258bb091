"""Priority inside a lane, on the lane scripts: lane_enqueue and lane_enqueue_delayed take the
optional priority (sent only when it is not 0), a group serves its jobs by priority and FIFO
within one, the group joins the ring once whichever of its keys holds its jobs, and a bad
priority or a prio zset of another type is refused with nothing written."""

from __future__ import annotations

import pytest
import redis

from echomq import Queue
from echomq.engine import transitions as t
from echomq.engine.priority import pending_score
from echomq.engine.scripts import script_for

NOW = 1_700_000_000_000
E_PRIORITY = b"EMQNUM priority must be an integer from -100 to 100"


def send(queue: Queue, transition: t.Transition, keys: list[str], args: list[object]) -> bytes:
    reply: bytes = queue.conn.eval(script_for(transition).source, len(keys), *keys, *args)
    return reply


def lane_enqueue(queue: Queue, job_id: str, group: str, priority: str | None,
                 now: int = NOW) -> bytes:
    transition, keys, args = queue.calls.enqueue(job_id, b"p", group, now)
    return send(queue, transition, list(keys), [*args, *([] if priority is None else [priority])])


@pytest.fixture
def queue(conn: redis.Redis) -> Queue:
    return Queue(conn, "prio", wire=5, check_policy=False)


def test_a_prioritised_job_waits_in_its_groups_zset(queue: Queue) -> None:
    conn = queue.conn
    assert lane_enqueue(queue, "JOB:1", "a", "7") == b"ENQUEUED"
    assert lane_enqueue(queue, "JOB:2", "a", "007", NOW + 1) == b"ENQUEUED"
    assert conn.hget(queue.key("job", "JOB:1"), "priority") == b"7"
    assert conn.zrange(queue.key("prio", lane="a"), 0, -1, withscores=True) == [
        (b"JOB:1", pending_score(7, NOW)), (b"JOB:2", pending_score(7, NOW + 1))]
    assert conn.llen(queue.key("lane", lane="a")) == 0
    assert conn.lrange(queue.key("ring"), 0, -1) == [b"a"]
    # a priority-0 job after them: the group is in the ring already, once
    assert lane_enqueue(queue, "JOB:3", "a", None) == b"ENQUEUED"
    assert conn.lrange(queue.key("ring"), 0, -1) == [b"a"]


@pytest.mark.parametrize("written", [None, "0", "-0"])
def test_priority_zero_is_the_row_and_lane_of_old(queue: Queue, written: str | None) -> None:
    conn = queue.conn
    assert lane_enqueue(queue, "JOB:1", "a", written) == b"ENQUEUED"
    assert conn.hgetall(queue.key("job", "JOB:1")) == {
        b"p": b"p", b"t": str(NOW).encode(), b"lane": b"a"}
    assert conn.lrange(queue.key("lane", lane="a"), 0, -1) == [b"JOB:1"]
    assert not conn.exists(queue.key("prio", lane="a"))


@pytest.mark.parametrize("bad", ["101", "-101", "+5", " 5", "5.0", "abc", "", "-", "1000"])
def test_a_bad_priority_is_refused_with_nothing_written(queue: Queue, bad: str) -> None:
    with pytest.raises(redis.ResponseError, match=E_PRIORITY.decode()):
        lane_enqueue(queue, "JOB:1", "a", bad)
    transition, keys, args = queue.calls.enqueue("JOB:1", b"p", "a", NOW, delay_ms=5)
    with pytest.raises(redis.ResponseError, match=E_PRIORITY.decode()):
        send(queue, transition, list(keys), [*args, bad])
    assert queue.conn.keys("*") == []


def test_a_prio_zset_of_another_type_is_refused(queue: Queue) -> None:
    queue.conn.set(queue.key("prio", lane="a"), "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        lane_enqueue(queue, "JOB:1", "a", None)
    assert queue.conn.keys("*") == [queue.key("prio", lane="a").encode()]


def test_a_group_serves_its_jobs_by_priority_fifo_within_one(queue: Queue) -> None:
    order = [("JOB:a", None), ("JOB:b", "5"), ("JOB:c", "-5"), ("JOB:d", "5"), ("JOB:e", None),
             ("JOB:f", "100"), ("JOB:g", "-100"), ("JOB:h", "-5")]
    for step, (job_id, priority) in enumerate(order):
        assert lane_enqueue(queue, job_id, "a", priority, NOW + step) == b"ENQUEUED"
    served = []
    while (job := queue.claim_lane(1000, now=NOW + 100)) is not None:
        served.append(job.id)
    assert served == ["JOB:f", "JOB:b", "JOB:d", "JOB:a", "JOB:e", "JOB:c", "JOB:h", "JOB:g"]
    assert queue.conn.lrange(queue.key("ring"), 0, -1) == []


def test_priority_never_crosses_groups(queue: Queue) -> None:
    """Group a's priority-100 jobs do not take group b's turns: the ring alternates."""
    for n in range(3):
        assert lane_enqueue(queue, f"JOB:a{n}", "a", "100", NOW + n) == b"ENQUEUED"
        assert lane_enqueue(queue, f"JOB:b{n}", "b", None, NOW + n) == b"ENQUEUED"
    served = []
    while (job := queue.claim_lane(1000, now=NOW + 100)) is not None:
        served.append(job.lane)
    assert served == ["a", "b", "a", "b", "a", "b"]


def test_a_delayed_lane_job_keeps_its_priority_when_promoted(queue: Queue) -> None:
    conn = queue.conn
    transition, keys, args = queue.calls.enqueue("JOB:1", b"p", "a", NOW, delay_ms=50)
    assert send(queue, transition, list(keys), [*args, "-3"]) == b"ENQUEUED"
    assert conn.hget(queue.key("job", "JOB:1"), "priority") == b"-3"
    assert conn.zscore(queue.key("delayed"), "JOB:1") == NOW + 50
    assert lane_enqueue(queue, "JOB:2", "a", None) == b"ENQUEUED"
    assert queue.promote(now=NOW + 50) == 1
    assert conn.zrange(queue.key("prio", lane="a"), 0, -1, withscores=True) == [
        (b"JOB:1", pending_score(-3, NOW + 50))]
    assert conn.lrange(queue.key("ring"), 0, -1) == [b"a"]
    first, second = queue.claim_lane(1000, now=NOW + 60), queue.claim_lane(1000, now=NOW + 60)
    assert first is not None and second is not None
    assert (first.id, second.id) == ("JOB:2", "JOB:1")
