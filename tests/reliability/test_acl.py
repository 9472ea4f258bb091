"""Scenario 3: ACL isolation. A tenant's user runs every transition on its own queue through both
executors and is refused another tenant's queue with byte-identical raw replies, including for the
keys a transition derives itself (job rows, lanes). A user without ``+emq.*`` is refused the native
commands by the server itself, while its scripts still run."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
import redis

from echomq import Queue, Verdict
from echomq.conformance.cases import BASE, GOOD, NOW, READY, delayed, leased
from echomq.conformance.cases.lanes import lane_lease, parked
from echomq.conformance.harness import command_for, snapshot
from echomq.conformance.resp import Arg, RawConnection
from echomq.embedded import EmbeddedValkey
from echomq.engine.scripts import script_for
from echomq.engine.transitions import (
    ALL_TRANSITIONS,
    LANE_CLAIM,
    LANE_ENQUEUE,
    TRANSITIONS,
    Transition,
    keys_for,
)
from tests.conftest import start_server

PASSWORD = "pw"
SCRIPT_DB, NATIVE_DB = 1, 2  # each executor in a database of its own
NOPERM_KEY = b"-NOPERM No permissions to access a key\r\n"
# What the Lua executor runs (docs/PROTOCOL.md, ACL), HINCRBY for the derived-key check.
DATA_COMMANDS = [
    "type", "exists", "hget", "hset", "hdel", "del", "pexpire", "zadd", "zrem", "zscore",
    "zrange", "zrangebyscore", "llen", "lindex", "lpush", "rpush", "lpop", "rpop", "lmove",
    "time", "hincrby", "get", "set", "hexists", "pttl", "lrem", "hmget", "zcard", "xadd",
]
NATIVE_COMMANDS = [t.native.lower() for t in TRANSITIONS if t.native]
SESSION = ["+select", "+hello", "+ping"]

USERS: dict[str, list[str]] = {
    "tenant-a": ["~emq:{tenant-a}:*", "+@all"],
    "tenant-a-min": ["~emq:{tenant-a}:*", "-@all", *SESSION, "+evalsha", "+script|load",
                     *(f"+{c}" for c in NATIVE_COMMANDS), *(f"+{c}" for c in DATA_COMMANDS)],
    # Declared keys allowed, job rows (and lanes) not: only the derived-key check refuses.
    "rows-hidden": [*(f"~emq:{{t}}:{role}" for role in ("pending", "active", "delayed", "dead",
                                                          "ring", "wake", "fence")), "+@all"],
    # Rows allowed, lanes not.
    "lanes-hidden": [*(f"~emq:{{t}}:{role}" for role in ("pending", "active", "delayed", "dead",
                                                           "ring", "wake", "fence", "job:*")),
                     "+@all"],
    # Every key of the queue but its lanes (lane:<group>; the lane bookkeeping keys allowed).
    "lane-hidden": ["~emq:{t}:[^l]*", "~emq:{t}:laneconf", "~emq:{t}:leased", "+@all"],
    # Every key of the queue but its groups' prio zsets (prio:<group>, derived like the lanes).
    "prio-hidden": ["~emq:{t}:[^p]*", "~emq:{t}:pending", "~emq:{t}:parked", "~emq:{t}:paused",
                    "+@all"],
    # Every key of the queue but the groups over their rate (throttled).
    "throttled-hidden": ["~emq:{t}:[^t]*", "~emq:{t}:turn", "+@all"],
    # Every key of the queue but its claim records (claim:<claim_id>, declared keys).
    "records-hidden": ["~emq:{t}:[^c]*", "+@all"],
    # A claim's own keys and its records, not the rows: a record's leases are derived rows.
    "record-rows-hidden": [*(f"~emq:{{t}}:{role}" for role in ("pending", "active", "delayed",
                                                                 "dead", "ring", "wake", "fence",
                                                                 "claim:*")), "+@all"],
    # Every key of the queue but its events stream (a declared key: the server's own check).
    "events-hidden": ["~emq:{t}:[^e]*", "~emq:{t}:ended:*", "+@all"],
    # Every key, but not the command the derived-key check names.
    "no-hincrby": ["~emq:{t}:*", "+@all", "-hincrby"],
    # Scripts only: the native commands are not granted.
    "no-native": ["~*", "-@all", *SESSION, "+evalsha", "+script|load",
                  *(f"+{c}" for c in DATA_COMMANDS)],
}


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedValkey]:
    made = start_server()
    try:
        admin = made.client()
        for user, rules in USERS.items():
            admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{PASSWORD}", *rules)
        for transition in ALL_TRANSITIONS:
            admin.script_load(script_for(transition).source)
        admin.close()
        yield made
    finally:
        made.stop()


def as_user(port: int, user: str, protocol: int, db: int = 0) -> RawConnection:
    conn = RawConnection(port)
    assert conn.call("AUTH", user, PASSWORD) == b"+OK\r\n"
    if protocol == 3:
        assert not conn.call("HELLO", "3").startswith(b"-")
    if db:
        assert conn.call("SELECT", db) == b"+OK\r\n"
    return conn


def on_queue(parts: Sequence[Arg], queue: str) -> list[Arg]:
    """A case-table command moved from queue ``q`` onto ``queue``."""
    new = f"emq:{{{queue}}}:".encode()
    return [p.replace(BASE.encode(), new) if isinstance(p, bytes)
            else p.replace(BASE, new.decode()) if isinstance(p, str) else p for p in parts]


class Tenant:
    """One user's two connections (db 1 runs scripts, db 2 native commands), and an admin's."""

    def __init__(self, port: int, user: str, protocol: int) -> None:
        self.conns = {"lua": as_user(port, user, protocol, SCRIPT_DB),
                      "native": as_user(port, user, protocol, NATIVE_DB)}
        self.admin = {"lua": RawConnection(port, 2, SCRIPT_DB),
                      "native": RawConnection(port, 2, NATIVE_DB)}

    def run(self, transition: Transition, queue: str, setup: Sequence[Sequence[Arg]],
            argv: Sequence[Arg] | None = None) -> dict[str, tuple[bytes, bool]]:
        """Per executor: the raw reply to ``argv`` (the case table's good call), and whether the
        keyspace is unchanged."""
        argv = GOOD[transition.name] if argv is None else argv
        out = {}
        for name, conn in self.conns.items():
            admin = self.admin[name]
            admin.call("FLUSHDB")
            for command in setup:
                assert not admin.call(*on_queue(command, queue)).startswith(b"-")
            before = snapshot(admin)
            reply = conn.call(*command_for(name, transition, on_queue(argv, queue)))
            out[name] = (reply, snapshot(admin) == before)
        return out

    def close(self) -> None:
        for conn in (*self.conns.values(), *self.admin.values()):
            conn.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.mark.parametrize("user", ["tenant-a", "tenant-a-min"])
def test_tenant_runs_its_queue_and_is_refused_the_others(server: EmbeddedValkey, user: str,
                                                         protocol: int) -> None:
    tenant = Tenant(server.port, user, protocol)
    try:
        for transition in TRANSITIONS:
            own = tenant.run(transition, "tenant-a", READY[transition.name])
            assert own["lua"][0] == own["native"][0], transition.name
            assert not own["lua"][0].startswith(b"-"), (transition.name, own["lua"][0])
            other = tenant.run(transition, "tenant-b", READY[transition.name])
            assert other["lua"] == other["native"] == (NOPERM_KEY, True), (transition.name, other)
        print(f"[acl {user} resp{protocol}] {len(TRANSITIONS)} transitions: own queue runs, "
              "tenant-b refused alike")
    finally:
        tenant.close()


@pytest.mark.parametrize("user", ["tenant-a", "tenant-a-min"])
def test_tenant_runs_its_queue_with_events(server: EmbeddedValkey, user: str,
                                           protocol: int) -> None:
    """The evented calls need XADD besides the data commands; another queue's stream is
    refused as a declared key."""
    from echomq.conformance.cases.events import evented

    tenant = Tenant(server.port, user, protocol)
    try:
        for transition in (t for t in TRANSITIONS if t.events):
            argv = evented(GOOD[transition.name])
            own = tenant.run(transition, "tenant-a", READY[transition.name], argv)
            assert own["lua"][0] == own["native"][0], transition.name
            assert not own["lua"][0].startswith(b"-"), (transition.name, own["lua"][0])
            assert not own["lua"][1], transition.name  # its changes and their events written
            other = tenant.run(transition, "tenant-b", READY[transition.name], argv)
            assert other["lua"] == other["native"] == (NOPERM_KEY, True), (transition.name, other)
    finally:
        tenant.close()


@pytest.mark.parametrize("transition", [t.name for t in TRANSITIONS if t.events])
def test_a_hidden_events_stream_is_refused_alike(server: EmbeddedValkey, transition: str,
                                                 protocol: int) -> None:
    from echomq.conformance.cases.events import evented
    from echomq.conformance.harness import BY_NAME

    tenant = Tenant(server.port, "events-hidden", protocol)
    try:
        outcome = tenant.run(BY_NAME[transition], "t", READY[transition],
                             evented(GOOD[transition]))
        assert outcome["lua"] == outcome["native"] == (NOPERM_KEY, True), outcome
        plain = tenant.run(BY_NAME[transition], "t", READY[transition])
        assert not plain["lua"][0].startswith(b"-"), plain  # without the stream it runs
    finally:
        tenant.close()


@pytest.mark.parametrize(("user", "transition", "setup"), [
    ("rows-hidden", "claim", READY["claim"]),
    ("rows-hidden", "recover", READY["recover"]),
    ("rows-hidden", "promote", READY["promote"]),
    ("rows-hidden", "ack", READY["ack"]),  # a declared row: the server's own check
    ("lanes-hidden", "recover", leased("JOB:1", deadline=1, lane="g")),
    ("no-hincrby", "claim", READY["claim"]),
    # A lane lease whose group is parked at its limit: its lane is read (the group may come back
    # to the ring), so a user who may not touch it is refused before anything is written.
    ("lane-hidden", "ack", lane_lease() + parked("a", 1, 1)),
    ("lane-hidden", "ack_result", lane_lease() + parked("a", 1, 1)),
    ("lane-hidden", "retry", lane_lease() + parked("a", 1, 1)),
    ("lane-hidden", "settle", lane_lease() + parked("a", 1, 1)),
    ("lane-hidden", "recover", lane_lease(deadline=1) + parked("a", 1, 1)),
    ("throttled-hidden", "promote", READY["promote"]),
    ("throttled-hidden", "promote", delayed("JOB:a1", NOW - 1, "a")),
    # A group's prio zset is checked wherever its lane is: a lane job going back to its group,
    # a group at its limit given a slot back, a group reopened, a lane job cancelled.
    ("prio-hidden", "recover", lane_lease(deadline=1)),
    ("prio-hidden", "promote", delayed("JOB:a1", NOW - 1, "a")),
    ("prio-hidden", "promote", [["HSET", f"{BASE}parked", "a", "2"],
                                ["ZADD", f"{BASE}throttled", "5", "a"]]),
    ("prio-hidden", "ack", lane_lease() + parked("a", 1, 1)),
    ("prio-hidden", "settle-release", lane_lease()),
    ("prio-hidden", "cancel", [["HSET", f"{BASE}job:JOB:1", "p", "p", "a", "0",
                                "lane", "a"], ["RPUSH", f"{BASE}lane:a", "JOB:1"]]),
], ids=lambda v: v if isinstance(v, str) else "")
def test_derived_keys_are_checked_alike(server: EmbeddedValkey, user: str, transition: str,
                                        setup: list[list[Arg]], protocol: int) -> None:
    from echomq.conformance.cases.common import settle
    from echomq.conformance.harness import BY_NAME

    tenant = Tenant(server.port, user, protocol)
    try:
        if transition == "settle-release":
            outcome = tenant.run(BY_NAME["settle"], "t", setup, settle("release", "JOB:1", 1))
        else:
            outcome = tenant.run(BY_NAME[transition], "t", setup)
        assert outcome["lua"] == outcome["native"] == (NOPERM_KEY, True), outcome
    finally:
        tenant.close()


@pytest.mark.parametrize(("user", "setup"), [
    ("records-hidden", READY["claim"]),
    ("record-rows-hidden", [*leased("JOB:1"), ["SET", f"{BASE}claim:c-1", "JOB:1 1"]]),
], ids=["record-hidden", "record-rows-hidden"])
@pytest.mark.parametrize("transition", ["claim", "settle"])
def test_claim_records_are_checked_alike(server: EmbeddedValkey, user: str, transition: str,
                                         setup: list[list[Arg]], protocol: int) -> None:
    """A claim record is a declared key (the server's own check); the rows of the leases it
    holds are derived (the transition's): refused alike, nothing written."""
    from echomq.conformance.cases.records import claim, settle
    from echomq.conformance.harness import BY_NAME

    argv = claim() if transition == "claim" else settle()
    tenant = Tenant(server.port, user, protocol)
    try:
        outcome = tenant.run(BY_NAME[transition], "t", setup, argv)
        assert outcome["lua"] == outcome["native"] == (NOPERM_KEY, True), outcome
    finally:
        tenant.close()


def test_lanes_are_isolated_too(server: EmbeddedValkey) -> None:
    """Lane transitions exist only as scripts: tenant-a's run, tenant-b's are refused."""
    conn = as_user(server.port, "tenant-a", 2, SCRIPT_DB)
    try:
        for queue, expect in (("tenant-a", b"+ENQUEUED"), ("tenant-b", NOPERM_KEY)):
            base = f"emq:{{{queue}}}:"
            reply = conn.call("EVALSHA", script_for(LANE_ENQUEUE).sha, 4, f"{base}job:JOB:1",
                              f"{base}lane:g", f"{base}ring", f"{base}wake", "JOB:1", "p", "g",
                              "*")
            assert reply.startswith(expect), reply
            keys = keys_for(base, LANE_CLAIM)
            reply = conn.call("EVALSHA", script_for(LANE_CLAIM).sha, len(keys), *keys, 1000, "*")
            assert reply.startswith(b"*5" if queue == "tenant-a" else NOPERM_KEY), reply
    finally:
        conn.close()


def test_lane_scripts_check_the_prio_zset(server: EmbeddedValkey) -> None:
    """lane_enqueue (the group joins the ring only when both its keys are empty) and lane_claim
    (a group serves its jobs by priority) read the group's prio zset: a user who may not touch
    it is refused, nothing written."""
    conn = as_user(server.port, "prio-hidden", 2, SCRIPT_DB)
    admin = server.client(db=SCRIPT_DB)
    try:
        base = "emq:{t}:"
        admin.flushdb()
        reply = conn.call("EVALSHA", script_for(LANE_ENQUEUE).sha, 4, f"{base}job:JOB:1",
                          f"{base}lane:g", f"{base}ring", f"{base}wake", "JOB:1", "p", "g", "*")
        assert reply == NOPERM_KEY and admin.keys("*") == []
        admin.rpush(f"{base}ring", "g")
        admin.rpush(f"{base}lane:g", "JOB:1")
        admin.hset(f"{base}job:JOB:1", mapping={"p": "p", "a": "0", "lane": "g"})
        keys = keys_for(base, LANE_CLAIM)
        reply = conn.call("EVALSHA", script_for(LANE_CLAIM).sha, len(keys), *keys, 1000, "*")
        assert reply == NOPERM_KEY and admin.lrange(f"{base}lane:g", 0, -1) == [b"JOB:1"]
    finally:
        admin.flushdb()
        admin.close()
        conn.close()


def test_user_without_native_commands(server: EmbeddedValkey, protocol: int) -> None:
    tenant = Tenant(server.port, "no-native", protocol)
    try:
        for transition in TRANSITIONS:
            outcome = tenant.run(transition, "q", READY[transition.name])
            name = transition.native.lower()  # type: ignore[union-attr]
            assert outcome["native"] == (
                f"-NOPERM User no-native has no permissions to run the '{name}' command\r\n"
                .encode(), True)
            assert not outcome["lua"][0].startswith(b"-"), outcome["lua"]
    finally:
        tenant.close()


@pytest.mark.parametrize("user", ["tenant-a", "tenant-a-min"])
def test_queue_api_as_a_tenant(server: EmbeddedValkey, user: str) -> None:
    """The Python client, logged in as the tenant: its queue works on both wires (lanes on 5);
    another tenant's queue raises the server's NOPERM, on both wires."""
    conn = redis.Redis(port=server.port, username=user, password=PASSWORD, db=3)
    admin = server.client(db=3)
    try:
        admin.script_flush()  # the client must load its scripts itself, as the tenant
        for wire in (5, 6):
            queue = Queue(conn, "tenant-a", wire=wire)
            ids = [f"JOB:{user}-{wire}-{i}" for i in range(3)]
            assert queue.enqueue(ids[0], b"x") is Verdict.ENQUEUED
            assert queue.enqueue_many([(i, b"x") for i in ids[1:]]) == [Verdict.ENQUEUED] * 2
            jobs = [queue.claim(lease_ms=60_000) for _ in ids]
            assert all(jobs)
            first, second, third = jobs
            assert first and second and third
            assert queue.extend(first) is Verdict.EXTENDED
            assert queue.retry(second, delay_ms=0, error="e") is Verdict.RETRYING
            assert queue.promote() == 1
            assert queue.recover() == 0
            assert queue.ack(first) is Verdict.ACKED
            assert queue.ack(third) is Verdict.ACKED
            if wire == 5:
                assert queue.enqueue(f"JOB:{user}-lane", b"x", lane="g") is Verdict.ENQUEUED
                lane_job = queue.claim_lane(lease_ms=60_000)
                assert lane_job is not None and queue.ack(lane_job) is Verdict.ACKED
            other = Queue(conn, "tenant-b", wire=wire)
            with pytest.raises(redis.exceptions.NoPermissionError, match="No permissions"):
                other.enqueue("JOB:1", b"x")
            with pytest.raises(redis.exceptions.NoPermissionError, match="No permissions"):
                other.claim()
        assert not admin.keys("emq:{tenant-b}:*")
    finally:
        admin.flushdb()
        for transition in ALL_TRANSITIONS:  # for the raw tests, which send EVALSHA only
            admin.script_load(script_for(transition).source)
        admin.close()
        conn.close()
