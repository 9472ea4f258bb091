"""The lockstep machine's world beyond the queue: its keys and inputs, and the rules that act
behind the queue's back (rows expired, ghosts, tampered fields, lanes, foreign keys planted) or
send bad input, and the checks after each step: mixins of ``tests.test_stateful.QueueMachine``."""

from __future__ import annotations

from typing import Any

import hiredis
from hypothesis import event, strategies as st
from hypothesis.stateful import (
    invariant,
    precondition,
    rule,
)

from echomq.conformance.model import (
    KEY_TYPE,
    int_field,
    normalise,
    raw,
)
from echomq.conformance.model.words import row_priority
from echomq.engine.transitions import (
    ACK,
    ACK_RESULT,
    CANCEL,
    CLAIM,
    ENQUEUE,
    ENQUEUE_DELAYED,
    ENQUEUE_MANY,
    ENQUEUE_UNIQUE,
    EXTEND_MANY,
    RETRY,
    SETTLE,
    TRANSITIONS,
    TRIM_DEAD,
    Transition,
)
from tests.stateful_dead import DeadBoundsRules

BASE = b"emq:{q}:"
OTHER = b"emq:{r}:"
POOL = [b"JOB:%d" % i for i in range(1, 10)] + [b"JOB:a.b_c-d:e", b"JOB:" + b"z" * 200]
GROUPS = [b"a", b"b", b"g:1"]
ZSETS = (b"pending", b"active", b"delayed", b"dead")
# The lane bookkeeping keys flat transitions touch for lane jobs, and their types.
LANE_BOOKKEEPING = {b"laneconf": b"hash", b"leased": b"hash", b"parked": b"hash",
                    b"throttled": b"zset"}
START = 1_700_000_000_000
# What a settlement of a lease that is not current may answer, replaying one that went through
# (each also STALE): the single verbs by name, settle's items by op word.
# A flagged lease's settlement answers CANCELLED, and so does its replay.
REPLAYS: dict[str, tuple[bytes, ...]] = {
    "ack": (b"+ACKED\r\n", b"+CANCELLED\r\n"), "ack_result": (b"+ACKED\r\n", b"+CANCELLED\r\n"),
    "retry": (b"+RETRYING\r\n", b"+DEAD\r\n", b"+CANCELLED\r\n")}
ITEM_REPLAYS: dict[bytes, tuple[bytes, ...]] = {
    b"ack": (b"ACKED", b"CANCELLED"), b"done": (b"ACKED", b"CANCELLED"),
    b"retry": (b"RETRYING", b"DEAD", b"CANCELLED"), b"release": (b"CANCELLED",)}
# The transitions bad input is sent to: all but the dependencies' (a good call by chance would
# admit or release a waiting job the world does not track; tests/test_join_stateful.py runs them).
BAD_INPUT = tuple(t for t in TRANSITIONS if t.name not in ("enqueue_after", "after"))
# The transitions whose replies the machine's bookkeeping follows: a valid call of one among the
# bad input runs as its rule runs it (``BeyondTheQueue.tracked``).
TRACKED = (ENQUEUE, ENQUEUE_DELAYED, ENQUEUE_UNIQUE, ENQUEUE_MANY, CLAIM, ACK, ACK_RESULT, SETTLE,
           CANCEL, TRIM_DEAD)

PAYLOADS = st.one_of(
    st.sampled_from([b"", b"p", b"\x00\xff\r\n$-1\r\n", b"*3\r\n", b"x" * 5000]),
    st.binary(max_size=24),
)
LATE = st.sampled_from([0, 0, 1, 1_000, 60_000, 10**6])  # recover/promote often run late
ERRORS = st.sampled_from([b"", b"boom", b"\x00\r\n-ERR x\r\n", "ошибка".encode()])
MAX_ATTEMPTS = st.sampled_from([1, 2, 3, 5])
RESULTS = st.one_of(st.sampled_from([b"", b"42", b"\x00\r\n+OK\r\n", b"r" * 524_288,
                                     b"r" * 524_289]), st.binary(max_size=24))
ITEM_WIDTHS = {b"ack": 3, b"done": 4, b"retry": 6, b"release": 3}  # a settle item's words
RETRY_TAIL = st.tuples(st.sampled_from([0, 1, 1_000]), MAX_ATTEMPTS, ERRORS).map(list)

