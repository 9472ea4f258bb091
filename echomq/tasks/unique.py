"""A task's dedupe, debounce and throttle options (``@app.task(...)``, ``with_options(...)``):
``Queue.enqueue``'s, checked where they are given, with a key that may also be a function of the
call's arguments (``dedupe=lambda order_id: f"order-{order_id}"``), made when the call is
enqueued."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any

from echomq.engine.unique import unique_options

# A dedupe, debounce or throttle key: a name, or a function of the task's arguments giving one.
UniqueKey = str | Callable[..., str]
KEYS = ("dedupe", "debounce", "throttle")
OPTIONS = tuple(inspect.signature(unique_options).parameters)


def unique_of(taker: Callable[..., Any], **options: Any) -> dict[str, Any]:
    """The options given to ``taker`` beyond its named ones (None left out), checked as
    ``Queue.enqueue`` checks them: TypeError for a name that is none of ``taker``'s options,
    ArgumentError for two modes, a window without its key, a bad key or window (a key made by a
    function is checked when it is made)."""
    for name in options:
        if name not in OPTIONS:
            raise TypeError(unknown_option(taker, name))
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


def unknown_option(taker: Callable[..., Any], name: str) -> str:
    """Why ``name`` is refused: the options ``taker`` takes, and the one it is close to if any."""
    named = [parameter.name for parameter in inspect.signature(taker).parameters.values()
             if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
    valid = sorted({*named, *OPTIONS})
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"{taker.__name__}() takes no option {name!r}{hint} (its options: "
            f"{', '.join(valid)})")
