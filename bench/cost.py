"""Server-side cost per transition: ``INFO commandstats`` usec_per_call of every transition on both
executors (``cmdstat_evalsha`` vs ``cmdstat_emq.*``), next to the bare data-structure commands the
transition performs, all in one run. ``CONFIG RESETSTAT`` before each phase; a phase runs one
kind of call only, K times, pipelined from Python (the client's cost is not in these numbers)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis
from tqdm import tqdm

from bench.common import call, commandstats, ids, pipelined, reset, stat_name
from echomq.engine import transitions as t

PAYLOAD = b'{"task":"noop","args":[]}'
RETENTION_MS = 86_400_000
TRANSITIONS = ("enqueue", "claim", "extend", "retry", "promote", "recover", "ack")

# The bare commands each transition performs, split into the writes (for enqueue and claim the
# issue's list: HSET+ZADD+RPUSH, ZRANGE+ZREM+HSET+ZADD, and claim's SET of the fence counter) and
# the reads that check the state.
BARE: dict[str, dict[str, tuple[str, ...]]] = {
    "enqueue": {"core": ("hset", "zadd", "rpush"), "reads": ("exists",)},
    "claim": {"core": ("zrange", "zrem", "hset", "zadd", "set"), "reads": ("hget", "get")},
    "extend": {"core": ("zadd",), "reads": ("zscore", "hget")},
    "retry": {"core": ("zrem", "hset", "zadd"), "reads": ("zscore", "hget")},
    "promote": {"core": ("zrangebyscore", "zrem", "zadd"), "reads": ("hmget", "llen")},
    "recover": {"core": ("zrangebyscore", "zrem", "zadd"), "reads": ("hmget", "llen")},
    "ack": {"core": ("zrem", "hdel", "pexpire"), "reads": ("zscore", "hget")},
}


def _now() -> int:
    return int(time.time() * 1000)


class Phases:
    """The transitions in a life-cycle order on one queue, each phase K calls."""

    def __init__(self, conn: redis.Redis, base: str, wire: int, count: int) -> None:
        self.conn, self.base, self.wire, self.count = conn, base, wire, count
        self.jobs = ids(f"w{wire}", count)
        self.fences: dict[str, int] = {}  # each job's current lease, from the last claims

    def keys(self, transition: t.Transition, job_id: str | None = None) -> list[str]:
        return t.keys_for(self.base, transition, job_id)

    def run(self, commands: Iterator[Sequence[Any]]) -> None:
        replies = pipelined(self.conn, commands)
        bad = [r for r in replies if isinstance(r, Exception)]
        if bad:
            raise RuntimeError(f"wire={self.wire}: {bad[0]}")
        for reply in replies:  # a claim's [id, payload, attempt, fence]: its lease
            if isinstance(reply, list) and len(reply) == 4:
                self.fences[reply[0].decode()] = int(reply[3])

    def measured(self, name: str, commands: Callable[[], Iterator[Sequence[Any]]],
                 transition: t.Transition) -> float:
        reset(self.conn)
        self.run(commands())
        stats = commandstats(self.conn)[stat_name(transition, self.wire)]
        if int(stats["calls"]) != self.count:
            raise RuntimeError(f"{name}: {stats['calls']} calls, expected {self.count}")
        return stats["usec_per_call"]

    def claims(self, lease_ms: int) -> Iterator[Sequence[Any]]:
        for _ in self.jobs:
            yield call(t.CLAIM, self.wire, self.keys(t.CLAIM), (lease_ms, "*"))

    def all(self) -> dict[str, float]:
        w, out = self.wire, {}
        out["enqueue"] = self.measured("enqueue", lambda: (
            call(t.ENQUEUE, w, self.keys(t.ENQUEUE, j), (j, PAYLOAD, "*")) for j in self.jobs),
            t.ENQUEUE)
        out["claim"] = self.measured("claim", lambda: self.claims(30_000), t.CLAIM)
        out["extend"] = self.measured("extend", lambda: (
            call(t.EXTEND, w, self.keys(t.EXTEND, j), (j, self.fences[j], 30_000, "*"))
            for j in self.jobs),
            t.EXTEND)
        out["retry"] = self.measured("retry", lambda: (
            call(t.RETRY, w, self.keys(t.RETRY, j), (j, self.fences[j], 0, 5, "boom", "*"))
            for j in self.jobs), t.RETRY)
        time.sleep(0.005)
        out["promote"] = self.measured("promote", lambda: (
            call(t.PROMOTE, w, self.keys(t.PROMOTE), ("*", 1)) for _ in self.jobs), t.PROMOTE)
        self.run(self.claims(1))
        time.sleep(0.01)
        out["recover"] = self.measured("recover", lambda: (
            call(t.RECOVER, w, self.keys(t.RECOVER), ("*", 1, 5)) for _ in self.jobs), t.RECOVER)
        self.run(self.claims(30_000))
        out["ack"] = self.measured("ack", lambda: (
            call(t.ACK, w, self.keys(t.ACK, j), (j, self.fences[j], RETENTION_MS))
            for j in self.jobs), t.ACK)
        return out


def bare(conn: redis.Redis, base: str, count: int) -> dict[str, dict[str, float]]:
    """The same life cycle as plain commands; per transition, usec per job of each command."""
    jobs = ids("bare", count)
    row = {j: f"{base}job:{j}" for j in jobs}
    pending, active, delayed, wake, fence = (
        f"{base}{r}" for r in ("pending", "active", "delayed", "wake", "fence"))
    now = _now()
    far = now + 30_000
    sequences: dict[str, Callable[[], Iterator[Sequence[Any]]]] = {
        "enqueue": lambda: (c for j in jobs for c in (
            ("EXISTS", row[j]),
            ("HSET", row[j], "p", PAYLOAD, "t", now),
            ("ZADD", pending, now, j), ("RPUSH", wake, "1"))),
        "claim": lambda: (c for j in jobs for c in (
            ("ZRANGE", pending, 0, 0), ("GET", fence), ("ZREM", pending, j),
            ("HGET", row[j], "a"), ("SET", fence, "1"),
            ("HSET", row[j], "a", "1", "f", "1"), ("ZADD", active, far, j),
            ("HGET", row[j], "p"))),
        "extend": lambda: (c for j in jobs for c in (
            ("ZSCORE", active, j), ("HGET", row[j], "a"), ("ZADD", active, far + 1, j))),
        "retry": lambda: (c for j in jobs for c in (
            ("ZSCORE", active, j), ("HGET", row[j], "a"), ("ZREM", active, j),
            ("HSET", row[j], "error", "boom"), ("ZADD", delayed, now, j))),
        "promote": lambda: (c for j in jobs for c in (
            ("ZRANGEBYSCORE", delayed, "-inf", now, "LIMIT", 0, 1), ("HMGET", row[j], "lane"),
            ("ZREM", delayed, j), ("ZADD", pending, now, j), ("LLEN", wake))),
        "recover": lambda: (c for j in jobs for c in (
            ("ZRANGEBYSCORE", active, "-inf", far + 1, "LIMIT", 0, 1),
            ("HMGET", row[j], "lane", "t"), ("ZREM", active, j),
            ("ZADD", pending, now, j), ("LLEN", wake))),
        "ack": lambda: (c for j in jobs for c in (
            ("ZSCORE", active, j), ("HGET", row[j], "a"), ("ZREM", active, j),
            ("HDEL", row[j], "p"), ("PEXPIRE", row[j], RETENTION_MS))),
    }
    # recover needs the jobs back in active: claim them again (not measured) before it.
    reclaim = lambda: (c for j in jobs for c in (  # noqa: E731
        ("ZREM", pending, j), ("ZADD", active, far, j)))
    out: dict[str, dict[str, float]] = {}
    for name in TRANSITIONS:
        if name == "recover":
            pipelined(conn, reclaim())
        reset(conn)
        pipelined(conn, sequences[name]())
        stats = commandstats(conn)
        out[name] = {cmd: stats[cmd]["usec"] / count for cmd in stats
                     if not cmd.startswith(("config", "info", "client"))}
    return out


def run(conn: redis.Redis, count: int, reps: int) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {"lua": {}, "native": {}}
    bare_samples: list[dict[str, dict[str, float]]] = []
    steps = [(rep, kind) for rep in range(reps) for kind in ("native", "lua", "bare")]
    for rep, kind in tqdm(steps, desc="cost per transition", unit="phase"):
        conn.flushall()
        if kind == "bare":
            bare_samples.append(bare(conn, "emq:{bare}:", count))
            continue
        wire = 6 if kind == "native" else 5
        result = Phases(conn, f"emq:{{cost{rep}{wire}}}:", wire, count).all()
        for name, value in result.items():
            samples[kind].setdefault(name, []).append(value)
    conn.flushall()
    table = {}
    for name in TRANSITIONS:
        per_cmd: dict[str, float] = {}
        for cmd in {c for s in bare_samples for c in s[name]}:
            per_cmd[cmd] = statistics.median(s[name].get(cmd, 0.0) for s in bare_samples)
        core = sum(per_cmd.get(c, 0.0) for c in BARE[name]["core"])
        reads = sum(per_cmd.get(c, 0.0) for c in BARE[name]["reads"])
        lua = statistics.median(samples["lua"][name])
        native = statistics.median(samples["native"][name])
        table[name] = {
            "lua": lua, "native": native, "bare_core": core, "bare_all": core + reads,
            "bare_commands": per_cmd, "lua_samples": samples["lua"][name],
            "native_samples": samples["native"][name],
            "native_over_lua": native / lua, "native_over_core": native / core,
            "native_over_all": native / (core + reads),
        }
    return {"count": count, "reps": reps, "table": table}
