"""The lockstep machine's calls with the events key declared, in half of its examples: every
call of a transition that reports its changes then names ``<base>events`` after its keys (and
its claim record), so both executors and the model append their events to the same stream, which
the keyspace comparison after each step holds to the model's, entry for entry."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize

from tests.stateful_world import key

EVENTS_KEY = key(b"events")


class EventedCalls:
    """Mixed into the lockstep machine: ``with_events`` gives the argv a call is sent with."""

    evented = False

    @initialize(on=st.booleans())
    def events_on_or_off(self, on: bool) -> None:
        self.evented = on

    def with_events(self, transition: Any, argv: list[Any]) -> list[Any]:
        """``argv`` with the events key after its keys when this example is evented and the
        transition reports its changes (an argv whose numkeys is not a number, bad input on
        purpose, is sent as drawn)."""
        if not (self.evented and transition.events) or not argv or type(argv[0]) is not int:
            return argv
        count = argv[0]
        keys = list(argv[1:1 + count])
        if EVENTS_KEY in keys:  # a call sent again (a replay) is declared once
            return argv
        return [count + 1, *keys, EVENTS_KEY, *argv[1 + count:]]
