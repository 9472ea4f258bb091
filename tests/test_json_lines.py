"""The JSON-lines reader the multi-process tests poll with (tests/json_lines.py)."""

from __future__ import annotations

from pathlib import Path

from tests.json_lines import Tail, unended_tail, written_records


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


def test_a_tail_reads_each_ended_line_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    tail = Tail(path)
    assert tail.poll() == []
    path.write_text('{"child": 1}\n{"chil')
    assert tail.poll() == [{"child": 1}]
    assert tail.poll() == []
    with path.open("a") as more:
        more.write('d": 2}\n{"fanin": 2}\n')
    assert tail.poll() == [{"child": 2}, {"fanin": 2}]
    assert tail.records == [{"child": 1}, {"child": 2}, {"fanin": 2}]
