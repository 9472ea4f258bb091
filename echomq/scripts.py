"""The Lua twins: each transition's file with the shared prelude, hashed locally."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from echomq.transitions import Transition


@dataclass(frozen=True)
class LuaScript:
    name: str
    source: bytes
    sha: str


def _read(filename: str) -> bytes:
    return resources.files("echomq.lua").joinpath(filename).read_bytes()


@cache
def script_for(transition: Transition) -> LuaScript:
    """The script run by EVALSHA for ``transition``: prelude + transition body."""
    source = _read("_prelude.lua") + b"\n" + _read(transition.script_file)
    return LuaScript(transition.name, source, hashlib.sha1(source).hexdigest())
