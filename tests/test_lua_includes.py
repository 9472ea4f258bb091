"""Scripts carry what they use: each Lua file names the include files it uses, the loader inlines
every include a script reaches once, after those it names, and every assembled script loads on a
real server, reads no global the server does not have and writes none, and is as large as
docs/PROTOCOL.md says. A Lua error's line maps back to its file."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from echomq.conformance.resp import RawConnection
from echomq.embedded import EmbeddedValkey
from echomq.engine import script_sizes
from echomq.engine.scripts import LuaScript, assemble, include_order, includes_named, script_for
from echomq.engine.transitions import ALL_TRANSITIONS, Transition
from tests.lua_bytecode import ABSENT_SCRIPT, DUMP_SCRIPT, global_uses
from tests.lua_source import declared_names, names_used, top_level_locals
from tests.package_data import shipped

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "echomq" / "lua"
INCLUDES = {path.stem: path.read_text() for path in sorted((LUA / "include").glob("*.lua"))}
TRANSITION_FILES = {path.name: path.read_text() for path in sorted(LUA.glob("*.lua"))}
EXPORTS = {name: top_level_locals(text) for name, text in INCLUDES.items()}
OWNER = {export: name for name, exports in EXPORTS.items() for export in exports}
LUA_FILES = {**{f"include/{name}.lua": text for name, text in INCLUDES.items()},
             **TRANSITION_FILES}
by_name = pytest.mark.parametrize("transition", ALL_TRANSITIONS, ids=lambda t: t.name)
by_file = pytest.mark.parametrize("file", sorted(LUA_FILES))


def reply_error(reply: bytes) -> str:
    assert reply.startswith(b"-"), reply
    return reply[1:].decode().strip()


def bulk(reply: bytes) -> bytes:
    """The payload of a RESP bulk string reply."""
    assert reply.startswith(b"$"), reply[:80]
    head, _, rest = reply.partition(b"\r\n")
    return rest[:int(head[1:])]


def array_of_bulks(reply: bytes) -> list[str]:
    return [item.decode() for item in re.findall(rb"\$\d+\r\n([^\r]*)\r\n", reply)]


@pytest.fixture(scope="module")
def server(valkey: EmbeddedValkey) -> Iterator[RawConnection]:
    conn = RawConnection(valkey.port)
    yield conn
    conn.close()


# ---- the loader, on files made up for the test ---------------------------------------------


def test_an_include_reached_twice_is_inlined_once_after_the_includes_it_names() -> None:
    files = {"include/d.lua": b"local d = 1\n",
             "include/b.lua": b'--- @include "d"\nlocal b = d\n',
             "include/c.lua": b'--- @include "d"\nlocal c = d\n',
             "body.lua": b'--- @include "b"\n--- @include "c"\nreturn b + c\n'}
    source, parts = assemble(b"#!lua\n", "body.lua", files.__getitem__)
    assert [part.file for part in parts] == ["include/d.lua", "include/b.lua", "include/c.lua",
                                             "body.lua"]
    assert source.count(b"local d = 1") == 1
    assert source.startswith(b"#!lua\n-- lines: include/d.lua 3, include/b.lua 4, include/c.lua 6, "
                             b"body.lua 8\nlocal d = 1\n")


def test_an_include_cycle_is_refused_with_its_path() -> None:
    files = {"include/a.lua": b'--- @include "b"\n', "include/b.lua": b'--- @include "a"\n',
             "body.lua": b'--- @include "a"\n'}
    with pytest.raises(ValueError, match="include cycle: a -> b -> a"):
        assemble(b"#!lua\n", "body.lua", files.__getitem__)


@st.composite
def include_graphs(draw: st.DrawFn) -> dict[str, list[str]]:
    """Includes i0..in, each naming some of those before it (so no cycle), in any order."""
    count = draw(st.integers(1, 8))
    graph: dict[str, list[str]] = {}
    for n in range(count):
        earlier = [f"i{k}" for k in range(n)]
        named = draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []
        graph[f"i{n}"] = named
    return graph


@given(include_graphs(), st.data())
def test_every_reached_include_comes_once_and_after_what_it_names(
        graph: dict[str, list[str]], data: st.DataObject) -> None:
    top = data.draw(st.lists(st.sampled_from(sorted(graph)), unique=True))
    files = {f"include/{name}.lua": "".join(f'--- @include "{n}"\n' for n in named).encode()
             for name, named in graph.items()}
    order = include_order("".join(f'--- @include "{n}"\n' for n in top).encode(),
                          files.__getitem__)
    reached, todo = set(), list(top)
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    assert sorted(order) == sorted(reached)
    assert len(order) == len(set(order))
    for position, name in enumerate(order):
        assert set(graph[name]) <= set(order[:position])


def test_a_lua_error_line_maps_back_to_its_file(server: RawConnection) -> None:
    """The server reports the assembled script's line; ``origin`` (or the map line) gives the
    file and its own line, in an include and in the transition's file alike."""
    files = {"include/fail.lua": b"-- an include\nlocal function fail(why)\n  error(why)\nend\n",
             "body.lua": b'--- @include "fail"\nlocal x = 1\n'
                         b'if ARGV[1] == "here" then error("body") end\n'
                         b"fail('include')\n"}
    source, parts = assemble(b"#!lua\n", "body.lua", files.__getitem__)
    script = LuaScript("test", source, "", parts)
    for argv, file, line in (("here", "body.lua", 3), ("there", "include/fail.lua", 3)):
        error = reply_error(server.call("EVAL", source, 0, argv))
        reported = int(re.search(r"user_script:(\d+):", error).group(1))  # type: ignore[union-attr]
        assert script.origin(reported) == (file, line), error


