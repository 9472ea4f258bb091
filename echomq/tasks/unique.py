"""A task's dedupe, debounce and throttle options (``@app.task(...)``, ``with_options(...)``):
``Queue.enqueue``'s, checked where they are given, with a key that may also be a function of the
call's arguments (``dedupe=lambda order_id: f"order-{order_id}"``), made when the call is
enqueued."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from echomq.engine.unique import unique_options

# A dedupe, debounce or throttle key: a name, or a function of the task's arguments giving one.
UniqueKey = str | Callable[..., str]
KEYS = ("dedupe", "debounce", "throttle")


def unique_of(**options: Any) -> dict[str, Any]:
    """The options given (None left out), checked as ``Queue.enqueue`` checks them: ArgumentError
    here for two modes, a window without its key, a bad key or window (a key made by a function
    is checked when it is made)."""
    given = {name: value for name, value in options.items() if value is not None}
    probe: dict[str, Any] = {name: "k" if callable(value) else value
                             for name, value in given.items()}
    unique_options(**probe)
    return given


def resolved(options: dict[str, Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> dict[str, Any]:
    """``options`` for one call: each key that is a function, called with the call's
    arguments."""
    return {name: value(*args, **kwargs) if name in KEYS and callable(value) else value
            for name, value in options.items()}
