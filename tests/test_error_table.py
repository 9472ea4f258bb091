"""The error table (echomq/engine/transitions.py: ERROR_CODES, ERROR_TEXTS) is the single source of
the
error replies: the C header is generated from it, every text a script writes is one of its texts,
docs/PROTOCOL.md's error table is its texts, every code maps to a named exception, and a server
error is told by its reply's code alone."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions

import echomq
from echomq.conformance import model
from echomq.consumer.faults import Fault, classify
from echomq.engine import errors
from echomq.engine.clients import twins
from echomq.engine.error_header import HEADER, render
from echomq.engine.errors import (
    ArgumentError,
    EchoMQError,
    ErrorReply,
    FatalServerError,
    FenceError,
    ItemError,
    TrafikeyMissing,
    error_reply,
    mapped_error,
)
from echomq.engine.executors import executor_for
from echomq.engine.transitions import (
    CLAIM,
    ENQUEUE_MANY,
    ERROR_CODES,
    ERROR_TEXTS,
    ERRORS,
    EXTEND_MANY,
    SETTLE,
    ErrorCode,
    ErrorText,
    keys_for,
    queue_base,
)

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "echomq"
PROTOCOL = (ROOT / "docs" / "PROTOCOL.md").read_text()
OURS = [row for row in ERROR_CODES if row.ours]


def test_the_checked_in_error_header_is_what_the_table_gives() -> None:
    """A stale native/emq_errors.h fails here: run `python -m echomq.engine.protocol_gen`."""
    assert HEADER.read_text() == render()


def test_every_text_starts_with_a_code_of_the_table() -> None:
    codes = {row.code for row in ERROR_CODES}
    assert {error.code for error in ERROR_TEXTS} == codes


# ---- Python: a named exception for every code ------------------------------------------------


@pytest.mark.parametrize("row", OURS, ids=lambda row: row.code)
def test_each_of_our_codes_raises_its_named_exception_exported_by_the_package(
        row: ErrorCode) -> None:
    kind = getattr(echomq, row.exception)
    assert row.exception in echomq.__all__
    assert issubclass(kind, EchoMQError)
    assert errors.exception_for(row.code) is kind


@pytest.mark.parametrize("row", [row for row in ERROR_CODES if not row.ours],
                         ids=lambda row: row.code)
def test_each_server_code_names_the_client_librarys_exception(row: ErrorCode) -> None:
    kind = getattr(redis.exceptions, row.exception)
    assert issubclass(kind, redis.exceptions.ResponseError)


def test_the_new_classes_keep_the_families_callers_catch() -> None:
    assert issubclass(ItemError, ArgumentError) and issubclass(ItemError, ValueError)
    assert issubclass(FenceError, FatalServerError)
    assert errors.exception_for("EMQITEM") is ItemError
    assert errors.exception_for("EMQFENCE") is FenceError


def example(error: ErrorText) -> str:
    return error.format(verb="CLAIM", nkeys=3, nargs=2, n=1, shape="<id> <fence>",
                        name="lease_ms", min=1, nmax=3)


@pytest.mark.parametrize("error", [e for e in ERROR_TEXTS if e.code.startswith("EMQ")],
                         ids=lambda e: e.name)
def test_each_of_our_replies_maps_to_its_codes_class_with_the_servers_words(
        error: ErrorText) -> None:
    line = example(error)
    mapped = mapped_error(redis.ResponseError(line))
    assert type(mapped) is errors.exception_for(error.code)
    assert str(mapped) == line


def test_an_unknown_native_command_with_an_underscore_means_trafikey_is_missing() -> None:
    reply = redis.ResponseError("unknown command 'EMQ.ENQUEUE_DELAYED', with args beginning with: ")
    mapped = mapped_error(reply)
    assert isinstance(mapped, TrafikeyMissing) and mapped.command == "EMQ.ENQUEUE_DELAYED"


@pytest.fixture
def server_errors(library_conn: Any) -> dict[str, BaseException]:
    """Real errors of each kind a client library's parser treats its own way: a code it keeps
    in the text (WRONGTYPE), one it strips into a class of its own (NOSCRIPT), and ERR, which it
    strips from a plain ResponseError; from redis-py and valkey-py alike."""
    library_conn.set("a-string", "x")
    found: dict[str, BaseException] = {}
    for code, command in [("WRONGTYPE", ("LPUSH", "a-string", "v")),
                          ("NOSCRIPT", ("EVALSHA", "0" * 40, 0)),
                          ("ERR", ("EVAL", "return 1", "x"))]:
        with pytest.raises(twins(redis.ResponseError)) as raised:
            library_conn.execute_command(*command)
        found[code] = raised.value
    return found


def test_a_servers_error_is_told_by_its_replys_code_however_the_library_parsed_it(
        server_errors: dict[str, BaseException]) -> None:
    for code, exc in server_errors.items():
        assert error_reply(exc).code == code
    assert error_reply(server_errors["ERR"]).line == ERRORS["NUMKEYS_INT"].text
    assert error_reply(server_errors["WRONGTYPE"]).line == ERRORS["TYPE"].text
    assert classify(server_errors["NOSCRIPT"]) is Fault.TRANSIENT
    assert classify(server_errors["WRONGTYPE"]) is Fault.FATAL
    assert classify(server_errors["ERR"]) is Fault.FATAL


def test_a_code_the_library_stripped_is_told_by_the_class_without_a_status_code() -> None:
    """redis-py before 6 and valkey-py keep no ``status_code``: the class tells the code."""
    moving = ERRORS["MOVING"].text.split(" ", 1)[1]
    assert error_reply(redis.exceptions.TryAgainError(moving)).line == ERRORS["MOVING"].text
    denied = ERRORS["PERM"].text.split(" ", 1)[1]
    assert error_reply(redis.exceptions.NoPermissionError(denied)).line == ERRORS["PERM"].text
    assert classify(redis.exceptions.TryAgainError(moving)) is Fault.TRANSIENT


class _NamedError(redis.ResponseError):
    """An error as redis-py 8.2 makes it: ``status_code`` names the code, stripped from the text
    or not."""

    def __init__(self, text: str, status_code: str) -> None:
        super().__init__(text)
        self.status_code = status_code


def test_a_code_named_and_left_in_the_text_is_read_once() -> None:
    fence = ERRORS["FENCE"].text
    assert error_reply(_NamedError(fence, "EMQFENCE")).line == fence
    assert str(mapped_error(_NamedError(fence, "EMQFENCE"))) == fence
    numkeys = ERRORS["NUMKEYS_INT"].text
    assert error_reply(_NamedError(numkeys.split(" ", 1)[1], "ERR")).line == numkeys
    assert error_reply(_NamedError("EMQFENCE", "EMQFENCE")) == ErrorReply("EMQFENCE", "")


@pytest.mark.parametrize("wire", [5, 6])
def test_a_fence_counter_that_is_no_integer_raises_fence_error(conn: redis.Redis,
                                                               wire: int) -> None:
    base = queue_base("fenced")
    conn.set(base + "fence", "not-a-number")
    with pytest.raises(FenceError) as raised:
        executor_for(wire).call(conn, CLAIM, keys_for(base, CLAIM), ["30000", "*"])
    assert str(raised.value) == ERRORS["FENCE"].text
    assert classify(raised.value) is Fault.FATAL


@pytest.mark.parametrize("wire", [5, 6])
def test_a_malformed_item_raises_item_error(conn: redis.Redis, wire: int) -> None:
    base = queue_base("items")
    for transition, args in [(SETTLE, ["*", "0", "30000", "0", "ack", "JOB:1"]),
                             (EXTEND_MANY, ["30000", "*", "JOB:1"])]:
        with pytest.raises(ItemError) as raised:
            executor_for(wire).call(conn, transition, keys_for(base, transition), args)
        assert str(raised.value) == ERRORS["ITEM"].format(n=1, shape=transition.item_shape)
    assert conn.keys(base + "*") == []


# ---- Lua: every text a script writes is the table's -----------------------------------------


# A Lua comment (long or to the end of the line), a quoted string, a name (dotted), .. or a char.
LUA_TOKEN = re.compile(r"--\[\[.*?\]\]|--[^\n]*"
                       r"|'(?:\\.|[^'\\])*'"
                       r'|"(?:\\.|[^"\\])*"'
                       r"|[A-Za-z_][\w.]*|\.\.|\S", re.S)


def lua_tokens(source: str) -> Iterator[tuple[str, str]]:
    """The tokens of a Lua source, comments dropped: ("str", value), ("name", a.b), ("op", c)."""
    for match in LUA_TOKEN.finditer(source):
        token = match[0]
        if token.startswith("--"):
            continue
        if token[0] in "'\"":
            yield "str", re.sub(r"\\(.)", r"\1", token[1:-1])
        elif token[0].isalpha() or token[0] == "_":
            yield "name", token
        else:
            yield "op", token


def lua_sources() -> dict[str, str]:
    return {str(path.relative_to(PACKAGE)): path.read_text()
            for path in sorted((PACKAGE / "lua").rglob("*.lua"))}


def lua_constants() -> dict[str, str]:
    """Every ``local E_<NAME> = '<text>'`` of every Lua file."""
    found: dict[str, str] = {}
    for source in lua_sources().values():
        tokens = list(lua_tokens(source))
        for k in range(len(tokens) - 3):
            (_, local), (kind, name), (_, eq), (skind, text) = tokens[k:k + 4]
            if local == "local" and kind == "name" and name.startswith("E_") and eq == "=":
                assert skind == "str", name
                found[name] = text
    return found


def argument(tokens: list[tuple[str, str]], start: int) -> list[tuple[str, str]]:
    """The tokens of the first argument of the call whose "(" is at ``start``."""
    depth, out = 0, []
    for token in tokens[start + 1:]:
        if token[1] in "({" and token[0] == "op":
            depth += 1
        elif token[1] in ")}" and token[0] == "op":
            if depth == 0:
                return out
            depth -= 1
        elif token == ("op", ",") and depth == 0:
            return out
        out.append(token)
    raise AssertionError("unclosed call")


def concatenation(tokens: list[tuple[str, str]]) -> str:
    """``'a' .. x[i] .. 'b'`` as a Lua format: each part that is not a literal is %s."""
    parts: list[list[tuple[str, str]]] = [[]]
    for token in tokens:
        if token == ("op", ".."):
            parts.append([])
        else:
            parts[-1].append(token)
    return "".join(part[0][1] if len(part) == 1 and part[0][0] == "str" else "%s"
                   for part in parts)


def lua_replies() -> set[str]:
    """The text of every ``redis.error_reply(...)`` of every Lua file, as a Lua format: a
    constant's text, ``string.format``'s format, or a concatenation with %s for each part that is
    not a literal."""
    constants = lua_constants()
    found: set[str] = set()
    for source in lua_sources().values():
        tokens = list(lua_tokens(source))
        for k, token in enumerate(tokens):
            if token != ("name", "redis.error_reply"):
                continue
            arg = argument(tokens, k + 1)
            if arg[0] == ("name", "string.format"):
                arg = argument(arg, 1)
            if len(arg) == 1 and arg[0][1] in constants:
                found.add(constants[arg[0][1]])
            elif len(arg) == 1 and arg[0][0] == "name":
                continue  # a reply made elsewhere (a helper's argument)
            else:
                found.add(concatenation(arg))
    return found


SCRIPT_TEXTS = [error for error in ERROR_TEXTS if error.executors != "native"]


def test_every_lua_error_constant_is_the_tables_text_of_its_name() -> None:
    constants = lua_constants()
    assert constants, "no E_* constants found under echomq/lua"
    for name, text in constants.items():
        assert text == ERRORS[name.removeprefix("E_")].text, name


def test_every_reply_a_script_writes_is_a_text_of_the_table_and_back() -> None:
    written = lua_replies()
    table = {error.printf() for error in SCRIPT_TEXTS}
    assert written - table == set(), "texts the table does not have"
    assert table - written == set(), "texts of the table no script writes"


def test_the_conformance_models_texts_are_the_tables() -> None:
    for name in ("KIND", "KEYS", "TYPE", "NOW", "FENCE", "RESULT", "PRIORITY"):
        assert getattr(model, f"E_{name}") == ERRORS[name].text.encode(), name
    for name, ours in [("NOTINT", "NUMKEYS_INT"), ("NEGATIVE", "NUMKEYS_NEG"),
                       ("TOOMANY", "NUMKEYS_BIG")]:
        assert getattr(model, f"E_{name}") == ERRORS[ours].text.encode(), name


# ---- docs/PROTOCOL.md ------------------------------------------------------------------------

DOC_FIELDS = {"verb": "<VERB>", "nkeys": "<k>", "nargs": "<a>", "n": "<n>", "name": "<name>",
              "min": "<min>", "nmax": "<m>"}


def documented(error: ErrorText, **fields: str) -> str:
    return "-" + error.format(**{**DOC_FIELDS, **fields})


def test_the_protocol_docs_error_table_is_the_tables_texts_in_order() -> None:
    block = PROTOCOL.split("### Errors (one table for both executors)\n", 1)[1].split("\n\n")[0]
    rows = re.findall(r"^\| `(-[^`]*)` \|", block, re.M)
    expected: list[str] = []
    for error in ERROR_TEXTS:
        if error.executors != "both":
            continue
        if "shape" in error.fields:
            expected += [documented(error, shape=t.item_shape)
                         for t in (SETTLE, EXTEND_MANY, ENQUEUE_MANY)]
        else:
            expected.append(documented(error))
    assert rows == expected


def test_the_protocol_doc_states_the_other_texts_where_they_arise() -> None:
    prose = " ".join(PROTOCOL.split())
    assert f"`{documented(ERRORS['KNOB'], name='<knob>')[1:]}`" in prose
    assert f"`{ERRORS['PAUSED'].text}`" in prose
    for name in ("NUMKEYS_INT", "NUMKEYS_NEG", "NUMKEYS_BIG"):
        assert f"`-{ERRORS[name].text}`" in prose


def mapping(rows: list[ErrorCode]) -> str:
    """The codes of each exception, in the table's order: "`A`, `B` → `Class`; ..."."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        groups.setdefault(row.exception, []).append(f"`{row.code}`")
    return "; ".join(f"{', '.join(codes)} → `{name}`" for name, codes in groups.items())