# ---- every script as shipped ---------------------------------------------------------------


@by_file
def test_each_file_names_exactly_the_includes_it_uses(file: str) -> None:
    """No include named and unused, none used without being named (reached through another
    include does not count): a file's include lines say what it uses."""
    text = LUA_FILES[file]
    own = Path(file).stem if file.startswith("include/") else None
    used = {OWNER[name] for name in names_used(text) if name in OWNER and OWNER[name] != own}
    assert sorted(includes_named(text.encode())) == sorted(used)


@by_file
def test_no_file_declares_a_name_an_include_gives(file: str) -> None:
    """So a name's use is the include's (no shadowing), and two includes never give one name."""
    text = LUA_FILES[file]
    own = EXPORTS.get(Path(file).stem, []) if file.startswith("include/") else []
    declared = declared_names(text)
    for name in own:
        declared.remove(name)
    assert sorted(set(declared) & set(OWNER)) == []
    assert len(OWNER) == sum(len(exports) for exports in EXPORTS.values())


def test_every_include_is_used_by_some_script() -> None:
    reached = {part.file for t in ALL_TRANSITIONS for part in script_for(t).parts}
    assert sorted({f"include/{name}.lua" for name in INCLUDES} - reached) == []


@by_name
def test_each_script_loads_on_the_server_under_its_sha(transition: Transition,
                                                       server: RawConnection) -> None:
    script = script_for(transition)
    assert bulk(server.call("SCRIPT", "LOAD", script.source)).decode() == script.sha


@by_name
def test_each_script_touches_only_the_servers_globals(transition: Transition,
                                                      server: RawConnection) -> None:
    """Compiled by the server itself (shebang blanked, lines kept): no global written, and every
    global read is one the server's script environment has; a local an include forgot to give
    would read as a global here."""
    script = script_for(transition)
    chunk = b"\n" + script.source.split(b"\n", 1)[1]
    uses = global_uses(bulk(server.call("EVAL", DUMP_SCRIPT, 0, chunk, transition.name)))
    writes = [(u.name, script.origin(u.line)) for u in uses if u.writes]
    assert writes == []
    names = sorted({u.name for u in uses})
    assert "redis" in names and "KEYS" in names
    absent = array_of_bulks(server.call("EVAL", ABSENT_SCRIPT, 0, *names))
    assert [(u.name, script.origin(u.line)) for u in uses if u.name in absent] == []


@by_name
def test_each_scripts_line_map_is_its_parts(transition: Transition) -> None:
    script = script_for(transition)
    line_map = script.source.split(b"\n")[1].decode()
    assert line_map == "-- lines: " + ", ".join(f"{p.file} {p.first_line}" for p in script.parts)
    lines = script.source.split(b"\n")
    for part in script.parts:
        first = LUA_FILES[part.file].split("\n")[0]
        assert lines[part.first_line - 1].decode() == first


def test_protocol_doc_states_each_scripts_loaded_size() -> None:
    """A stale table fails here: run `python -m echomq.engine.script_sizes`."""
    doc = script_sizes.PROTOCOL.read_text()
    assert script_sizes.rewritten(doc) == doc, script_sizes.render()
    for transition in ALL_TRANSITIONS:
        size = f"{len(script_for(transition).source):,}"
        assert re.search(rf"^\| `{transition.script_file}` \|[^\n]*\| {size} \|", doc, re.M)


@pytest.mark.parametrize("line", ['--- @include keys', '--- @include "Keys"',
                                  '--- @include "keys" x', '--- @include  "keys"'])
def test_an_include_line_of_another_form_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="not an include line"):
        includes_named(f"{line}\nreturn 1\n".encode())


def test_the_package_ships_every_lua_file() -> None:
    """Each file under echomq/lua/ is package data of a listed package (tests/package_data.py):
    the wheel carries it, and setuptools warns of none."""
    scripts = sorted(LUA.rglob("*.lua"))
    assert any(path.parent.name == "include" for path in scripts)
    assert [path for path in scripts if not shipped(path)] == []
