"""The JSON-lines reader the multi-process tests poll with (tests/json_lines.py)."""

from __future__ import annotations

from pathlib import Path

from tests.json_lines import unended_tail, written_records


def test_a_line_still_being_written_is_left_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    assert written_records(path) == [] and unended_tail(path) == ""
    path.write_text('{"child": 1}\n{"chil')
    assert written_records(path) == [{"child": 1}]
    assert unended_tail(path) == '{"chil'
    with path.open("a") as more:
        more.write('d": 2}\n')
    assert written_records(path) == [{"child": 1}, {"child": 2}]
    assert unended_tail(path) == ""
