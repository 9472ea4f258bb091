"""The priority primitives agree everywhere: the grammar of a priority word (the C core, the Lua
include, the model, the client's check) and the pending score with its reading back
(echomq.engine.priority against emq_pending_score and the Lua include)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from echomq._core import ffi, lib
from hypothesis import given, strategies as st

from echomq.conformance.model import words
from echomq.engine.errors import ArgumentError
from echomq.engine.native import checked_priority
from echomq.engine.priority import pending_score, split_score
from echomq.engine.transitions import (
    ERRORS,
    PRIORITY_BAND,
    PRIORITY_MAX,
    PRIORITY_MIN,
    TIME_CAP,
)

PRIORITY_LUA = (Path(__file__).resolve().parent.parent / "echomq" / "lua" / "include"
                / "priority.lua").read_text()
GOOD = {b"0": 0, b"-0": 0, b"007": 7, b"10": 10, b"100": 100, b"-100": -100, b"-5": -5, b"099": 99}
BAD = [b"101", b"-101", b"1000", b"+5", b" 5", b"5 ", b"5.0", b"1e2", b"0x1", b"--5", b"", b"abc",
       b"5\x00", b"-", b"0100", b"-0100", b"\xd9\xa5"]
TIMES = st.integers(0, 2 * 999_999_999_999_999)
PRIORITIES = st.integers(PRIORITY_MIN, PRIORITY_MAX)


def c_priority(word: bytes) -> int | None:
    out = ffi.new("long long *")
    return int(out[0]) if lib.emq_parse_priority(word, len(word), out) else None


def test_the_constants_are_the_plans() -> None:
    assert (PRIORITY_MIN, PRIORITY_MAX) == (-100, 100)
    assert PRIORITY_BAND == 35184372088832 and TIME_CAP == PRIORITY_BAND - 1
    assert (words.PRIORITY_BAND, words.TIME_CAP) == (PRIORITY_BAND, TIME_CAP)
    assert ERRORS["PRIORITY"].text == "EMQNUM priority must be an integer from -100 to 100"


@pytest.mark.parametrize("word", list(GOOD) + BAD)
def test_c_and_the_model_read_a_priority_word_alike(word: bytes) -> None:
    assert c_priority(word) == words.priority_arg(word) == GOOD.get(word)
    assert words.row_priority(word) == GOOD.get(word, 0)


@given(st.binary(max_size=5) | st.from_regex(rb"-?[0-9]{1,4}", fullmatch=True))
def test_c_and_the_model_agree_on_any_word(word: bytes) -> None:
    assert c_priority(word) == words.priority_arg(word)


def test_the_lua_include_reads_words_and_scores_as_c(conn: Any) -> None:
    body = PRIORITY_LUA + """
local out = {}
for i = 1, #ARGV do
  local p = priority_arg(ARGV[i])
  out[i] = p == nil and 'nil' or string.format('%d', p)
end
return out
"""
    replies = conn.eval(body, 0, *GOOD, *BAD)
    expected = [str(GOOD[w]) for w in GOOD] + ["nil"] * len(BAD)
    assert [r.decode() if isinstance(r, bytes) else r for r in replies] == expected
    score = PRIORITY_LUA + "return string.format('%d', pending_score(tonumber(ARGV[1]), " \
                           "tonumber(ARGV[2])))"
    for p, t in [(0, 123), (10, 999_999_999_999_999), (-100, TIME_CAP), (100, 0), (-7, 5)]:
        got = conn.eval(score, 0, p, t)
        assert int(got) == lib.emq_pending_score(p, t) == pending_score(p, t)
    conn.hset("row", "priority", "7")
    conn.hset("bad", "priority", "+1")
    rows = PRIORITY_LUA + "return {row_priority(KEYS[1]), row_priority(KEYS[2]), " \
                          "row_priority(KEYS[3])}"
    assert conn.eval(rows, 3, "row", "bad", "absent") == [7, 0, 0]


@given(PRIORITIES, TIMES)
def test_the_score_is_the_c_cores_and_reads_back(priority: int, t: int) -> None:
    score = pending_score(priority, t)
    assert score == lib.emq_pending_score(priority, t) == words.pending_score(priority, t)
    assert float(score) == score  # exact in a double, as a zset holds it
    assert split_score(float(score)) == (priority, min(t, TIME_CAP))


@given(PRIORITIES, PRIORITIES, TIMES, TIMES)
def test_a_higher_priority_always_scores_lower(p: int, q: int, t: int, u: int) -> None:
    if p > q:
        assert pending_score(p, t) < pending_score(q, u)
    if p == q and t < u <= TIME_CAP:
        assert pending_score(p, t) < pending_score(q, u)


def test_priority_zero_keeps_the_time_as_the_score() -> None:
    assert pending_score(0, 1_700_000_000_000) == 1_700_000_000_000


@pytest.mark.parametrize("value", [0, 5, -100, 100])
def test_a_good_priority_is_its_decimal(value: int) -> None:
    assert checked_priority(value) == str(value)


@pytest.mark.parametrize("value", [101, -101, 1000, True, 5.0, "5", None])
def test_a_bad_priority_is_refused_in_the_servers_words(value: Any) -> None:
    with pytest.raises(ArgumentError) as raised:
        checked_priority(value)
    assert str(raised.value) == ERRORS["PRIORITY"].text
