"""A lane's pause, resume and the cancel that empties it never walk the ring: the group's entry
stays where it stands, counted in ``ringleft``, and the lane claim that reaches it drops it. Each
call runs the same commands whatever the number of lanes, none of them one that walks a list
(``INFO commandstats``: a script's and the module's inner commands are counted as their own);
the keyspace each leaves is stated. A ring written by the earlier release (no ``ringleft``) is
read as before."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import redis

from echomq import Queue, Verdict
from echomq.queue.lanes import ring_in_turn

NOW = 1_700_000_000_000
# The list commands whose cost grows with the list: none may run on a pause, resume or cancel.
WALKS = {"lrem", "lpos", "lrange", "lindex", "linsert", "lset", "ltrim"}


def filled(conn: redis.Redis, lanes: int, wire: int = 5) -> Queue:
    """A queue of ``lanes`` groups ``g0``... in the ring, one job each (``JOB:<group>``), on
    ``wire`` (its lanes enqueued as scripts, as lanes are)."""
    conn.flushall()
    items = [(f"JOB:g{g}", b"p", f"g{g}") for g in range(lanes)]
    for start in range(0, lanes, 1000):
        Queue(conn, "flat", wire=5).enqueue_many(items[start:start + 1000], now=NOW)
    queue = Queue(conn, "flat", wire=wire)
    conn.delete(queue.key("wake"))  # its tokens (one an enqueue, up to 64) the same at any size
    return queue


def commands_of(conn: redis.Redis, act: Callable[[], object]) -> dict[str, int]:
    """The commands ``act`` had the server run (EVALSHA and EMQ.* themselves left out), counted."""
    conn.config_resetstat()
    act()
    stats = conn.info("commandstats")
    ran = {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    return {name: n for name, n in ran.items()
            if name not in ("evalsha", "config|resetstat", "info")
            and not name.startswith("emq.")}


def ring(queue: Queue) -> list[bytes]:
    return queue.conn.lrange(queue.key("ring"), 0, -1)


def left(queue: Queue) -> dict[bytes, bytes]:
    return queue.conn.hgetall(queue.key("ringleft"))


def test_a_pause_leaves_the_entry_where_it_stands_and_a_resume_takes_it_back(
        conn: redis.Redis) -> None:
    queue = filled(conn, 5)
    entries = [f"g{g}".encode() for g in range(5)]
    queue.pause("g2")
    assert ring(queue) == entries
    assert left(queue) == {b"g2": b"1"}
    assert conn.hgetall(queue.key("parked")) == {b"g2": b"4"}
    queue.resume("g2")  # its place kept: nothing pushed, the count gone
    assert ring(queue) == entries
    assert conn.exists(queue.key("ringleft"), queue.key("parked")) == 0


def test_the_lane_claim_drops_a_left_entry_serving_no_one_for_it(conn: redis.Redis) -> None:
    queue = filled(conn, 4)
    queue.pause("g0")
    served = [job.lane for job in iter(lambda: queue.claim_lane(now=NOW), None)]
    assert served == ["g1", "g2", "g3"]
    assert ring(queue) == [] and left(queue) == {}  # g0's entry dropped, counted off
    queue.resume("g0")  # no entry left: back at the tail
    assert ring(queue) == [b"g0"]
    assert conn.exists(queue.key("ringleft"), queue.key("parked")) == 0


def test_a_resume_after_the_entry_was_dropped_and_a_lane_refilled_join_once(
        conn: redis.Redis) -> None:
    queue = filled(conn, 3)
    queue.pause("g1")
    queue.resume("g1")
    queue.pause("g1")
    assert ring(queue) == [b"g0", b"g1", b"g2"] and left(queue) == {b"g1": b"1"}
    assert queue.cancel("JOB:g0", now=NOW) is Verdict.CANCELLED  # g0's lane emptied: left too
    assert left(queue) == {b"g0": b"1", b"g1": b"1"}
    queue.enqueue("JOB:g0b", b"p", lane="g0", now=NOW)  # g0 joins again at the tail
    assert ring(queue) == [b"g0", b"g1", b"g2", b"g0"]
    assert ring_in_turn(ring(queue), left(queue)) == ["g2", "g0"]
    served = [job.id for job in iter(lambda: queue.claim_lane(now=NOW), None)]
    assert served == ["JOB:g2", "JOB:g0b"]
    # the first claim dropped both left entries (g1 paused stays out, its count gone)
    assert ring(queue) == [] and left(queue) == {}
    assert conn.hgetall(queue.key("parked")) == {b"g1": b"4"}


@pytest.mark.parametrize("wire", [5, 6])
def test_a_cancel_that_empties_a_lane_leaves_its_entry_counted(conn: redis.Redis,
                                                                wire: int) -> None:
    queue = filled(conn, 4, wire)
    assert queue.cancel("JOB:g1", now=NOW) is Verdict.CANCELLED
    assert ring(queue) == [b"g0", b"g1", b"g2", b"g3"]
    assert left(queue) == {b"g1": b"1"}
    assert conn.exists(queue.key("lane", lane="g1")) == 0


@pytest.mark.parametrize("wire", [5, 6])
def test_a_cancel_of_a_parked_groups_last_job_counts_nothing(conn: redis.Redis,
                                                             wire: int) -> None:
    queue = filled(conn, 3, wire)
    queue.pause("g1")
    assert queue.cancel("JOB:g1", now=NOW) is Verdict.CANCELLED
    assert left(queue) == {b"g1": b"1"}  # the pause's, not one more
    queue.resume("g1")  # its lane empty: it does not come back, its left entry stays counted
    assert left(queue) == {b"g1": b"1"}
    assert ring_in_turn(ring(queue), left(queue)) == ["g0", "g2"]


def pause_and_resume(queue: Queue, group: str) -> tuple[dict[str, int], dict[str, int]]:
    conn = queue.conn
    return (commands_of(conn, lambda: queue.pause(group)),
            commands_of(conn, lambda: queue.resume(group)))


def test_a_pause_and_a_resume_run_the_same_commands_at_ten_and_two_thousand_lanes(
        conn: redis.Redis) -> None:
    costs = []
    for lanes in (10, 2000):
        queue = filled(conn, lanes)
        group = f"g{lanes // 2}"
        pause_and_resume(queue, group)  # the script loaded, its first call's own reads done
        costs.append(pause_and_resume(queue, group))
    assert costs[0] == costs[1]
    for cost in costs[0]:
        assert not WALKS & set(cost), cost


@pytest.mark.parametrize("wire", [5, 6])
def test_a_cancel_emptying_a_lane_runs_the_same_commands_at_ten_and_two_thousand_lanes(
        conn: redis.Redis, wire: int) -> None:
    costs = []
    for lanes in (10, 2000):
        queue = filled(conn, lanes, wire)
        queue.cancel(f"JOB:g{lanes // 2 + 1}", now=NOW)  # the script loaded
        cancel = partial(queue.cancel, f"JOB:g{lanes // 2}", now=NOW)
        costs.append(commands_of(conn, cancel))
    assert costs[0] == costs[1]
    # one LREM, the job out of its own lane (O(that lane)); none of the ring
    assert costs[0].get("lrem") == 1
    assert not (WALKS - {"lrem"}) & set(costs[0]), costs[0]


def test_a_ring_the_earlier_release_wrote_is_read_as_before(conn: redis.Redis) -> None:
    """The keyspace of the earlier release (each group once in the ring, a paused group out of
    it, no ringleft): pause, resume, cancel and the lane claim go on from it."""
    queue = filled(conn, 4)
    conn.lrem(queue.key("ring"), 0, "g3")  # g3 paused as the earlier release left it
    conn.hset(queue.key("parked"), "g3", "4")
    assert conn.exists(queue.key("ringleft")) == 0
    queue.resume("g3")
    assert ring(queue) == [b"g0", b"g1", b"g2", b"g3"] and left(queue) == {}
    queue.pause("g0")
    assert queue.cancel("JOB:g1", now=NOW) is Verdict.CANCELLED
    served = [job.lane for job in iter(lambda: queue.claim_lane(now=NOW), None)]
    assert served == ["g2", "g3"]
    assert conn.exists(queue.key("ring"), queue.key("ringleft")) == 0


def test_a_lane_claim_walks_at_most_a_hundred_entries_and_the_next_goes_on(
        conn: redis.Redis) -> None:
    """250 entries left at the head: each claim drops 100 of them and replies null, the ring
    still holding entries; the third serves the first lane past them."""
    queue = filled(conn, 260)
    for g in range(250):
        queue.pause(f"g{g}")
    claims = [queue.claim_lane(now=NOW) for _ in range(3)]
    assert claims[:2] == [None, None]
    assert claims[2] is not None and claims[2].lane == "g250"
    assert conn.hlen(queue.key("ringleft")) == 0
    assert ring(queue) == [f"g{g}".encode() for g in range(251, 260)]
