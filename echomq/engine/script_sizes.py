"""Writes docs/PROTOCOL.md's table of what each transition's script loads (its includes, bytes and
lines), from the scripts as ``echomq.engine.scripts`` assembles them.

    python -m echomq.engine.script_sizes            # rewrites the table in this checkout's
    PROTOCOL.md
    python -m echomq.engine.script_sizes --check    # exit 1 when the table is stale

tests/test_lua_includes.py fails when the table differs from what the scripts give.
"""

from __future__ import annotations

import sys
from pathlib import Path

from echomq.engine.scripts import script_for
from echomq.engine.transitions import ALL_TRANSITIONS

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md"
BEGIN = "<!-- script sizes: written by python -m echomq.engine.script_sizes -->\n"
END = "<!-- end of script sizes -->\n"


def render() -> str:
    """The table, one row per transition in the protocol table's order."""
    rows = ["| script | includes, in load order | bytes loaded | lines |",
            "| --- | --- | ---: | ---: |"]
    for transition in ALL_TRANSITIONS:
        script = script_for(transition)
        included = ", ".join(part.file.removeprefix("include/").removesuffix(".lua")
                             for part in script.parts[:-1])
        lines = script.source.count(b"\n")
        rows.append(f"| `{transition.script_file}` | {included} | {len(script.source):,} | "
                    f"{lines:,} |")
    return "\n".join(rows) + "\n"


def rewritten(doc: str) -> str:
    """``doc`` with the table between its markers replaced by the one the scripts give."""
    head, begin, rest = doc.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"PROTOCOL.md has no {BEGIN.strip()} ... {END.strip()} markers")
    return head + BEGIN + render() + END + tail


def main(argv: list[str]) -> int:
    doc = PROTOCOL.read_text()
    fresh = rewritten(doc)
    if argv == ["--check"]:
        return 0 if fresh == doc else 1
    PROTOCOL.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
