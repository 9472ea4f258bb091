"""Reading a JSON-lines file that other processes are appending to: a reader can see the last
line half written (a write to a regular file is not atomic to a concurrent read), so only the
lines already ended by a newline are records; the unended tail is read again next time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def written_records(path: Path) -> list[Any]:
    """The records of ``path``'s ended lines (none while the file does not exist)."""
    return Tail(path).poll()


def unended_tail(path: Path) -> str:
    """What follows ``path``'s last newline: empty once every writer has finished its line."""
    text = path.read_text() if path.exists() else ""
    return text[text.rfind("\n") + 1:]


class Tail:
    """``path``'s records as they are written, each line read and parsed once however often it
    is polled (a test polling a file of thousands of lines must not load the machine)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.records: list[Any] = []

    def poll(self) -> list[Any]:
        """The records ended since the last poll (kept in ``records`` too)."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as file:
            file.seek(self.offset)
            chunk = file.read()
        ended = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(ended)
        new = [json.loads(line) for line in ended.splitlines() if line]
        self.records.extend(new)
        return new