BAD_NUMKEYS = [b"x", b"", b"-1", b"-0", b"01", b"+2", b" 2", b"2 ", b"1.0", b"99",
               b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809"]
BAD_IDS = [b"", b"JOB:", b"job:1", b"JOB", b"JOB:a b", b"JOB:\xff", b"JOB:1\n", b"X:1",
           b"JOB:" + b"a" * 201, b"JOB:{q}", b"JOB:1\x00"]
BAD_NUMBERS = [b"", b"-1", b"0", b"1.5", b"1e3", b" 1", b"1 ", b"+1", b"0x10", b"*",
               b"1" * 16, b"999999999999999", b"000000000000001", b"0000000000000001", b"abc",
               b"\xd9\xa1"]
# The arguments a call turns into a TTL on the server's own clock, not the machine's, and the
# least a valid call among the bad input keeps them (``lasting``).
SERVER_CLOCK = ("retention_ms", "period_ms")
LASTING_MS = 600_000

Argv = list[Any]


def key(role: bytes, job_id: bytes | None = None, base: bytes = BASE) -> bytes:
    if role == b"dedupe":  # enqueue_unique's dedupe key: a name of the caller's
        return base + b"dedupe:k"
    return base + (b"job:" + job_id if role == b"job" else role)


def parsed(reply: bytes) -> Any:
    reader = hiredis.Reader()
    reader.feed(reply)
    return reader.gets()


def lasting(transition: Transition, argv: Argv, numbers: dict[str, int]) -> Argv:
    """A valid call's ``argv`` with each TTL on the server's own clock shorter than any run (a
    mutation that made retention_ms 1, or moved fence 1 into its place) made ``LASTING_MS``:
    the tombstone it leaves would otherwise expire on the server before the keyspaces are
    compared, while the model keeps it; as the rules' TTLs, it outlasts the run."""
    out = list(argv)
    for name in SERVER_CLOCK:
        if 0 < numbers.get(name, 0) < LASTING_MS:
            out[1 + int(argv[0]) + transition.args.index(name)] = LASTING_MS
    return out


def settle_items(argv: Argv) -> list[tuple[bytes, bytes, int, Argv]]:
    """A valid settle's items, after its keys and its four numbers (now, retention_ms,
    lease_ms, count): (op, id, fence, the words after: done's result; retry's delay_ms,
    max_attempts and error)."""
    words, items = argv[1 + int(argv[0]) + 4:], []
    while words:
        width = ITEM_WIDTHS[words[0]]
        op, job_id, fence, *tail = words[:width]
        items.append((op, job_id, int(fence), [raw(word) for word in tail]))
        words = words[width:]
    return items


class BeyondTheQueue(DeadBoundsRules):
    """Rules of ``QueueMachine`` that act outside the transitions it models."""

    def behind_the_back(self, *command: bytes) -> None:
        """A raw data command on both databases and the model."""
        self.pair.apply([command])
        self.model.apply_setup(command)

    def zmembers(self, role: bytes) -> list[bytes]:
        if self.model.kind(key(role)) != b"zset":
            return []
        return [member for member, _ in self.model.zitems(key(role))]

    def is_current(self, job_id: bytes, fence: int) -> bool:
        return self.model.is_current(key(b"active"), key(b"job", job_id), job_id, fence)

    # behind the queue's back ------------------------------------------------------------------

    @precondition(lambda self: self.tombstones())
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        """An acked job's tombstone expires (with its ended key, which the ack gave the same
        expiry): its id may be admitted again."""
        job_id = data.draw(st.sampled_from(self.tombstones()), label="expired")
        self.behind_the_back(b"DEL", key(b"job", job_id))
        ended = self.model.keys.get(key(b"ended:" + job_id))
        if ended is not None and ended.expires:
            self.behind_the_back(b"DEL", key(b"ended:" + job_id))

    def tombstones(self) -> list[bytes]:
        return [job_id for job_id in POOL if job_id not in self.live | self.ghosts
                and self.model.kind(key(b"job", job_id)) == b"hash"]

    @precondition(lambda self: self.live and len(self.ghosts) < 3)
    @rule(data=st.data(), replacement=st.sampled_from([None, b"SET", b"RPUSH"]))
    def ghost(self, data: st.DataObject, replacement: bytes | None) -> None:
        """A live job's row disappears (or turns into another type): its id is a ghost."""
        job_id = data.draw(st.sampled_from(sorted(self.live)), label="ghost")
        row = key(b"job", job_id)
        self.behind_the_back(b"DEL", row)
        if replacement is not None:
            self.behind_the_back(replacement, row, b"x")
        self.live.discard(job_id)
        self.ghosts.add(job_id)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), field=st.sampled_from([b"a", b"t", b"p"]),
          value=st.sampled_from([None, b"", b"x", b"-1", b"007", b"1" * 16, b"1.5", b"3"]))
    def tamper(self, data: st.DataObject, field: bytes, value: bytes | None) -> None:
        """A row field gets an odd value (or, for payload, goes away)."""
        job_id = data.draw(st.sampled_from(sorted(self.live)), label="tampered")
        row = key(b"job", job_id)
        if value is None:
            self.behind_the_back(b"HDEL", row, b"p")
        else:
            self.behind_the_back(b"HSET", row, field, value)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), group=st.sampled_from(GROUPS))
    def to_lane(self, data: st.DataObject, group: bytes) -> None:
        """A leased or delayed job becomes a lane job: recover/promote put it in its lane."""
        movable = sorted(self.live & set(self.zmembers(b"active") + self.zmembers(b"delayed")))
        if movable:
            job_id = data.draw(st.sampled_from(movable), label="lane job")
            self.behind_the_back(b"HSET", key(b"job", job_id), b"lane", group)

    @precondition(lambda self: not self.foreign)
    @rule(role=st.sampled_from([*ZSETS, b"wake", b"ring", b"lane:a", b"lane:g:1",
                                b"job:JOB:1", b"job:JOB:5", b"fence", b"ended:JOB:1",
                                *LANE_BOOKKEEPING]),
          pick=st.integers(0, 2))
    def plant(self, role: bytes, pick: int) -> None:
        """A key of the queue holds the wrong type (only where nothing lives)."""
        target = key(role)
        if self.model.kind(target) != b"none":
            return
        right = LANE_BOOKKEEPING.get(role) or KEY_TYPE.get(role.split(b":")[0].decode(), b"list")
        commands = {b"string": (b"SET", target, b"x"), b"hash": (b"HSET", target, b"f", b"v"),
                    b"list": (b"RPUSH", target, b"x"), b"zset": (b"ZADD", target, b"1", b"x")}
        wrong = [command for kind, command in commands.items() if kind != right]
        self.behind_the_back(*wrong[pick])
        self.foreign.add(target)

    @precondition(lambda self: self.foreign)
    @rule()
    def unplant(self) -> None:
        for target in sorted(self.foreign):
            self.behind_the_back(b"DEL", target)
        self.foreign.clear()

    # bad input --------------------------------------------------------------------------------

    def good_argv(self, transition: Transition, job_id: bytes, base: bytes) -> Argv:
        numbers = {"id": job_id, "payload": b"p", "now": self.now, "lease_ms": 1_000,
                   "fence": 1, "retention_ms": 0, "delay_ms": 0, "max_attempts": 3,
                   "error": b"e", "limit": 10, "count": 1, "at_ms": 0, "result": b"r",
                   "progress": b"g", "mode": b"debounce", "period_ms": 1_000,
                   "step": b"charge", "output": b"o"}
        keys = [key(role.encode(), job_id, base) for role in transition.keys]
        items: Argv = {SETTLE: [b"ack", job_id, 1, b"retry", job_id, 1, 0, 3, b"e"],
                       EXTEND_MANY: [job_id, 1], ENQUEUE_MANY: [job_id, b"p", 0, 0]}.get(
                           transition, [])
        return [len(keys), *keys, *(numbers[name] for name in transition.args), *items]

    @rule(data=st.data(), transition=st.sampled_from(BAD_INPUT),
          base=st.sampled_from([BASE, BASE, OTHER, b""]))
    def bad_input(self, data: st.DataObject, transition: Transition, base: bytes) -> None:
        """A call with one or two things wrong (or, by chance, right): the model decides. A
        valid one on the queue the rules track runs as its rule runs it. An admission's id is
        never a ghost's (as ``draw_id``'s): admitted, it would have a row again."""
        ids = [j for j in POOL if j not in self.ghosts] if transition.admits else POOL
        argv = self.good_argv(transition, data.draw(st.sampled_from(ids), label="id"), base)
        for _ in range(data.draw(st.integers(1, 2), label="mutations")):
            argv = data.draw(mutated(transition, argv), label="argv")
        checked = self.model.validate(transition, argv)
        if not isinstance(checked, bytes):
            argv = lasting(transition, argv, checked.numbers)
        if isinstance(checked, bytes) or checked.base != BASE or transition not in TRACKED:
            self.execute(transition, argv)
            return
        event(f"a valid call among the bad input: {transition.name}")
        self.tracked(transition, argv)

    def tracked(self, transition: Transition, argv: Argv) -> None:
        """A valid call on the tracked queue, run and checked by the method its rule uses, the
        machine's bookkeeping (live ids, leases, fences) kept true."""
        machine: Any = self
        if transition in (ENQUEUE, ENQUEUE_DELAYED):
            if machine.admitted(transition, argv):
                machine.live.add(argv[4])
        elif transition in (ACK, ACK_RESULT):
            machine.acked(transition, argv)
        else:
            run = {ENQUEUE_UNIQUE: machine.unique_admit, ENQUEUE_MANY: machine.admitted_many,
                   CLAIM: machine.claimed, SETTLE: self.settled, CANCEL: machine.cancelled,
                   TRIM_DEAD: self.trimmed_by}[transition]
            run(argv)

    # invariants -------------------------------------------------------------------------------