def test_the_protocol_doc_names_each_codes_exception_as_the_table() -> None:
    prose = " ".join(PROTOCOL.split())
    assert f"(exported by `echomq`): {mapping(OURS)}." in prose
    theirs = [row for row in ERROR_CODES if not row.ours]
    assert f"valkey-py's namesakes): {mapping(theirs)}." in prose


# ---- No error told by its text anywhere else -------------------------------------------------

PARSING = {"split", "rsplit", "partition", "rpartition", "startswith", "endswith", "find",
           "index"}
MATCHING = {"match", "fullmatch", "search", "findall"}


def _is_str_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "str" and len(node.args) == 1)


def text_parsing(tree: ast.AST) -> Iterator[int]:
    """Lines that parse an object's text: ``str(x).split(" ")``, ``str(x).startswith(...)``,
    ``str(x)[0]``, a regex matched on ``str(x)``, directly or through a name bound to it."""
    texts = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
             and _is_str_call(node.value) for target in node.targets
             if isinstance(target, ast.Name)}

    def is_text(node: ast.AST) -> bool:
        return _is_str_call(node) or (isinstance(node, ast.Name) and node.id in texts)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in PARSING and is_text(node.func.value) and (node.args or name != "split"):
                yield node.lineno
            if name in MATCHING and any(is_text(arg) for arg in node.args):
                yield node.lineno
        if (isinstance(node, ast.Subscript) and is_text(node.value)
                and not isinstance(node.slice, ast.Slice)):
            yield node.lineno


def test_the_package_tells_errors_by_their_code_in_one_place_only() -> None:
    """Only ``echomq.engine.errors.error_reply`` reads a server error's text (its code is the first
    word); everything else asks it."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and path.name == "errors.py" \
                    and node.name == "error_reply":
                node.body = []
        found += [f"{path.relative_to(ROOT)}:{line}" for line in text_parsing(tree)]
    assert found == []
