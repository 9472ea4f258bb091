"""The script-only transitions (lanes, an operator's tools) take the optional parts of the
protocol as the native ones do (those are in the conformance cases): the events key last, after
a claim record, checked by name and type, and the lane enqueues' optional priority, read after
their fixed arguments."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from echomq.engine.clients import twins
from echomq.engine.errors import ArgumentError, error_reply
from echomq.engine.executors import executor_for
from echomq.engine.transitions import (
    ADMIN,
    ERRORS,
    LANE_CLAIM,
    LANE_ENQUEUE,
    LANE_ENQUEUE_DELAYED,
    SCRIPT_ONLY,
    Transition,
    keys_for,
    queue_base,
)

NOW = "1700000000000"
SCRIPTS = pytest.mark.parametrize(
    "transition", [t for t in SCRIPT_ONLY + ADMIN if t.events], ids=lambda t: t.name)


def good_call(transition: Transition, name: str) -> tuple[list[str], list[Any]]:
    """A call of ``transition`` on queue ``name`` that passes every check."""
    base = queue_base(name)
    keys = keys_for(base, transition, "JOB:1", lane="g")
    args: dict[str, list[Any]] = {
        "lane_enqueue": ["JOB:1", b"p", "g", NOW],
        "lane_enqueue_delayed": ["JOB:1", b"p", "g", NOW, "0", "0"],
        "lane_claim": ["30000", NOW],
        "requeue": ["JOB:1", NOW],
        "purge": ["10"],
    }
    return keys, args[transition.name]


def run(conn: redis.Redis, transition: Transition, keys: list[str], args: list[Any]) -> Any:
    return executor_for(5).call(conn, transition, keys, args)


@SCRIPTS
def test_the_events_key_declared_last_changes_no_reply(conn: redis.Redis,
                                                       transition: Transition) -> None:
    keys, args = good_call(transition, "plain")
    plain = run(conn, transition, keys, args)
    keys, args = good_call(transition, "evented")
    assert run(conn, transition, [*keys, queue_base("evented") + "events"], args) == plain


@SCRIPTS
def test_an_events_key_misnamed_or_of_another_queue_is_emqkeys(conn: redis.Redis,
                                                               transition: Transition) -> None:
    keys, args = good_call(transition, "q")
    for wrong in (queue_base("q") + "event", queue_base("other") + "events", ""):
        with pytest.raises(ArgumentError) as raised:
            run(conn, transition, [*keys, wrong], args)
        assert str(raised.value) == ERRORS["KEYS"].text
    assert conn.keys("*") == []


@SCRIPTS
def test_an_events_key_of_another_type_is_wrongtype(conn: redis.Redis,
                                                    transition: Transition) -> None:
    keys, args = good_call(transition, "q")
    conn.set(queue_base("q") + "events", "x")
    with pytest.raises(twins(redis.ResponseError)) as raised:
        run(conn, transition, [*keys, queue_base("q") + "events"], args)
    assert error_reply(raised.value).line == ERRORS["TYPE"].text
    assert sorted(conn.keys("*")) == [(queue_base("q") + "events").encode()]


def test_a_lane_claim_takes_its_record_then_the_events_key_never_the_reverse(
        conn: redis.Redis) -> None:
    keys, args = good_call(LANE_CLAIM, "q")
    record, events = queue_base("q") + "claim:c1", queue_base("q") + "events"
    assert run(conn, LANE_CLAIM, [*keys, record, events], args) is None
    with pytest.raises(ArgumentError) as raised:
        run(conn, LANE_CLAIM, [*keys, events, record], args)
    assert str(raised.value) == ERRORS["KEYS"].text


@pytest.mark.parametrize("transition", [LANE_ENQUEUE, LANE_ENQUEUE_DELAYED],
                         ids=lambda t: t.name)
def test_a_lane_enqueue_reads_its_optional_priority(conn: redis.Redis,
                                                    transition: Transition) -> None:
    keys, args = good_call(transition, "q")
    for bad in ("101", "+5", "", "1e2"):
        with pytest.raises(ArgumentError) as raised:
            run(conn, transition, keys, [*args, bad])
        assert str(raised.value) == ERRORS["PRIORITY"].text
    with pytest.raises(ArgumentError) as raised:
        run(conn, transition, keys, [*args, "7", "7"])
    fixed = len(transition.args)
    assert str(raised.value) == ERRORS["OPTIONAL_ARITY"].format(
        verb=transition.verb, nkeys=len(transition.keys), nargs=fixed, nmax=fixed + 1)
    assert conn.keys("*") == []
    assert run(conn, transition, keys, [*args, "7"]) == b"ENQUEUED"
