"""The cases every transition has, built from its row of the table: its good call, numkeys and
arity, every kind of bad id, each key of another queue or changed, every bad number, and each
key holding a value of the wrong type."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    BAD_IDS,
    BASE,
    E_ARITY,
    E_ITEM,
    E_KEYS,
    E_KIND,
    E_NEGATIVE,
    E_NOTINT,
    E_NUM,
    E_TOOMANY,
    E_TYPE,
    GOOD,
    GOOD_IDS,
    MAXINT,
    OTHER,
    READY,
    Case,
    Command,
    _raw,
    key,
)
from echomq.conformance.resp import Arg
from echomq.engine.transitions import NAMED_ROLES, TRANSITIONS, Transition

BAD_INTS: list[tuple[str, Arg]] = [
    ("empty", ""), ("negative", "-1"), ("plus", "+1"), ("space", " 1"), ("float", "1.0"),
    ("exponent", "1e3"), ("hex", "0x10"), ("sixteen-digits", "1" * 16), ("star", "*"),
    ("word", "ten"), ("nul", b"1\x00"), ("arabic-digit", "\u0663"),
]
EDGE_INTS: list[tuple[str, Arg]] = [("max", MAXINT), ("leading-zeros", "0042000")]
BAD_NOWS: list[tuple[str, Arg]] = [pair for pair in BAD_INTS if pair[0] != "star"] + [
    ("two-stars", "**"), ("star-digit", "*1")]
BAD_NUMKEYS: list[tuple[str, Arg, bytes]] = [
    ("word", "x", E_NOTINT), ("empty", "", E_NOTINT), ("float", "1.5", E_NOTINT),
    ("huge", "99999999999999999999", E_NOTINT), ("negative", "-1", E_NEGATIVE),
]
MINIMUM = {"seal": 0, "lease_ms": 1, "fence": 1, "max_attempts": 1, "limit": 1, "retention_ms": 0,
           "delay_ms": 0, "count": 0, "at_ms": 0, "period_ms": 0}
WRONG_VALUE: dict[str, list[Command]] = {
    "hash": [["SET", "{k}", "x"], ["RPUSH", "{k}", "x"]],
    "zset": [["SET", "{k}", "x"], ["HSET", "{k}", "f", "v"]],
    "list": [["SET", "{k}", "x"], ["ZADD", "{k}", "1", "m"]],
    "string": [["HSET", "{k}", "f", "v"], ["RPUSH", "{k}", "1"], ["ZADD", "{k}", "1", "1"]],
}
KEY_TYPES = {"job": "hash", "pending": "zset", "active": "zset", "delayed": "zset",
             "dead": "zset", "ring": "list", "wake": "list", "fence": "string",
             "deadconf": "hash", "waiting": "zset", "dedupe": "string"}


def _with(argv: list[Arg], index: int, value: Arg) -> list[Arg]:
    changed = list(argv)
    changed[index] = value
    return changed


def shape_cases(t: Transition) -> Iterator[Case]:
    good, nkeys = GOOD[t.name], len(t.keys)
    for label, numkeys, expect in BAD_NUMKEYS:
        yield Case(t, f"numkeys-{label}", _with(good, 0, numkeys), expect)
    yield Case(t, "numkeys-beyond-args", _with(good, 0, len(good)), E_TOOMANY)
    yield Case(t, "numkeys-one-less", _with(good, 0, nkeys - 1), E_ARITY)
    for more, label in ((1, "one"), (2, "two")):
        yield Case(t, f"numkeys-{label}-more", _with(good, 0, nkeys + more), _more_keys(t, more))
    yield Case(t, "numkeys-zero", _with(good, 0, 0), E_ARITY)
    fixed = 1 + nkeys + len(t.args)
    yield Case(t, "last-arg-missing", good[: fixed - 1] if t.items else good[:-1], E_ARITY)
    # one word more is an item of a list, or the optional priority (a bad one), or too many
    # A list of bare ids (after's parents) has no item shape to break: a bad word is a bad id.
    item = E_KIND if t.items and t.item_forms[0].args == ("parent",) else E_ITEM
    extra = item if t.items else E_NUM if t.optional else E_ARITY
    yield Case(t, "extra-arg", [*good, "extra"], extra)
    yield Case(t, "extra-args-two", [*good, *["0"] * (len(t.optional) + 1)],
               item if t.items else E_ARITY)
    yield Case(t, "numkeys-only", [0], E_ARITY)
    yield Case(t, "keys-only", good[: nkeys + 1], E_ARITY)


def _more_keys(t: Transition, more: int) -> bytes:
    """numkeys raised by ``more``: the first arguments are taken for keys. A transition that may
    declare that many optional keys then finds them bad (EMQKEYS) when enough arguments are left
    (a list's); otherwise the shape is wrong."""
    if t.items and more <= t.optional_keys:  # after: the id's place now holds the now, no id
        return E_KIND if t.args[0] == "id" else E_KEYS
    return E_ARITY


def _declared(t: Transition, *extra: Arg) -> list[Arg]:
    """The good call of ``t`` with ``extra`` keys declared after its own."""
    good, nkeys = GOOD[t.name], len(t.keys)
    return [nkeys + len(extra), *good[1:1 + nkeys], *extra, *good[1 + nkeys:]]


def events_key_cases(t: Transition) -> Iterator[Case]:
    """The events key declared (last, after a record), named wrong, of another queue, doubled,
    before the record, or of the wrong type."""
    if not t.events:
        return
    events, record = key("events"), key("claim:c1")
    yield Case(t, "events-key", _declared(t, events), _expect_ok(t), READY[t.name])
    yield Case(t, "events-key-other-queue", _declared(t, key("events", base=OTHER)), E_KEYS)
    yield Case(t, "events-key-misnamed", _declared(t, key("event")), E_KEYS)
    yield Case(t, "events-key-empty", _declared(t, ""), E_KEYS)
    yield Case(t, "events-key-twice", _declared(t, events, events),
               E_KEYS if t.record else E_ARITY)
    for j, command in enumerate([["SET", events, "x"], ["HSET", events, "f", "v"],
                                 ["RPUSH", events, "x"], ["ZADD", events, "1", "m"]]):
        yield Case(t, f"events-key-wrongtype{j}", _declared(t, events), E_TYPE,
                   [*READY[t.name], command])
    if t.record:
        yield Case(t, "record-and-events-key", _declared(t, record, events), _expect_ok(t),
                   READY[t.name])
        yield Case(t, "events-key-before-record", _declared(t, events, record), E_KEYS)
        yield Case(t, "record-and-events-key-wrongtype", _declared(t, record, events), E_TYPE,
                   [*READY[t.name], ["SET", events, "x"]])


def optional_arg_cases(t: Transition) -> Iterator[Case]:
    """The optional priority: given, at 0, bad, read after the fixed numbers, with the events
    key (the deadline after it, of enqueue and delayed enqueue: cases/expiry.py)."""
    good = GOOD[t.name]
    for name in t.optional[:1]:
        for label, word in (("zero", "0"), ("ten", "10"), ("lowest", "-100")):
            yield Case(t, f"{name}-{label}", [*good, word], _expect_ok(t), READY[t.name])
        for label, word in (("above", "101"), ("plus", "+5"), ("word", "ten"), ("empty", "")):
            yield Case(t, f"{name}-{label}", [*good, word], E_NUM)
        at = 1 + len(t.keys) + t.args.index("now")
        yield Case(t, f"{name}-after-now", _with([*good, "ten"], at, "x"), E_NUM + b"now")
        if t.events:
            yield Case(t, f"{name}-and-events-key", [*_declared(t, key("events")), "7"],
                       _expect_ok(t), READY[t.name])


def id_cases(t: Transition) -> Iterator[Case]:
    if "id" not in t.args:
        return
    good, at = GOOD[t.name], 1 + len(t.keys) + t.args.index("id")
    job_at = 1 + t.keys.index("job")
    for label, bad in BAD_IDS:
        yield Case(t, f"id-{label}", _with(good, at, bad), E_KIND)
    for label, fine in GOOD_IDS:
        argv = _with(_with(good, at, fine), job_at, BASE.encode() + b"job:" + _raw(fine))
        expect = {"enqueue_after": b"+WAITING", "after": b"+NOTWAITING", "cancel": b"+UNKNOWN"}.get(
            t.name, b"+ENQUEUED" if t.admits else b"+STALE")
        yield Case(t, f"id-{label}", argv, expect)
    yield Case(t, "id-not-the-rows", _with(good, at, "JOB:2"), E_KEYS)


def key_cases(t: Transition) -> Iterator[Case]:
    good = GOOD[t.name]
    for i, role in enumerate(t.keys, start=1):
        other = key(role, base=OTHER)
        if len(t.keys) > 1:  # a lone key of another queue is that queue's whole call
            yield Case(t, f"key{i}-other-queue", _with(good, i, other), E_KEYS)
        yield Case(t, f"key{i}-empty", _with(good, i, ""), E_KEYS)
        # a named key (the dedupe key) takes any name of the lane gate: a byte outside it
        changed = _raw(good[i]) + (b"/" if role in NAMED_ROLES else b"x")
        yield Case(t, f"key{i}-suffix-changed", _with(good, i, changed), E_KEYS)
    yield Case(t, "keys-swapped", [good[0], good[2], good[1], *good[3:]], E_KEYS)
    whole_other = [good[0], *(key(r, base=OTHER) for r in t.keys), *good[1 + len(t.keys):]]
    yield Case(t, "all-keys-other-queue", whole_other, _expect_ok(t), READY_OTHER[t.name])


READY_OTHER: dict[str, list[Command]] = {
    name: [[_raw(p).replace(BASE.encode(), OTHER.encode()) for p in cmd] for cmd in cmds]
    for name, cmds in READY.items()}


def _expect_ok(t: Transition) -> bytes:
    return {"enqueue": b"+ENQUEUED", "enqueue_delayed": b"+ENQUEUED", "ack_result": b"+ACKED",
            "claim": b"*4", "ack": b"+ACKED", "retry": b"+RETRYING",
            "extend": b"+EXTENDED", "recover": b":1", "promote": b":1",
            "settle": b"*2\r\n*2\r\n+ACKED\r\n+RETRYING\r\n*1\r\n*4\r\n$5\r\nJOB:3\r\n",
            "extend_many": b"*2\r\n+EXTENDED\r\n+EXTENDED\r\n", "progress": b"+RECORDED",
            "step": b"+RECORDED",
            "cancel": b"+CANCELLED",
            "trim_dead": b":1\r\n", "enqueue_after": b"+WAITING", "after": b"+READY",
            "enqueue_unique": b"+ENQUEUED",
            "enqueue_many": b"*2\r\n+ENQUEUED\r\n+ENQUEUED\r\n"}[t.name]


def number_cases(t: Transition) -> Iterator[Case]:
    good = GOOD[t.name]
    for index, name in enumerate(t.args, start=1 + len(t.keys)):
        if name == "now":
            for label, bad in BAD_NOWS:
                yield Case(t, f"now-{label}", _with(good, index, bad), E_NUM)
            nothing_due = t.name in ("recover", "promote")
            yield Case(t, "now-zero", _with(good, index, "0"),
                       b":0" if nothing_due else _expect_ok(t), READY[t.name])
        elif name in MINIMUM:
            for label, bad in BAD_INTS:
                yield Case(t, f"{name}-{label}", _with(good, index, bad), E_NUM)
            if MINIMUM[name] == 1:
                yield Case(t, f"{name}-zero", _with(good, index, "0"), E_NUM)
            for label, edge in EDGE_INTS:
                yield Case(t, f"{name}-{label}", _with(good, index, edge), b"", READY[t.name])


def type_cases(t: Transition) -> Iterator[Case]:
    good = GOOD[t.name]
    for i, role in enumerate(t.keys, start=1):
        for j, command in enumerate(WRONG_VALUE[KEY_TYPES[role]]):
            setup = [[_raw(good[i]) if part == "{k}" else part for part in command]]
            yield Case(t, f"key{i}-{role}-wrongtype{j}", list(good), E_TYPE,
                       [*READY[t.name], ["DEL", good[i]], *setup])


def generic_cases() -> Iterator[Case]:
    for t in TRANSITIONS:
        yield Case(t, "good", list(GOOD[t.name]), _expect_ok(t), READY[t.name])
        yield from shape_cases(t)
        yield from events_key_cases(t)
        yield from optional_arg_cases(t)
        yield from id_cases(t)
        yield from key_cases(t)
        yield from number_cases(t)
        yield from type_cases(t)