class Checks:
    """What ``QueueMachine`` checks after its steps: a settle's items, one by one, and the
    invariants of both keyspaces."""

    def settled(self, argv: Argv) -> bytes:
        """A settle (``argv``: numkeys 7, its keys, now, retention_ms, lease_ms, count, then its
        items), checked: each item as its single verb would have fared, then its claims: the
        oldest live pending jobs, none leased already nor a ghost, each a fresh fence."""
        items, numbers = settle_items(argv), argv[1 + int(argv[0]):][:4]
        retention_ms, count = int(numbers[1]), int(numbers[3])
        order = self.zmembers(b"pending")
        expiring = {j for j in order if j in self.live and self.expired_by_now(j)}
        waiting = [j for j in order if j in self.live and j not in expiring][:count]
        walked = order[:order.index(waiting[-1])] if len(waiting) == count > 0 else order
        holders = set(self.zmembers(b"active"))
        current = [self.is_current(job_id, fence) for _, job_id, fence, _ in items]
        attempts = {job_id: int_field(self.model.hget(key(b"job", job_id), b"a"), 0)
                    for _, job_id, _, _ in items if self.model.kind(key(b"job", job_id)) == b"hash"}
        reply, _ = self.execute(SETTLE, argv)
        if reply.startswith(b"-"):
            return bytes(reply)
        verdicts, jobs = parsed(reply)
        self.check_settled(items, current, verdicts)
        self.check_results(items, current, verdicts, retention_ms)
        self.check_released(items, verdicts, attempts, [job[0] for job in jobs])
        assert [job[0] for job in jobs] == waiting, "settle skipped the oldest live jobs"
        if count > 0:
            self.check_expired([j for j in walked if j in expiring])
        for job_id, _payload, _attempt, fence in jobs:
            assert job_id not in holders and job_id not in self.ghosts, job_id
            self.check_fresh_fence(job_id, fence)
        if len(items) > 1 and jobs:
            event("a settle with items and claims")
        return bytes(reply)

    def check_settled(self, items: list[tuple[bytes, bytes, int, Argv]], current: list[bool],
                      verdicts: list[bytes]) -> None:
        """Each item as its single verb would have fared, in order: a lease not current (or
        settled earlier in the same batch) is STALE, or replays a settlement that went through;
        an acked job is no longer live."""
        settled: set[bytes] = set()
        for (op, job_id, fence, _), was_current, verdict in zip(items, current, verdicts,
                                                                strict=True):
            latest = self.fences.get(job_id, [None])[-1]
            if fence != latest:
                assert verdict == b"STALE", (op, job_id, fence, verdict)
                continue
            if not was_current or job_id in settled:
                assert verdict in (b"STALE", *ITEM_REPLAYS.get(op, ())), (op, job_id, verdict)
                if job_id in settled:
                    event("an id settled twice in one batch")
                continue
            assert verdict in {b"ack": (b"ACKED", b"CANCELLED"), b"done": (b"ACKED", b"CANCELLED"),
                               b"release": (b"RELEASED", b"CANCELLED")}.get(
                op, (b"RETRYING", b"DEAD", b"CANCELLED")), verdict
            settled.add(job_id)
            if verdict == b"ACKED":
                self.live.discard(job_id)

    def check_results(self, items: list[tuple[bytes, bytes, int, Argv]], current: list[bool],
                      verdicts: list[bytes], retention_ms: int) -> None:
        """A done item that acked its current lease left its result in the tombstone (a replay
        writes nothing)."""
        first: set[bytes] = set()
        for (op, job_id, _, tail), was_current, verdict in zip(items, current, verdicts,
                                                               strict=True):
            if op == b"done" and verdict == b"ACKED" and was_current and job_id not in first:
                self.check_result(job_id, tail[0], retention_ms)
            first.add(job_id)

    def check_released(self, items: list[tuple[bytes, bytes, int, Argv]], verdicts: list[bytes],
                       attempts: dict[bytes, int], claimed: list[bytes]) -> None:
        """A released job runs again at once: out of active, back in pending or its lane (not
        claimed by the call that released it), its claim's attempt uncounted."""
        for (_, job_id, _, _), verdict in zip(items, verdicts, strict=True):
            if verdict != b"RELEASED":
                continue
            event("a lease released")
            row = key(b"job", job_id)
            assert job_id not in self.zmembers(b"active") and job_id not in claimed, job_id
            lane = self.model.hget(row, b"lane")
            if lane is None:
                assert job_id in self.zmembers(b"pending"), job_id
            elif row_priority(self.model.hget(row, b"priority")):  # a ranked lane job: its zset
                assert job_id in self.zmembers(b"prio:" + lane), job_id
            else:
                assert job_id in self.model.keys[key(b"lane:" + lane)].data, job_id
            uncounted = int_field(self.model.hget(row, b"a"), 0)
            assert uncounted == max(attempts[job_id] - 1, 0), (job_id, uncounted)

    @invariant()
    def keyspaces_agree(self) -> None:
        lua = normalise(self.pair.snapshot("lua"))
        assert normalise(self.pair.snapshot("native")) == lua, "executors' keyspaces differ"
        assert lua == self.model.render(), "keyspace differs from the model"
        self.check_conservation(lua)
        self.check_ended(lua)

    def check_ended(self, state: dict[bytes, tuple[Any, ...]]) -> None:
        """A dead job's waiters are woken: its ended key holds its one token (and keeps it while
        the job stays dead); a job acked keeping its result holds one too, expiring with it."""
        kind, members, _ = state.get(key(b"dead"), (b"zset", [], False))
        for job_id, _score in members if kind == b"zset" else []:
            assert state[key(b"ended:" + job_id)] == (b"list", [b"1"], False), job_id
            event("a dead job's waiters woken")
        for name, (kind, value, expires) in state.items():
            if name.startswith(BASE + b"ended:") and kind == b"list" and expires:
                row = state.get(key(b"job", name[len(BASE) + 6:]))
                assert row is not None and row[2] and value == [b"1"], name

    def check_conservation(self, state: dict[bytes, tuple[Any, ...]]) -> None:
        """Invariant 1: a live id sits in exactly one place; nothing unknown sits anywhere."""
        self.forget_cancelled()
        places: dict[bytes, list[bytes]] = {}
        for role in ZSETS:
            kind, members, _ = state.get(key(role), (b"zset", [], False))
            if kind == b"zset":
                for member, _score in members:
                    places.setdefault(member, []).append(role)
        # a group's jobs: its lane (priority 0) and its prio zset (the others)
        lanes = {k: v for k, (kind, v, _) in state.items()
                 if k.startswith(BASE + b"lane:") and kind == b"list"}
        lanes |= {k: [member for member, _score in v] for k, (kind, v, _) in state.items()
                  if k.startswith(BASE + b"prio:") and kind == b"zset"}
        for lane_key, members in lanes.items():
            for member in members:
                places.setdefault(member, []).append(lane_key)
        for job_id in self.live:
            assert len(places.get(job_id, [])) == 1, (job_id, places.get(job_id))
        assert set(places) <= self.live | self.ghosts, places
        self.check_ring(state, {lane_key[len(BASE) + 5:] for lane_key in lanes})

    def check_ring(self, state: dict[bytes, tuple[Any, ...]], waiting: set[bytes]) -> None:
        """Each group whose lane (either key) holds jobs is in the ring once, and no other, but
        for the entries a group left behind when it left the ring unwalked, counted in
        ``<base>ringleft`` until a lane claim drops them."""
        kind, ring, _ = state.get(key(b"ring"), (b"list", [], False))
        left_kind, left, _ = state.get(key(b"ringleft"), (b"hash", [], False))
        if kind == b"list" and left_kind == b"hash":
            behind = {group: int(count) for group, count in left}
            for group in set(ring) | waiting:
                expected = int(group in waiting) + behind.get(group, 0)
                assert ring.count(group) == expected, (ring, waiting, behind)
        wake_kind, tokens, _ = state.get(key(b"wake"), (b"list", [], False))
        if wake_kind == b"list":
            assert len(tokens) <= 64


