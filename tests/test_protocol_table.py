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
    CLAIM,
    DERIVED_ROLES,
    ENQUEUE,
    EVENT_KINDS,
    EVENTS_MAXLEN,
    EVENTS_ROLE,
    EXTEND_MANY,
    NAMED_ROLES,
    PRIORITY_BAND,
    PRIORITY_MAX,
    PRIORITY_MIN,
    ROLE_TYPES,
    SETTLE,
    TIME_CAP,
    TRANSITIONS,
    Transition,
    item_layouts,
    key_of,
    keys_for,
    queue_base,
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


def arity_check(transition: Transition) -> str:
    """The first line of a script as the table gives it: the number of keys (up to its optional
    ones), the number of arguments (at least the fixed ones for a list, up to the optional ones),
    and the EMQARITY reply of its kind."""
    nkeys, nargs = len(transition.keys), len(transition.args)
    nmax = nargs + len(transition.optional)
    extra = transition.optional_keys
    keys = f"#KEYS < {nkeys} or #KEYS > {nkeys + extra}" if extra else f"#KEYS ~= {nkeys}"
    verb = transition.verb
    if transition.variadic:
        return f"if {keys} or #ARGV < {nargs} then return variadic_arity_error('{verb}', " \
               f"{nkeys}, {nargs}) end"
    if transition.optional:
        return f"if {keys} or #ARGV < {nargs} or #ARGV > {nmax} then\n" \
               f"  return optional_arity_error('{verb}', {nkeys}, {nargs}, {nmax})\nend"
    return f"if {keys} or #ARGV ~= {nargs} then return arity_error('{verb}', {nkeys}, {nargs}) end"


@by_name
def test_script_arity_check_is_the_tables(transition: Transition) -> None:
    source = script(transition)
    assert source.count("#KEYS") == source.count(arity_check(transition)) * \
        arity_check(transition).count("#KEYS")
    assert arity_check(transition) in source


@by_name
def test_script_checks_its_optional_keys_as_the_table(transition: Transition) -> None:
    """A transition taking a record or the events key checks their names with the keys
    (optional_keys), the record's type after the keys' and the events key's last; the others
    never read one."""
    source = script(transition)
    nkeys = len(transition.keys)
    split = (f"local record_key, events_key = optional_keys(base, {nkeys}, true)"
             if transition.record else "events_key = optional_keys(")
    checks = {
        split: bool(transition.events),
        "if record_key == false then return redis.error_reply(E_KEYS) end": transition.record,
        "if record_key and not record_type_ok(record_key) then return redis.error_reply("
        "E_TYPE) end": transition.record,
        "if events_key and not events_type_ok(events_key) then return redis.error_reply("
        "E_TYPE) end": bool(transition.events),
    }
    for check, expected in checks.items():
        assert (check in source) is expected, check
    if transition.events and not transition.record:
        assert re.search(rf"local _, events_key = optional_keys\(.*, {nkeys}, false\)\n"
                         r"if events_key == false then return redis.error_reply\(E_KEYS\) end",
                         source)
    if transition.events:
        assert source.index("events_type_ok(") > source.index("types_ok(")
    if transition.record:
        assert source.index("events_type_ok(") > source.index("record_type_ok(")
    assert "KEYS[" + str(nkeys + 1) + "]" not in source.split("]]", 1)[1]


@by_name
def test_script_keys_base_suffixes_are_the_tables(transition: Transition) -> None:
    source = script(transition)
    found = re.findall(r"keys_base\(\{ (.*?) \}\)", source)
    assert len(found) == 1
    bound = argv_locals(source)
    expected = []
    for i, role in enumerate(transition.keys, start=1):
        if role in NAMED_ROLES:  # a name of the caller's: checked on its own, after keys_base
            assert f"named_key_ok(base, KEYS[{i}], '{NAMED_ROLES[role]}')" in source
            continue
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
    priorities = {int(n) - 1 for n in re.findall(r"optional_priority\((\d+)\)", source)}
    kinds = [ARGUMENTS[name] for name in transition.args + transition.optional]
    assert ints == {i: a.min for i, a in enumerate(kinds) if a.kind == "int"}
    assert nows == {i for i, a in enumerate(kinds) if a.kind == "now"}
    assert priorities == {i for i, a in enumerate(kinds) if a.kind == "priority"}
    if priorities:  # read after the fixed numbers, refused in the table's words
        fixed = [f"{word}(ARGV[{n}]" for n in range(1, len(transition.args) + 1)
                 for word in ("int_arg", "now_arg")]
        assert source.index("optional_priority(") > max(
            source.rindex(word) for word in fixed if word in source)
        assert "if priority == nil then return redis.error_reply(E_PRIORITY) end" in source


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


