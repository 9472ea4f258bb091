"""Cases of the events stream (docs/PROTOCOL.md, "Events"): a call declaring ``<base>events``
after its keys (and after its claim record) appends one entry per change it makes, and nothing
when it changes nothing (a refusal, a duplicate, a stale or replayed settlement, a claim answered
from its record, a null claim, a ghost dropped). Every case of the table is run again with the
events key declared (``evented``): the same reply, and the stream the model predicts. A bad
events key is EMQKEYS (another queue's, empty, before the record) or WRONGTYPE (not a stream),
refused before anything is written (cases/generic.py, events_key_cases, and bad_key_cases here)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from echomq.conformance.cases.common import (
    E_KEYS,
    GOOD,
    NOW,
    OTHER,
    READY,
    Case,
    _argv,
    _case,
    _raw,
    delayed,
    job,
    key,
    leased,
    replied,
    settle,
    waiting,
)
from echomq.conformance.resp import Arg
from echomq.engine.transitions import TRANSITIONS

EVENTS = key("events")
# Cases whose numkeys or arity is the point: declaring one more key would change what they test.
SHAPES = ("numkeys", "keys-only", "last-arg-missing", "extra-arg", "events-key")


def evented(argv: list[Arg], events: Arg = EVENTS) -> list[Arg]:
    """``argv`` with ``events`` declared as its last key (numkeys one more)."""
    n = int(_raw(argv[0]))
    return [n + 1, *argv[1:1 + n], events, *argv[1 + n:]]


def evented_cases(cases: Iterable[Case]) -> Iterator[Case]:
    """Each case of a transition that takes the events key, run again with it declared: the
    reply is the same, and the stream holds what the call changed (nothing for a refusal).
    Left out: the cases whose shape is the point (numkeys, arity, the optional keys), those on
    another queue's keys, and those on the server's clock (``now`` ``*``: the entries' ``at``
    would differ by the time between the two executors' calls)."""
    for case in cases:
        if case.transition.events and _plain_shape(case) and not case.label.startswith(SHAPES):
            yield Case(case.transition, f"evented-{case.label}", evented(case.argv),
                       case.expect, list(case.setup))


def _plain_shape(case: Case) -> bool:
    """The case declares the transition's keys (and a claim record), all of queue q, and an
    explicit clock."""
    t, words = case.transition, [_raw(arg) for arg in case.argv]
    n = int(words[0]) if words and words[0].isdigit() else -1
    record = t.record and n == len(t.keys) + 1 and n < len(words) and b":claim:" in words[n]
    if n != len(t.keys) and not record:
        return False
    return not any(OTHER.encode() in word for word in words[1:1 + n]) and b"*" not in words


def bad_key_cases() -> Iterator[Case]:
    """Beside the generic events-key cases (cases/generic.py): a name near the key's, and a stream
    that holds entries already (appended to)."""
    for t in TRANSITIONS:
        if not t.events:
            continue
        good, ready = GOOD[t.name], READY[t.name]
        for label, events in (("suffix-changed", EVENTS + "x"), ("no-base", "events"),
                              ("a-row", key("job"))):
            yield Case(t, f"events-key-{label}", evented(good, events), E_KEYS, ready)
        yield Case(t, "events-key-a-stream", evented(good), b"",
                   [*ready, ["XADD", EVENTS, "1-1", "kind", "other"]])


def order_cases() -> Iterator[Case]:
    """Calls of many changes: one entry each, in the order they are applied."""
    four = settle("ack", "JOB:1", 1, "done", "JOB:2", 1, b"r", "release", "JOB:3", 1,
                  "retry", "JOB:4", 1, 1_000, 3, b"boom", count=2)
    setup = [*leased("JOB:1"), *leased("JOB:2"), *leased("JOB:3"), *leased("JOB:4"),
             *waiting("JOB:5", NOW - 2), *waiting("JOB:6", NOW - 1)]
    yield _case("settle", "events-four-items-two-claims", evented(four),
                replied([b"ACKED", b"ACKED", b"RELEASED", b"RETRYING"],
                        [job("JOB:5", 1, 1), job("JOB:6", 1, 2)]), setup)
    dead_end = settle("retry", "JOB:1", 3, 0, 3, b"boom", count=0)
    yield _case("settle", "events-retry-to-dead", evented(dead_end), replied([b"DEAD"], []),
                leased("JOB:1", attempt=3))
    yield _case("recover", "events-spent-and-two-flat", evented(GOOD["recover"]), b":3",
                leased("JOB:1", attempt=3, deadline=1) + leased("JOB:2", deadline=2)
                + leased("JOB:3", deadline=3) + leased("JOB:a1", deadline=NOW + 1, lane="a"))
    yield _case("promote", "events-flat-and-lane", evented(GOOD["promote"]), b":2",
                delayed("JOB:1", due=NOW - 2) + delayed("JOB:a1", due=NOW - 1, lane="a"))
    yield _case("claim", "events-ghost-dropped", evented(GOOD["claim"]), job("JOB:2", 1, 1),
                [["ZADD", key("pending"), str(NOW - 9), "JOB:1"], *waiting("JOB:2")])
    yield _case("retry", "events-to-dead", evented(_argv("retry", fence=3)), b"+DEAD",
                leased("JOB:1", attempt=3))


def event_cases(cases: Iterable[Case]) -> list[Case]:
    """The events family: ``cases`` (the rest of the table) evented, the bad events keys, the
    orders of many changes."""
    return [*evented_cases(cases), *bad_key_cases(), *order_cases()]
