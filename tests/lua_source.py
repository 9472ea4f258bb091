"""Reading Lua source the way the tests need it: the names a file uses and the top-level locals it
defines, with comments and strings left out (a small tokenizer, not a parser)."""

from __future__ import annotations

import re

_LONG_BRACKET = re.compile(r"\[(=*)\[")
_TOKEN = re.compile(r"""
    (?P<comment>--)
  | (?P<string>['"])
  | (?P<long>\[=*\[)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>0[xX][0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<op>\.\.\.|\.\.|==|~=|<=|>=|\S)
  | (?P<space>\s+)
""", re.X)


def _long_end(source: str, start: int) -> int:
    """The index just past the long bracket ([[...]], [==[...]==]) opening at ``start``."""
    opening = _LONG_BRACKET.match(source, start)
    assert opening is not None
    close = "]" + opening.group(1) + "]"
    end = source.find(close, opening.end())
    if end < 0:
        raise ValueError(f"unfinished long bracket at offset {start}")
    return end + len(close)


def _string_end(source: str, start: int) -> int:
    """The index just past the quoted string opening at ``start`` (backslash escapes honoured)."""
    quote, i = source[start], start + 1
    while i < len(source):
        if source[i] == "\\":
            i += 2
        elif source[i] == quote:
            return i + 1
        elif source[i] == "\n":
            break
        else:
            i += 1
    raise ValueError(f"unfinished string at offset {start}")


def tokens(source: str) -> list[str]:
    """The names, numbers and operators of ``source``; every string literal reads as ``'``."""
    out: list[str] = []
    i = 0
    while i < len(source):
        match = _TOKEN.match(source, i)
        assert match is not None
        kind = match.lastgroup
        if kind == "comment":
            if _LONG_BRACKET.match(source, match.end()):
                i = _long_end(source, match.end())
            else:
                newline = source.find("\n", i)
                i = len(source) if newline < 0 else newline
            continue
        if kind == "string":
            out.append("'")
            i = _string_end(source, i)
            continue
        if kind == "long":
            out.append("'")
            i = _long_end(source, i)
            continue
        if kind != "space":
            out.append(match.group())
        i = match.end()
    return out


def names_used(source: str) -> set[str]:
    """Every name the code of ``source`` mentions, fields after ``.`` or ``:`` left out."""
    found = tokens(source)
    return {tok for before, tok in zip(["", *found], found, strict=False)
            if re.fullmatch(r"[A-Za-z_]\w*", tok) and before not in (".", ":")}


_KEYWORDS = {"local", "function", "end", "if", "then", "else", "elseif", "for", "while", "do",
             "repeat", "until", "return", "in", "and", "or", "not", "nil", "true", "false", "break"}
# `for ... do` and `while ... do` open their block at `do`
_OPENS = {"function", "if", "do", "repeat"}
_CLOSES = {"end", "until"}


def top_level_locals(source: str) -> list[str]:
    """The locals ``source`` defines at its top level (``local function f``, ``local a, b = ...``),
    in order: what an include gives the file that includes it."""
    found, depth, defined = tokens(source), 0, []
    for i, tok in enumerate(found):
        if tok == "local" and depth == 0:
            j = i + 1
            if found[j] == "function":
                j += 1
            defined.append(found[j])
            while found[j + 1] == ",":
                j += 2
                defined.append(found[j])
        if tok in _OPENS:
            depth += 1
        elif tok in _CLOSES:
            depth -= 1
    assert depth == 0, "unbalanced blocks"
    return defined


def declared_names(source: str) -> list[str]:
    """Every name ``source`` declares, at any depth: locals, parameters, loop variables."""
    found, declared = tokens(source), []
    for i, tok in enumerate(found):
        if (tok == "local" and found[i + 1] != "function") or tok == "for":
            j = i + 1
            declared.append(found[j])
            while found[j + 1] == ",":
                j += 2
                declared.append(found[j])
        elif tok == "function":
            j = found.index("(", i)
            if found[i - 1] == "local":
                declared.append(found[i + 1])
            declared.extend(name for name in found[j + 1:found.index(")", j)]
                            if name not in (",", "..."))
    return declared
