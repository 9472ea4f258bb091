"""``Wire``: which executor runs a queue's transitions. ``SCRIPTS`` (5) sends each as the Lua
script of ``echomq/lua/`` (``EVALSHA``); ``NATIVE`` (6) as the trafikey module's ``EMQ.*``
command. Both give byte-identical replies. ``AUTO`` (the default, ``wire="auto"``) sends each
transition as its native command while the server answers them, and as its script where it has
none (lanes) or once the server shows it has no trafikey (``echomq.engine.execution.AutoWire``).
An ``IntEnum``: ``wire=5``, ``wire=6`` and ``wire="auto"`` are accepted wherever ``wire=`` is,
and a member compares equal to its number (``AUTO``'s, 0, is what a JSON record of it holds)."""

from __future__ import annotations

import enum

__all__ = ["Wire", "wire_of"]


class Wire(enum.IntEnum):
    AUTO = 0
    SCRIPTS = 5
    NATIVE = 6

    @property
    def label(self) -> str:
        """How the wire is written where a person reads it: ``5``, ``6`` or ``auto``."""
        return "auto" if self is Wire.AUTO else str(int(self))


def wire_of(value: int | str) -> Wire:
    """The wire ``value`` names: 5 or 6 (int or text), ``scripts`` / ``native``, or ``auto``
    (a ``Wire`` as it is); ValueError for anything else."""
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
    raise ValueError(f"wire must be 5 (scripts), 6 (native) or 'auto', not {value!r}")