# ---- The optional keys and arguments --------------------------------------------------------


def test_every_event_kind_a_row_names_is_a_kind_of_the_table() -> None:
    named = {kind for t in ALL_TRANSITIONS for kind in t.events}
    assert named <= set(EVENT_KINDS)
    assert ROLE_TYPES[EVENTS_ROLE] == "stream" and EVENTS_MAXLEN == 10_000


def test_only_the_enqueues_take_the_optional_priority() -> None:
    takes = {t.name for t in ALL_TRANSITIONS if t.optional}
    assert takes == {"enqueue", "enqueue_delayed", "lane_enqueue", "lane_enqueue_delayed",
                     "enqueue_after", "enqueue_unique"}
    assert all(t.optional[0] == "priority" and not t.variadic
               for t in ALL_TRANSITIONS if t.optional)
    # a deadline after it, on the native single admissions
    deadline = {t.name for t in ALL_TRANSITIONS if "expires_at" in t.optional}
    assert deadline == {"enqueue", "enqueue_delayed"}


def test_the_events_key_comes_last_after_the_claim_record() -> None:
    base = queue_base("q")
    assert keys_for(base, CLAIM, claim_id="c1", events=True)[-2:] == [
        base + "claim:c1", base + "events"]
    assert keys_for(base, ENQUEUE, "JOB:1", events=True) == [
        base + "job:JOB:1", base + "pending", base + "wake", base + "events"]
    assert keys_for(base, EXTEND_MANY, events=True) == [base + "active"]
    assert keys_for(base, ENQUEUE, "JOB:1") == keys_for(base, ENQUEUE, "JOB:1", events=False)
    assert key_of(base, "prio", lane="g:1") == base + "prio:g:1"


def test_the_layout_brackets_the_optional_keys_and_arguments() -> None:
    assert ENQUEUE.layout() == ("EMQ.ENQUEUE 3|4 <base>job:<id> <base>pending <base>wake "
                                "[<base>events] <id> <payload> <now> [<priority>] "
                                "[<expires_at:0>]")
    assert SETTLE.layout().startswith("EMQ.SETTLE 7|8|9 ")
    assert "[<base>claim:<claim_id>] [<base>events] <now>" in SETTLE.layout()
    assert EXTEND_MANY.layout().startswith("EMQ.EXTEND_MANY 1 <base>active <lease_ms:1>")


def test_the_header_states_the_optional_parts_of_each_command() -> None:
    header = protocol_gen.render()
    assert "#define EMQ_ENQUEUE_ARG_PRIORITY 3" in header
    assert "#define EMQ_ENQUEUE_DELAYED_ARG_PRIORITY 5" in header
    assert '#define EMQ_EVENTS_SUFFIX "events"' in header
    assert "#define EMQ_EVENTS_MAXLEN 10000" in header
    native = [t for t in TRANSITIONS if t.native]
    keys_max = max(len(t.keys) + int(t.record) + int(bool(t.events)) for t in native)
    assert f"#define EMQ_KEYS_MAX {keys_max}\n" in header
    assert f"#define EMQ_ARGS_MAX {max(len(t.args) + len(t.optional) for t in native)}\n" in header


def test_the_c_core_states_the_priority_constants_of_the_table() -> None:
    core = (ROOT / "native" / "emq_core.h").read_text()
    assert f"#define EMQ_PRIORITY_MIN ({PRIORITY_MIN}LL)" in core
    assert f"#define EMQ_PRIORITY_MAX {PRIORITY_MAX}LL" in core
    assert f"#define EMQ_PRIORITY_BAND {PRIORITY_BAND}LL" in core
    assert "#define EMQ_TIME_CAP (EMQ_PRIORITY_BAND - 1)" in core and TIME_CAP == PRIORITY_BAND - 1
    lua = (LUA / "include" / "priority.lua").read_text()
    assert f"local PRIORITY_BAND = {PRIORITY_BAND}\n" in lua
    assert "local TIME_CAP = PRIORITY_BAND - 1\n" in lua
