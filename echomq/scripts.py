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
    """The script run by EVALSHA for ``transition``: shebang + prelude + transition body.

    The shebang makes the server check the script's flags before running it, as it checks a
    native command's: refused on a read-only replica, and (unless ``allow-oom``) when out of
    memory, with the same plain error the native twin gets."""
    shebang = b"#!lua\n" if transition.admits else b"#!lua flags=allow-oom\n"
    source = shebang + _read("_prelude.lua") + b"\n" + _read(transition.script_file)
    return LuaScript(transition.name, source, hashlib.sha1(source).hexdigest())
