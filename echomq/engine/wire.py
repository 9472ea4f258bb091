"""``Wire``: which executor runs a queue's transitions. ``SCRIPTS`` (5) sends each as the Lua
script of ``echomq/lua/`` (``EVALSHA``); ``NATIVE`` (6) as the trafikey module's ``EMQ.*``
command. Both give byte-identical replies. An ``IntEnum``: ``wire=5`` and ``wire=6`` are accepted
wherever ``wire=`` is, and a member compares equal to its number."""

from __future__ import annotations

import enum

__all__ = ["Wire", "wire_of"]


class Wire(enum.IntEnum):
    SCRIPTS = 5
    NATIVE = 6


def wire_of(value: int | str) -> Wire:
    """The wire ``value`` names: 5 or 6 (int or text), or ``scripts`` / ``native``;
    ValueError for anything else."""
    if isinstance(value, str) and not value.strip().isdigit():
        try:
            return Wire[value.strip().upper()]
        except KeyError:
            pass
    else:
        try:
            return Wire(int(value))
        except ValueError:
            pass
    raise ValueError(f"wire must be 5 (scripts) or 6 (native), not {value!r}")
