"""The protocol table (echomq/engine/transitions.py) is the single source: the generated C header
is what
the table gives, every Lua script checks its shape, keys and types as the table states them, and
docs/PROTOCOL.md documents every transition's call as the table lays it out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from echomq.engine import protocol_gen
from echomq.engine.transitions import (
    ALL_TRANSITIONS,
    ARGUMENTS,
    DERIVED_ROLES,
    EXTEND_MANY,
    SETTLE,
    TRANSITIONS,
    Transition,
    item_layouts,
)

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "echomq" / "lua"
PROTOCOL = (ROOT / "docs" / "PROTOCOL.md").read_text()
by_name = pytest.mark.parametrize("transition", ALL_TRANSITIONS, ids=lambda t: t.name)


def test_the_checked_in_header_is_what_the_table_gives() -> None:
    """A stale native/protocol.h fails here: run `python -m echomq.engine.protocol_gen`."""
    assert protocol_gen.HEADER.read_text() == protocol_gen.render()


def test_the_header_names_every_native_command_with_its_flags() -> None:
    header = protocol_gen.render()
    for transition in TRANSITIONS:
        assert transition.native is not None
        name, verb, flags = transition.native.lower(), transition.verb, transition.flags
        entry = f'{{"{name}",\n     "{verb}",\n     "{flags}"'
        assert entry in header


# ---- The Lua side: parsed, not templated ----------------------------------------------------


def script(transition: Transition) -> str:
    return (LUA / transition.script_file).read_text()


def lua_list(text: str) -> list[str]:
    """The elements of a Lua table constructor ``{ 'a', 'b' .. x }``, as written."""
    return [part.strip() for part in text.split(",")]


def argv_locals(source: str) -> dict[str, int]:
    """Locals bound straight to fixed arguments (``local id, group = ARGV[1], ARGV[3]``): name ->
    0-based argument index."""
    bound: dict[str, int] = {}
    for names, values in re.findall(r"^local ([\w, ]+) = ((?:ARGV\[\d+\](?:, )?)+)$", source, re.M):
        indexes = re.findall(r"ARGV\[(\d+)\]", values)
        for name, index in zip(names.split(", "), indexes, strict=True):
            bound[name] = int(index) - 1
    return bound


@by_name
def test_script_arity_check_is_the_tables(transition: Transition) -> None:
    keys = r"\(#KEYS ~= (\d+) and #KEYS ~= (\d+)\)" if transition.record else r"#KEYS ~= (\d+)()"
    check = keys + r" or #ARGV (~=|<) (\d+) then return (\w+)\('(\w+)', (\d+), (\d+)\)"
    found = re.findall(check, script(transition))
    op, error = ("<", "variadic_arity_error") if transition.variadic else ("~=", "arity_error")
    nkeys, nargs = str(len(transition.keys)), str(len(transition.args))
    with_record = str(len(transition.keys) + 1) if transition.record else ""
    assert found == [(nkeys, with_record, op, nargs, error, transition.verb, nkeys, nargs)]


@by_name
def test_script_checks_its_claim_record_as_the_table(transition: Transition) -> None:
    """A transition taking a record names it after its keys, checks its name with the keys and
    its type after theirs; the others never read one."""
    source = script(transition)
    checks = [f"local record_key = KEYS[{len(transition.keys) + 1}]",
              "(record_key and not record_key_ok(base, record_key))",
              "if record_key and not record_type_ok(record_key) then return redis.error_reply("
              "E_TYPE)"]
    for check in checks:
        assert (check in source) is transition.record, check
    if transition.record:
        assert source.index(checks[2]) > source.index("types_ok(")


@by_name
def test_script_keys_base_suffixes_are_the_tables(transition: Transition) -> None:
    source = script(transition)
    found = re.findall(r"keys_base\(\{ (.*?) \}\)", source)
    assert len(found) == 1
    bound = argv_locals(source)
    expected = []
    for role in transition.keys:
        if role in DERIVED_ROLES:
            prefix, arg = DERIVED_ROLES[role]
            local = next(name for name, index in bound.items() if transition.args[index] == arg)
            expected.append(f"'{prefix}' .. {local}")
        else:
            expected.append(f"'{role}'")
    assert lua_list(found[0]) == expected


@by_name
def test_script_types_ok_list_is_the_tables(transition: Transition) -> None:
    found = re.findall(r"types_ok\(\{ (.*?) \}\)", script(transition))
    assert len(found) == 1
    assert lua_list(found[0]) == [f"'{t}'" for t in transition.key_types]


@by_name
def test_script_reads_each_fixed_number_as_the_table_states(transition: Transition) -> None:
    source = script(transition)
    ints = {int(n) - 1: int(m) for n, m in re.findall(r"int_arg\(ARGV\[(\d+)\], (\d+)\)", source)}
    nows = {int(n) - 1 for n in re.findall(r"now_arg\(ARGV\[(\d+)\]\)", source)}
    kinds = [ARGUMENTS[name] for name in transition.args]
    assert ints == {i: a.min for i, a in enumerate(kinds) if a.kind == "int"}
    assert nows == {i for i, a in enumerate(kinds) if a.kind == "now"}


@by_name
def test_script_number_errors_name_the_tables_minimums(transition: Transition) -> None:
    for name, minimum in re.findall(r"number_error\('(\w+)', (\d+)\)", script(transition)):
        assert ARGUMENTS[name].kind == "int" and ARGUMENTS[name].min == int(minimum), name


def test_scripts_name_each_lists_shape_as_the_table() -> None:
    """The EMQITEM shapes: settle's SETTLE_ITEM, extend_many's pair."""
    found = re.findall(r"^local SETTLE_ITEM =\s*'([^']*)'", script(SETTLE), re.M)
    assert found == [SETTLE.item_shape]
    assert f"item_error(n, '{EXTEND_MANY.item_shape}')" in script(EXTEND_MANY)


# ---- docs/PROTOCOL.md -----------------------------------------------------------------------


def section(transition: Transition) -> str:
    """The doc's section of ``transition``: from its heading (which names its command and script)
    to the next heading."""
    where = f"`{transition.native}`" if transition.native else "scripts only"
    script_file = re.escape(transition.script_file)
    pattern = rf"^### [^\n]*{re.escape(where)}[^\n]*`{script_file}`\n(.*?)(?=^#)"
    found = re.findall(pattern, PROTOCOL, re.M | re.S)
    assert len(found) == 1, f"no single section for {transition.name}"
    return str(found[0])


@by_name
def test_protocol_doc_lays_out_each_call_as_the_table(transition: Transition) -> None:
    lines = section(transition).splitlines()
    assert lines[0] == "    " + transition.layout()
    forms = item_layouts(transition)
    if len(forms) > 1:
        assert lines[1] == "    item: " + forms[0]
        assert lines[2:1 + len(forms)] == ["        | " + form for form in forms[1:]]


def test_protocol_doc_flags_table_is_the_tables() -> None:
    rows = re.findall(r"^\| ([a-z_, ]+) \| `([a-z -]+)` \|", PROTOCOL, re.M)
    documented = {name: flags for names, flags in rows for name in names.split(", ")}
    assert documented == {t.name: t.flags for t in TRANSITIONS}
