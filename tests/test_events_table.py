"""The events stream's constants and kinds are the table's (echomq.engine.transitions) in every
place that writes an entry: the scripts (include/events.lua and each emit), the module (each
ev_emit) and the model (each emit)."""

from __future__ import annotations

import re
from pathlib import Path

from echomq.engine.transitions import EVENT_KINDS, EVENTS_MAXLEN

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "echomq" / "lua"
NATIVE = ROOT / "native"
MODEL = ROOT / "echomq" / "conformance" / "model"
WRITERS = {
    "scripts": (sorted(LUA.rglob("*.lua")), r"emit\(\w+, (?:recover and )?'(\w+)'(?: or '(\w+)')?"),
    "module": (sorted(NATIVE.glob("*.c")), r'\.kind = "(\w+)"|kind = [^?;]*\? "(\w+)" : "(\w+)"'),
    "model": (sorted(MODEL.glob("*.py")), r'self\.emit\(\s*"(\w+)"(?: if head else "(\w+)")?'),
}


def kinds_written(source: str) -> set[str]:
    paths, pattern = WRITERS[source]
    return {word for path in paths for match in re.findall(pattern, path.read_text())
            for word in (match if isinstance(match, tuple) else (match,)) if word}


def test_the_scripts_trim_at_the_table_s_length() -> None:
    text = (LUA / "include" / "events.lua").read_text()
    assert f"\nlocal EVENTS_MAXLEN = '{EVENTS_MAXLEN}'\n" in text


def test_every_kind_written_is_the_table_s() -> None:
    written = {source: kinds_written(source) for source in WRITERS}
    for source, kinds in written.items():
        assert kinds <= set(EVENT_KINDS), (source, kinds - set(EVENT_KINDS))
    assert written["scripts"] == written["model"] == set(EVENT_KINDS)
    assert written["module"] == set(EVENT_KINDS) - {"requeued"}  # requeue is scripts only
