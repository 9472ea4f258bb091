"""Reading a JSON-lines file that other processes are appending to: a reader can see the last
line half written (a write to a regular file is not atomic to a concurrent read), so only the
lines already ended by a newline are records; the unended tail is read again next time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def written_records(path: Path) -> list[Any]:
    """The records of ``path``'s ended lines (none while the file does not exist)."""
    if not path.exists():
        return []
    text = path.read_text()
    ended = text[:text.rfind("\n") + 1]
    return [json.loads(line) for line in ended.splitlines() if line]


def unended_tail(path: Path) -> str:
    """What follows ``path``'s last newline: empty once every writer has finished its line."""
    text = path.read_text() if path.exists() else ""
    return text[text.rfind("\n") + 1:]
