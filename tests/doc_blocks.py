"""Every ```python block of README.md and docs/*.md, as ``tests/test_doc_blocks.py`` runs it.

The conventions the blocks follow (the test relies on them; a reader sees only the code):

- A block is a whole script: it runs with the suite's Python, in a fresh directory of its own.
- Its server is ``redis://localhost:6379`` (a cluster: ``127.0.0.1:7000``). The test starts a
  valkey-server with trafikey loaded and points the block at it by putting that server's port in
  place of 6379 (or 7000) in the block's text; nothing else of the text is changed.
- A block whose first line is ``# NAME.py`` is a module of the user's: it is written as NAME.py
  beside every later block of its document, which imports it as the user's own file would be.
  A ```toml block whose first line is ``# NAME.toml`` (``# pyproject.toml``) is written so too;
  it is not run.
- An HTML comment on the line before a fence says what else the block needs, as a user would
  have it running in another terminal:
  ``<!-- doc-test: worker ARGS -->``: ``echomq worker ARGS``, live before the block starts;
  ``<!-- doc-test: serves QUEUE -->``: the block serves a queue until it is stopped: once a job
  the test enqueued on QUEUE is done, it is sent SIGTERM and must exit 0;
  ``<!-- doc-test: cluster -->``: a three-node Valkey Cluster;
  ``<!-- doc-test: pytest -->``: the block is a test file of the user's, run by pytest (the
  plugin ``echomq.testing`` starts its own server); every test must pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?:<!-- doc-test: (?P<needs>[^\n]+?) -->\n)?```(?P<language>python|toml)\n"
                   r"(?P<code>.*?)^```", re.MULTILINE | re.DOTALL)
MODULE_NAME = re.compile(r"\A# (?P<name>\w+\.(?:py|toml))\n")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    code: str
    needs: str  # "" or what the comment before the fence names
    language: str = "python"  # or "toml": a file written for the blocks after it, never run

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    @property
    def module(self) -> str | None:
        """NAME.py when the block is a module of the user's."""
        found = MODULE_NAME.match(self.code)
        return found["name"] if found else None

    def need(self, kind: str) -> str | None:
        """The argument of this block's ``kind`` need ("" when it takes none), or None."""
        head, _, argument = self.needs.partition(" ")
        return argument if head == kind else None


def blocks_of(document: Path) -> list[Block]:
    text = document.read_text()
    return [Block(document, text.count("\n", 0, found.start("code")) + 1, found["code"],
                  found["needs"] or "", found["language"])
            for found in FENCE.finditer(text)]


def every_block() -> list[Block]:
    """The python blocks, each run."""
    return [block for document in DOCUMENTS for block in blocks_of(document)
            if block.language == "python"]


def modules_before(block: Block) -> dict[str, str]:
    """The user's modules that the blocks before ``block`` in its document define."""
    earlier = [b for b in blocks_of(block.document) if b.line < block.line]
    return {b.module: b.code for b in earlier if b.module}
