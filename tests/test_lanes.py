"""Fair lanes: lane enqueue and the lane claim (scripts only), fairness proven, ghosts dropped,
the ring kept consistent, and wire=6 refusing lanes before anything is sent."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis
from hypothesis import given, settings, strategies as st

from echomq import Job, LaneError, Queue, Verdict, Wire6Unsupported
from echomq.conformance.harness import snapshot
from echomq.conformance.resp import RawConnection
from echomq.embedded import EmbeddedValkey

NOW = 1_700_000_000_000


@pytest.fixture
def conn(library_conn: Any) -> Any:
    """Every test here runs on a redis-py client and on a valkey-py one."""
    return library_conn


def lanes_queue(conn: redis.Redis, name: str = "tenants") -> Queue:
    return Queue(conn, name, wire=5)


def ring_is_consistent(queue: Queue) -> bool:
    """A group is in the ring exactly once exactly when its lane is non-empty."""
    ring = [g.decode() for g in queue.conn.lrange(queue.key("ring"), 0, -1)]
    lanes = {key.decode().rsplit("lane:", 1)[1]
             for key in queue.conn.scan_iter(match=queue.key("lane", lane="*"))}
    return sorted(ring) == sorted(lanes) and len(set(ring)) == len(ring)


def test_lane_enqueue_admits_once_and_joins_the_ring(conn: redis.Redis) -> None:
    queue = lanes_queue(conn)
    assert queue.enqueue("JOB:1", b"a", lane="acme", now=NOW) is Verdict.ENQUEUED
    assert queue.enqueue("JOB:1", b"b", lane="acme", now=NOW) is Verdict.DUPLICATE
    assert queue.enqueue("JOB:1", b"c", now=NOW) is Verdict.DUPLICATE  # one id, one admission
    assert queue.enqueue("JOB:2", b"d", lane="acme", now=NOW) is Verdict.ENQUEUED
    assert conn.lrange(queue.key("ring"), 0, -1) == [b"acme"]
    assert conn.lrange(queue.key("lane", lane="acme"), 0, -1) == [b"JOB:1", b"JOB:2"]
    assert conn.hget(queue.key("job", "JOB:1"), "lane") == b"acme"
    assert conn.llen(queue.key("wake")) == 2


def test_lane_claim_rotates_and_an_emptied_lane_leaves_the_ring(conn: redis.Redis) -> None:
    queue = lanes_queue(conn)
    queue.enqueue_many([("JOB:a1", b"", "a"), ("JOB:a2", b"", "a"), ("JOB:b1", b"", "b")],
                       now=NOW)
    served = [queue.claim_lane(now=NOW) for _ in range(4)]
    assert [(job.id, job.lane) for job in served if job] == [
        ("JOB:a1", "a"), ("JOB:b1", "b"), ("JOB:a2", "a")]
    assert served[3] is None
    assert conn.exists(queue.key("ring")) == 0
    assert served[0] == Job("JOB:a1", b"", 1, "a", fence=1)


def test_lane_claim_skips_and_drops_ghosts(conn: redis.Redis) -> None:
    queue = lanes_queue(conn)
    queue.enqueue_many([("JOB:g1", b"", "a"), ("JOB:g2", b"", "b"), ("JOB:b2", b"x", "b")],
                       now=NOW)
    conn.delete(queue.key("job", "JOB:g1"), queue.key("job", "JOB:g2"))
    job = queue.claim_lane(now=NOW)
    assert job == Job("JOB:b2", b"x", 1, "b", fence=1)
    assert conn.exists(queue.key("lane", lane="a"), queue.key("lane", lane="b")) == 0
    assert conn.exists(queue.key("ring")) == 0
    assert queue.claim_lane(now=NOW) is None


def test_lane_jobs_come_back_to_their_lane(conn: redis.Redis) -> None:
    queue = lanes_queue(conn)
    queue.enqueue_many([("JOB:1", b"", "a"), ("JOB:2", b"", "a")], now=NOW)
    first = queue.claim_lane(lease_ms=10, now=NOW)
    assert first is not None and first.id == "JOB:1"
    assert queue.recover(now=NOW + 10) == 1
    assert conn.lrange(queue.key("lane", lane="a"), 0, -1) == [b"JOB:1", b"JOB:2"]
    again = queue.claim_lane(now=NOW + 11)
    assert again == Job("JOB:1", b"", 2, "a", fence=2)
    assert queue.retry(again, delay_ms=5, now=NOW + 12) is Verdict.RETRYING
    second = queue.claim_lane(now=NOW + 13)
    assert second is not None and second.id == "JOB:2"
    assert conn.exists(queue.key("ring")) == 0
    assert queue.promote(now=NOW + 17) == 1
    assert conn.lrange(queue.key("ring"), 0, -1) == [b"a"]
    assert queue.claim_lane(now=NOW + 18) == Job("JOB:1", b"", 3, "a", fence=4)
    assert ring_is_consistent(queue)


def test_bad_lane_names_are_refused_by_client_and_server(conn: redis.Redis) -> None:
    queue = lanes_queue(conn)
    for bad in ["", "a b", "x" * 201, "é", "{a}"]:
        with pytest.raises(LaneError, match=r"^EMQLANE "):
            queue.enqueue("JOB:1", b"", lane=bad)
    keys = [queue.key("job", "JOB:1"), queue.key("lane", lane="a b"), queue.key("ring"),
            queue.key("wake")]
    with pytest.raises(LaneError) as server_side:
        from echomq.engine import transitions

        queue.executor.call(conn, transitions.LANE_ENQUEUE, keys, ["JOB:1", b"", "a b", "*"])
    assert str(server_side.value).startswith("EMQLANE ")
    assert conn.dbsize() == 0


def test_wire6_refuses_lanes_before_sending(conn: redis.Redis) -> None:
    queue = Queue(conn, "tenants", wire=6)
    calls_before = conn.info("commandstats")
    with pytest.raises(Wire6Unsupported) as claim:
        queue.claim_lane()
    with pytest.raises(Wire6Unsupported) as enqueue:
        queue.enqueue("JOB:1", b"", lane="a")
    with pytest.raises(Wire6Unsupported):
        queue.enqueue_many([("JOB:2", b""), ("JOB:3", b"", "a")])
    assert claim.value.name == "lane_claim"
    assert enqueue.value.name == "lane_enqueue"
    calls_after = conn.info("commandstats")
    calls_after.pop("cmdstat_info")
    calls_before.pop("cmdstat_info", None)
    assert calls_after == calls_before
    assert conn.dbsize() == 0


def test_greedy_tenant_does_not_starve_the_rest(conn: redis.Redis) -> None:
    """One tenant enqueues 10,000 jobs, nine enqueue 10 each: the first 100 lane claims serve
    all ten, and each small tenant is served fully within its first 10 turns."""
    queue = lanes_queue(conn)
    items: list[tuple[str, bytes, str | None]] = [
        (f"JOB:greedy-{n}", b"", "greedy") for n in range(10_000)]
    for tenant in range(9):
        items += [(f"JOB:t{tenant}-{n}", b"", f"small-{tenant}") for n in range(10)]
    for start in range(0, len(items), 1_000):
        queue.enqueue_many(items[start:start + 1_000], now=NOW)
    served = [queue.claim_lane(now=NOW) for _ in range(100)]
    tenants = Counter(job.lane for job in served if job)
    assert len(tenants) == 10
    assert all(tenants[f"small-{t}"] == 10 for t in range(9))
    assert tenants["greedy"] == 10
    assert queue.lane_depths() == {"greedy": 9_990}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("enqueue"), st.integers(0, 5), st.integers(1, 4)),
                          st.tuples(st.just("claim"), st.just(0), st.just(0))),
                min_size=1, max_size=80))
def test_k_consecutive_claims_serve_k_lanes(valkey: EmbeddedValkey,
                                            steps: list[tuple[str, int, int]]) -> None:
    """SPEC invariant 5: while the same k lanes stay non-empty, any k consecutive lane claims
    serve k different lanes; and the ring always holds exactly the non-empty lanes."""
    conn = valkey.client()
    conn.flushall()
    queue = lanes_queue(conn, "fair")
    depth: Counter[str] = Counter()
    window: list[str] = []  # lanes served since the set of non-empty lanes last changed
    for index, (action, lane, count) in enumerate(steps):
        if action == "enqueue":
            group = f"g{lane}"
            queue.enqueue_many([(f"JOB:{index}-{n}", b"", group) for n in range(count)], now=NOW)
            if depth[group] == 0:
                window = []
            depth[group] += count
            continue
        nonempty = {g for g, d in depth.items() if d > 0}
        job = queue.claim_lane(now=NOW)
        if not nonempty:
            assert job is None
            continue
        assert job is not None and job.lane in nonempty
        window.append(job.lane)
        recent = window[-len(nonempty):]
        assert len(set(recent)) == len(recent), (window, nonempty)
        depth[job.lane] -= 1
        if depth[job.lane] == 0:
            window = []
        assert ring_is_consistent(queue)
    conn.close()


BASE = "emq:{q}:"
LANE_ENQUEUE_GOOD: list[object] = [4, BASE + "job:JOB:1", BASE + "lane:a", BASE + "ring",
                                   BASE + "wake", "JOB:1", b"p", "a", NOW]
LANE_CLAIM_KEYS = ["ring", "active", "fence", "laneconf", "leased", "parked", "throttled",
                   "windows", "turn", "paused"]
LANE_CLAIM_GOOD: list[object] = [10, *(BASE + role for role in LANE_CLAIM_KEYS), 1000, NOW]
LANE_SET_KEYS = ["ring", "laneconf", "leased", "parked", "throttled", "windows", "turn"]
LANE_SET_GOOD: list[object] = [7, *(BASE + role for role in LANE_SET_KEYS), "a", 2, "=", "-",
                               3, NOW]
LANE_PAUSE_KEYS = ["ring", "parked", "throttled", "turn", "paused", "wake"]
LANE_PAUSE_GOOD: list[object] = [6, *(BASE + role for role in LANE_PAUSE_KEYS), "a", "1"]


def _with(argv: list[object], index: int, value: object) -> list[object]:
    changed = list(argv)
    changed[index] = value
    return changed


LANE_BAD_INPUT = [
    ("enqueue-arity", "lane_enqueue", LANE_ENQUEUE_GOOD[:-1], b"-EMQARITY EMQ.LANE_ENQUEUE "),
    ("enqueue-numkeys", "lane_enqueue", _with(LANE_ENQUEUE_GOOD, 0, "x"), b"-ERR value is not"),
    ("enqueue-id", "lane_enqueue", _with(LANE_ENQUEUE_GOOD, 5, "JOB:"), b"-EMQKIND "),
    ("enqueue-lane", "lane_enqueue", _with(LANE_ENQUEUE_GOOD, 7, "a b"), b"-EMQLANE "),
    ("enqueue-lane-empty", "lane_enqueue", _with(LANE_ENQUEUE_GOOD, 7, ""), b"-EMQLANE "),
    ("enqueue-lane-key", "lane_enqueue", _with(LANE_ENQUEUE_GOOD, 7, "b"), b"-EMQKEYS "),
    ("enqueue-other-ring", "lane_enqueue", _with(LANE_ENQUEUE_GOOD, 3, "emq:{x}:ring"),
     b"-EMQKEYS "),
    ("enqueue-now", "lane_enqueue", _with(LANE_ENQUEUE_GOOD, 8, "-1"), b"-EMQNUM now "),
    ("claim-arity", "lane_claim", [*LANE_CLAIM_GOOD, "x"], b"-EMQARITY EMQ.LANE_CLAIM "),
    ("claim-keys", "lane_claim", _with(LANE_CLAIM_GOOD, 1, BASE + "pending"), b"-EMQKEYS "),
    ("claim-fence-key", "lane_claim", _with(LANE_CLAIM_GOOD, 3, "emq:{x}:fence"), b"-EMQKEYS "),
    ("claim-lease", "lane_claim", _with(LANE_CLAIM_GOOD, 11, "0"), b"-EMQNUM lease_ms "),
    ("claim-now", "lane_claim", _with(LANE_CLAIM_GOOD, 12, "1e3"), b"-EMQNUM now "),
    ("set-arity", "lane_set", LANE_SET_GOOD[:-1], b"-EMQARITY EMQ.LANE_SET "),
    ("set-keys", "lane_set", _with(LANE_SET_GOOD, 2, "emq:{x}:laneconf"), b"-EMQKEYS "),
    ("set-scope", "lane_set", _with(LANE_SET_GOOD, 8, "a b"), b"-EMQLANE "),
    ("set-zero", "lane_set", _with(LANE_SET_GOOD, 9, "0"), b"-EMQNUM concurrency "),
    ("set-word", "lane_set", _with(LANE_SET_GOOD, 12, "heavy"), b"-EMQNUM weight "),
    ("set-now", "lane_set", _with(LANE_SET_GOOD, 13, "-5"), b"-EMQNUM now "),
    ("pause-arity", "lane_pause", [*LANE_PAUSE_GOOD, "x"], b"-EMQARITY EMQ.LANE_PAUSE "),
    ("pause-keys", "lane_pause", _with(LANE_PAUSE_GOOD, 5, BASE + "pause"), b"-EMQKEYS "),
    ("pause-scope", "lane_pause", _with(LANE_PAUSE_GOOD, 7, ""), b"-EMQLANE "),
    ("pause-flag", "lane_pause", _with(LANE_PAUSE_GOOD, 8, "yes"), b"-EMQNUM paused "),
]
LANE_WRONG_TYPES = [
    ("enqueue-row", "lane_enqueue", LANE_ENQUEUE_GOOD, [["SET", BASE + "job:JOB:1", "x"]]),
    ("enqueue-lane", "lane_enqueue", LANE_ENQUEUE_GOOD, [["SET", BASE + "lane:a", "x"]]),
    ("enqueue-ring", "lane_enqueue", LANE_ENQUEUE_GOOD, [["HSET", BASE + "ring", "f", "v"]]),
    ("claim-ring", "lane_claim", LANE_CLAIM_GOOD, [["SET", BASE + "ring", "x"]]),
    ("claim-active", "lane_claim", LANE_CLAIM_GOOD, [["RPUSH", BASE + "active", "x"]]),
    ("claim-fence", "lane_claim", LANE_CLAIM_GOOD, [["HSET", BASE + "fence", "f", "v"]]),
    ("claim-derived-lane", "lane_claim", LANE_CLAIM_GOOD,
     [["RPUSH", BASE + "ring", "a"], ["SET", BASE + "lane:a", "x"]]),
    ("claim-leased", "lane_claim", LANE_CLAIM_GOOD, [["SET", BASE + "leased", "x"]]),
    ("claim-paused", "lane_claim", LANE_CLAIM_GOOD, [["HSET", BASE + "paused", "f", "v"]]),
    ("set-laneconf", "lane_set", LANE_SET_GOOD, [["SET", BASE + "laneconf", "x"]]),
    ("set-derived-lane", "lane_set", LANE_SET_GOOD, [["SET", BASE + "lane:a", "x"]]),
    ("pause-parked", "lane_pause", LANE_PAUSE_GOOD, [["RPUSH", BASE + "parked", "x"]]),
    ("pause-derived-lane", "lane_pause", LANE_PAUSE_GOOD, [["SET", BASE + "lane:a", "x"]]),
]


def _script_call(conn: RawConnection, name: str, argv: list[object]) -> bytes:
    from echomq.engine import transitions
    from echomq.engine.scripts import script_for

    transition = next(t for t in transitions.SCRIPT_ONLY if t.name == name)
    conn.call("SCRIPT", "LOAD", script_for(transition).source)
    return conn.call("EVALSHA", script_for(transition).sha, *argv)  # type: ignore[arg-type]


@pytest.mark.parametrize(("label", "name", "argv", "expect"), LANE_BAD_INPUT,
                         ids=[case[0] for case in LANE_BAD_INPUT])
def test_lane_bad_input_changes_nothing(valkey: EmbeddedValkey, label: str, name: str,
                                        argv: list[object], expect: bytes) -> None:
    valkey.client().flushall()
    with RawConnection(valkey.port) as conn:
        conn.call("RPUSH", BASE + "lane:b", "JOB:9")
        before = snapshot(conn)
        assert _script_call(conn, name, argv).startswith(expect)
        assert snapshot(conn) == before


@pytest.mark.parametrize(("label", "name", "argv", "setup"), LANE_WRONG_TYPES,
                         ids=[case[0] for case in LANE_WRONG_TYPES])
def test_lane_wrong_types_change_nothing(valkey: EmbeddedValkey, label: str, name: str,
                                         argv: list[object], setup: list[list[str]]) -> None:
    valkey.client().flushall()
    with RawConnection(valkey.port) as conn:
        for command in setup:
            conn.call(*command)
        before = snapshot(conn)
        assert _script_call(conn, name, argv).startswith(b"-WRONGTYPE ")
        assert snapshot(conn) == before


def test_lane_claim_checks_the_derived_keys_acl(valkey: EmbeddedValkey) -> None:
    admin = valkey.client()
    admin.flushall()
    queue = lanes_queue(admin, "q")
    queue.enqueue("JOB:1", b"", lane="secret", now=NOW)
    admin.acl_setuser("lanes-user", enabled=True, nopass=True, commands=["+@all"],
                      keys=[BASE + "ring", BASE + "active", BASE + "fence"])
    try:
        with RawConnection(valkey.port) as conn, RawConnection(valkey.port) as watcher:
            _script_call(watcher, "lane_claim", ["x"])  # loads the script as the admin
            assert conn.call("AUTH", "lanes-user", "x").startswith(b"+OK")
            before = snapshot(watcher)
            assert _script_call(conn, "lane_claim", LANE_CLAIM_GOOD) == (
                b"-NOPERM No permissions to access a key\r\n")
            assert snapshot(watcher) == before
    finally:
        admin.acl_deluser("lanes-user")


def test_lane_claim_and_claim_share_the_queues_fence(conn: redis.Redis) -> None:
    queue = lanes_queue(conn)
    queue.enqueue("JOB:1", b"", now=NOW)
    queue.enqueue("JOB:a1", b"", lane="a", now=NOW)
    flat, lane = queue.claim(now=NOW), queue.claim_lane(now=NOW)
    assert flat is not None and lane is not None
    assert (flat.fence, lane.fence) == (1, 2)
    assert conn.hget(queue.key("job", "JOB:a1"), "f") == b"2"
    assert conn.get(queue.key("fence")) == b"2"


def test_lane_claim_refuses_a_counter_that_cannot_count(valkey: EmbeddedValkey) -> None:
    valkey.client().flushall()
    with RawConnection(valkey.port) as conn:
        conn.call("HSET", BASE + "job:JOB:1", "p", "p", "a", "0", "lane", "a")
        conn.call("RPUSH", BASE + "lane:a", "JOB:1")
        conn.call("RPUSH", BASE + "ring", "a")
        conn.call("SET", BASE + "fence", "999999999999999")
        before = snapshot(conn)
        assert _script_call(conn, "lane_claim", LANE_CLAIM_GOOD).startswith(b"-EMQFENCE ")
        assert snapshot(conn) == before
