"""The shape of native/ that docs/ARCHITECTURE.md describes, checked on the sources: trafikey.c is
the module's face (OnLoad, registration, key positions, the handler table), the validation of a
call has a file of its own, only effects.c writes keys (so every write fires its event, signals
its key and replicates itself), and every declared key is named by its generated macro."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parent.parent / "native"
MODULE_SOURCES = sorted(p for p in NATIVE.glob("*.c") if p.name != "nodeepbind.c")

# The module API's calls that change a key, tell of a change, or replicate one.
WRITING_API = re.compile(
    r"\bValkeyModule_(HashSet|ZsetAdd|ZsetIncrby|ZsetRem|ListPush|ListPop|ListSet|ListInsert"
    r"|ListDelete|StringSet|StringTruncate|DeleteKey|UnlinkKey|SetExpire|SetAbsExpire|Replicate"
    r"|ReplicateVerbatim|NotifyKeyspaceEvent|SignalModifiedKey|ModuleTypeSetValue"
    r"|ModuleTypeReplaceValue|StreamAdd|StreamDelete|StreamIteratorDelete|StreamTrimByLength"
    r"|StreamTrimByID)\b")
# ValkeyModule_Call may run these outside effects.c: they read only.
# GET: a claim record, the fence counter and a dedupe key read as the script reads them; INFO:
# the memory an ack that keeps a result may use (docs/PROTOCOL.md, "Results under memory pressure").
READING_COMMANDS = {"EXISTS", "GET", "INFO"}
SERVER_CALL = re.compile(r"\bValkeyModule_Call\(\s*\w+\s*,\s*(\"[^\"]*\"|[^,]+)")
WRITABLE_DMA = re.compile(r"\bValkeyModule_StringDMA\([^;]*VALKEYMODULE_WRITE")
# A declared key by its position: k[2] (the open keys), names[2] or call->keys[2] (their names).
RAW_KEY_INDEX = re.compile(r"(\b(k|names)|->keys)\[\s*\d+\s*\]")


def code_of(path: Path) -> str:
    """The file's C without its comments (a comment may name any API it likes)."""
    text = path.read_text()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def defines(path: Path, function: str) -> bool:
    """Whether the file defines the function (a definition starts at the line's first column)."""
    pattern = rf"^(?!\s)[^;{{}}]*?\b{function}\s*\([^;{{]*\)\s*\{{"
    return re.search(pattern, code_of(path), flags=re.M) is not None


def lines_matching(pattern: re.Pattern[str], path: Path) -> list[str]:
    return [f"{path.name}:{n}: {line.strip()}"
            for n, line in enumerate(code_of(path).splitlines(), 1) if pattern.search(line)]


def test_the_module_is_built_from_every_source_of_native() -> None:
    makefile = (NATIVE / "Makefile").read_text()
    listed = re.search(r"^SRCS = (.*)$", makefile, flags=re.M)
    assert listed is not None
    assert sorted(listed.group(1).split()) == [p.name for p in MODULE_SOURCES]


@pytest.mark.parametrize("function", ["ValkeyModule_OnLoad", "ValkeyModule_OnUnload",
                                      "register_commands", "report_keys", "run_command"])
def test_trafikey_c_is_the_modules_face(function: str) -> None:
    owners = [p.name for p in MODULE_SOURCES if defines(p, function)]
    assert owners == ["trafikey.c"]


def test_trafikey_c_registers_every_command_with_its_key_positions_and_handler() -> None:
    code = code_of(NATIVE / "trafikey.c")
    for call in ("ValkeyModule_CreateCommand(", "ValkeyModule_SetCommandInfo(",
                 "ValkeyModule_KeyAtPosWithFlags(", "EMQ_FOR_EACH_COMMAND(EMQ_HANDLER_ENTRY)"):
        assert call in code
    for other in MODULE_SOURCES:
        if other.name != "trafikey.c":
            assert "ValkeyModule_CreateCommand(" not in code_of(other), other.name


@pytest.mark.parametrize("function", ["check_call", "parse_items", "open_typed", "keys_base",
                                      "split_numkeys", "check_shape", "check_gates"])
def test_the_validation_of_a_call_has_a_file_of_its_own(function: str) -> None:
    owners = [p.name for p in MODULE_SOURCES if defines(p, function)]
    assert owners == ["validate.c"]


def test_no_file_but_effects_c_writes_a_key() -> None:
    writes = [hit for path in MODULE_SOURCES if path.name != "effects.c"
              for pattern in (WRITING_API, WRITABLE_DMA) for hit in lines_matching(pattern, path)]
    assert writes == []


def test_the_server_runs_no_writing_command_for_a_file_but_effects_c() -> None:
    commands = {f"{path.name}: {command}" for path in MODULE_SOURCES if path.name != "effects.c"
                for command in SERVER_CALL.findall(code_of(path))}
    assert {c for c in commands if c.split(": ")[1].strip('"') not in READING_COMMANDS} == set()


def test_the_event_and_signal_of_a_write_are_effects_c_own() -> None:
    uses = [hit for path in MODULE_SOURCES if path.name != "effects.c"
            for hit in lines_matching(re.compile(r"\b(touched|removed_from)\("), path)]
    assert uses == []


def test_declared_keys_are_named_by_their_generated_macros() -> None:
    raw = [hit for path in MODULE_SOURCES for hit in lines_matching(RAW_KEY_INDEX, path)]
    assert raw == []
