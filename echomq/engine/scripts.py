"""The Lua twins: each transition's file with the include files it names, hashed locally.

A Lua file names each include it uses on a line of its own, ``--- @include "keys"`` for
``echomq/lua/include/keys.lua``; an include may name others. The script is the shebang, a line map,
every include the transition's file reaches (each once, an include after those it names), then the
transition's file, all verbatim."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

from echomq.engine.transitions import Transition

INCLUDE = re.compile(rb"^--- @include(.*)$", re.M)
INCLUDE_NAME = re.compile(rb' "([a-z0-9_]+)"')


@dataclass(frozen=True)
class Part:
    """One file of an assembled script: its path under ``echomq/lua/`` and the script's line
    that is the file's first."""

    file: str
    first_line: int


@dataclass(frozen=True)
class LuaScript:
    name: str
    source: bytes
    sha: str
    parts: tuple[Part, ...]

    def origin(self, line: int) -> tuple[str, int]:
        """The file and the file's own line of the script's ``line`` (as an error reports it,
        ``user_script:<line>``); the shebang and the line map are the script's own."""
        for part in reversed(self.parts):
            if line >= part.first_line:
                return part.file, line - part.first_line + 1
        return self.name, line


def includes_named(text: bytes) -> list[str]:
    """The includes a Lua file names, in its order; an include line of another form is refused."""
    names = []
    for rest in INCLUDE.findall(text):
        name = INCLUDE_NAME.fullmatch(rest)
        if name is None:
            raise ValueError(f"not an include line: --- @include{rest.decode()}")
        names.append(name.group(1).decode())
    return names


def include_order(text: bytes, read: Callable[[str], bytes]) -> list[str]:
    """Every include ``text`` reaches, each once, each after the includes it names."""
    order: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise ValueError("include cycle: " + " -> ".join([*visiting, name]))
        visiting.append(name)
        for named in includes_named(read(include_path(name))):
            visit(named)
        visiting.pop()
        order.append(name)

    for name in includes_named(text):
        visit(name)
    return order


def include_path(name: str) -> str:
    return f"include/{name}.lua"


def _lines(text: bytes) -> bytes:
    """``text`` ending with a newline, so the next file starts on a line of its own."""
    return text if text.endswith(b"\n") else text + b"\n"


def assemble(head: bytes, filename: str,
             read: Callable[[str], bytes]) -> tuple[bytes, tuple[Part, ...]]:
    """``head`` (the shebang line), the line map, the includes ``filename`` reaches, then the file.

    The map is one comment line naming the line where each file starts (``-- lines:
    include/numbers.lua 3, include/args.lua 21, ..., ack.lua <n>``): a reader subtracts to find
    the file's own line of an error."""
    body = read(filename)
    files = [include_path(name) for name in include_order(body, read)] + [filename]
    texts = [_lines(read(file)) for file in files[:-1]] + [_lines(body)]
    line, parts = head.count(b"\n") + 2, []
    for file, text in zip(files, texts, strict=True):
        parts.append(Part(file, line))
        line += text.count(b"\n")
    line_map = "-- lines: " + ", ".join(f"{p.file} {p.first_line}" for p in parts) + "\n"
    return head + line_map.encode() + b"".join(texts), tuple(parts)


def _read(filename: str) -> bytes:
    return resources.files("echomq.lua").joinpath(filename).read_bytes()


@cache
def script_for(transition: Transition) -> LuaScript:
    """The script run by EVALSHA for ``transition``: shebang + line map + includes + its file.

    The shebang makes the server check the script's flags before running it, as it checks a
    native command's: refused on a read-only replica, and (unless ``allow-oom``) when out of
    memory, with the same plain error the native twin gets."""
    shebang = b"#!lua\n" if transition.admits else b"#!lua flags=allow-oom\n"
    source, parts = assemble(shebang, transition.script_file, _read)
    return LuaScript(transition.name, source, hashlib.sha1(source).hexdigest(), parts)