def told_apart(transition: Transition, state: Any) -> bool:
    """Whether the row a settlement left (``state``, as ``row_state`` reads it) tells its replay
    (docs/PROTOCOL.md, Replays): an ack's tombstone always; a retry's row only by its payload, so
    a retried row whose payload went behind the queue's back answers a replay STALE; a flagged
    lease's cancelled end always."""
    fields, _dead = state
    return transition.name != RETRY.name or b"p" in fields or b"cancelled" in fields


@st.composite
def mutated(draw: st.DrawFn, transition: Transition, argv: Argv) -> Argv:
    """``argv`` with one thing wrong: numkeys, the shape, the id, a key or a number."""
    out = list(argv)
    nkeys = len(transition.keys)
    how = draw(st.sampled_from(["numkeys", "drop", "extra", "id", "key", "swap", "number"]))
    if how == "numkeys":
        out[0] = draw(st.sampled_from([*BAD_NUMKEYS, nkeys - 1, nkeys + 1, 0]))
    elif how == "drop":
        del out[draw(st.integers(1, len(out) - 1))]
        if draw(st.booleans()):
            out[0] = nkeys - 1
    elif how == "extra":
        out.insert(draw(st.integers(1, len(out))), draw(st.sampled_from([b"", b"x", b"1"])))
    elif how == "id" and "id" in transition.args:
        out[1 + nkeys] = draw(st.sampled_from(BAD_IDS))
    elif how in ("key", "swap"):
        out = _bad_keys(draw, how, out, nkeys)
    else:
        out = _bad_number(draw, transition, out, nkeys)
    return out


def _bad_keys(draw: st.DrawFn, how: str, out: Argv, nkeys: int) -> Argv:
    last = min(nkeys, len(out) - 1)
    i = draw(st.integers(1, last))
    if how == "swap":
        j = draw(st.integers(1, last))
        out[i], out[j] = out[j], out[i]
        return out
    replacement = draw(st.sampled_from([b"", b"pending", b"emq:{r}:", b"job:", b"x"]))
    if draw(st.booleans()):
        old = out[i]
        if isinstance(old, bytes) and old.startswith(BASE):
            replacement = OTHER + old[len(BASE):]
    out[i] = replacement
    return out


def _bad_number(draw: st.DrawFn, transition: Transition, out: Argv, nkeys: int) -> Argv:
    positions = [i for i, name in enumerate(transition.args)
                 if name not in ("id", "payload", "error", "result")]
    i = draw(st.sampled_from(positions))
    if 1 + nkeys + i >= len(out):
        return out
    choices = [b for b in BAD_NUMBERS if transition.args[i] != "now" or b != b"*"]
    out[1 + nkeys + i] = draw(st.sampled_from(choices))
    return out
