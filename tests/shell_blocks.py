"""Every fenced block of README.md and docs/ (docs/** too), classified: how a test runs it, or the
rule that checks it when it cannot honestly run inside a test. ``tests/test_doc_shell.py`` runs
the shell blocks and fails on any block this module cannot classify.

The classes:

- ``python``: run by ``tests/test_doc_blocks.py`` (conventions in ``tests/doc_blocks.py``);
- ``shell`` (```sh, ```bash, ```shell, ```console): run here, as a user would run it in a
  terminal, with the conventions below;
- ``session``: the README's ```text ``valkey-cli`` session, run step by step by
  ``tests/test_readme.py``;
- ``illustration``: ```text that shows a shape (key names), no command: nothing to run;
- ``queries``: ```promql: every metric it names is one ``echomq.ops.metrics`` exports;
- ``file``: ```toml whose first line is ``# NAME.toml``: a file of the user's, written by
  ``tests/doc_blocks.py`` beside the python blocks after it, which read it.

Shell blocks, as ``tests/test_doc_shell.py`` runs them:

- A block is a terminal session in a fresh directory of its own, with PATH holding the suite's
  venv (``echomq``) and the server's ``valkey-cli`` before the machine's, and no ``ECHOMQ_URL``:
  each line is one command run by bash (``export NAME=VALUE`` lines set the session's
  environment). Every command must exit 0.
- Its server is ``redis://localhost:6379``; the test starts a valkey-server with trafikey and puts
  its port in place of 6379 in the block's text, and a free port in place of 8042 (the
  dashboard's); nothing else of the text is changed. The user's modules are the ``# NAME.py``
  python blocks before it in its document, written beside it (pointed alike).
- ``echomq worker``, ``echomq dashboard`` and ``echomq serve`` run until stopped, in a terminal of
  their own (the docs say so): each is started, waited for until it serves (a live worker in the
  registry, the dashboard's page, the URL ``serve`` prints answering PING), the later lines run
  meanwhile, and at the block's end it gets SIGTERM and must exit 0; its process group is killed
  after whatever happened.
- In a ```console block, ``$ `` starts a command and the lines after it show the shape of its
  output: a word with a digit in it stands for any word, ``...`` for any lines, every other word
  must be printed as shown.
- ``make TARGET`` lines: ``make demo`` runs in the checkout (the venv ``make install`` made must
  be up to date: the test builds nothing). ``make test`` (the whole suite, this test among it),
  ``make bench`` (minutes of a loaded machine), ``make wheel`` and ``make test-wheel`` (the last
  stage of ``make test``; they fetch build requirements from the index) cannot run inside a test:
  ``make -n`` must show the target exists and its recipe runs what the README says (``RECIPES``).
- An HTML comment on the line before a fence says what else the block needs:
  ``<!-- doc-test: dead QUEUE ID -->``: job ID is dead in QUEUE, as the block's text presumes;
  ``<!-- doc-test: cluster-nodes -->``: three cluster-enabled nodes with trafikey, not yet joined,
  in place of ports 7000, 7001 and 7002;
  ``<!-- doc-test: django -->``: Django 6 (Python 3.12+): the block runs in ``make test-django``
  (``.venv-django``); the suite's venv, which has no Django, skips it saying so.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.doc_blocks import ROOT, Block as PythonBlock

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELLS = {"sh", "bash", "shell", "console"}
FENCE = re.compile(
    r"^(?:[ \t]*<!-- doc-test: (?P<needs>.+?) -->\n)?(?P<indent>[ \t]*)```(?P<language>\S*)\n"
    r"(?P<code>.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
NEEDS = {"dead", "cluster-nodes", "django"}
LONG_RUNNING = {"worker", "dashboard", "serve"}
# What ``make -n TARGET`` must show for the targets a test cannot run: the README's words.
RECIPES: dict[str, list[str]] = {
    # "linters, the suite, and what differs by server version on Debian's too", and the wheel's
    # check
    "test": ["ruff check echomq tests", "mypy", "-m pytest -q -p no:cacheprovider",
             "ECHOMQ_VALKEY_SERVER=", ".ci/wheel-check"],
    "bench": ["-m bench"],
    "wheel": ["-m build --outdir"],
    "test-wheel": [".ci/wheel-check"],
}
RUN_TARGETS = {"demo"}


@dataclass(frozen=True)
class Fenced:
    document: Path
    line: int  # the first line of the code
    language: str
    code: str
    needs: str

    @property
    def name(self) -> str:
        inside = self.document.is_relative_to(ROOT)
        where = self.document.relative_to(ROOT) if inside else self.document
        return f"{where}:{self.line}"

    def need(self, kind: str) -> str | None:
        head, _, argument = self.needs.partition(" ")
        return argument if head == kind else None

    def as_python_block(self) -> PythonBlock:
        """The same place as ``tests.doc_blocks`` names it (for its modules_before)."""
        return PythonBlock(self.document, self.line, self.code, self.needs)


def fenced_of(document: Path) -> list[Fenced]:
    text = document.read_text()
    found = []
    for match in FENCE.finditer(text):
        indent = match["indent"]
        lines = match["code"].splitlines(keepends=True)
        code = "".join(line[len(indent):] if line.startswith(indent) else line for line in lines)
        found.append(Fenced(document, text.count("\n", 0, match.start("code")) + 1,
                            match["language"], code, match["needs"] or ""))
    return found


def every_fenced() -> list[Fenced]:
    return [block for document in DOCUMENTS for block in fenced_of(document)]


def commands_of(block: Fenced) -> list[tuple[str, list[str]]]:
    """The block's commands, each with the output it shows (console) or none (sh)."""
    if block.language != "console":
        return [(line, []) for line in block.code.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    steps = re.split(r"^\$ ", block.code, flags=re.MULTILINE)
    assert not steps[0].strip(), f"{block.name}: a console block starts with a $ command"
    return [(step.split("\n", 1)[0], step.rstrip("\n").split("\n")[1:]) for step in steps[1:]]


def argv_of(command: str) -> list[str]:
    """The command's words after any NAME=VALUE prefixes, its comment dropped."""
    words = shlex.split(command, comments=True)
    while words and re.fullmatch(r"\w+=.*", words[0]):
        words.pop(0)
    return words


def long_running(command: str) -> bool:
    argv = argv_of(command)
    return len(argv) >= 2 and argv[0] == "echomq" and argv[1] in LONG_RUNNING


def make_target(command: str) -> str | None:
    argv = argv_of(command)
    return argv[1] if len(argv) >= 2 and argv[0] == "make" else None


def classify(block: Fenced) -> str:
    """The class of ``block`` (see the module's doc); AssertionError when it has none."""
    if block.language == "python":
        return "python"
    if block.language in SHELLS:
        assert block.needs.partition(" ")[0] in NEEDS | {""}, f"{block.name}: {block.needs}"
        for command, _ in commands_of(block):
            target = make_target(command)
            assert target is None or target in RECIPES or target in RUN_TARGETS, (
                f"{block.name}: no rule for `make {target}`")
        return "shell"
    if block.language == "text":
        if block.document.name == "README.md" and block.code.startswith("$ valkey-cli "):
            return "session"
        assert "$ " not in block.code, f"{block.name}: commands in ```text: make it ```console"
        return "illustration"
    if block.language == "promql":
        return "queries"
    if block.language == "toml" and re.match(r"# [\w.-]+\.toml\n", block.code):
        return "file"
    raise AssertionError(f"{block.name}: no test runs a ```{block.language} block")


def output_shape(shown: list[str]) -> re.Pattern[str]:
    """The pattern of output ``shown`` stands for: a word with a digit is any word, ``...`` any
    lines, any other word itself."""
    parts = []
    for line in shown:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        words = [r"\S+" if re.search(r"\d", word) else re.escape(word) for word in line.split()]
        parts.append(r"[ \t]*" + r"\s+".join(words) + r"[ \t]*\n")
    return re.compile("".join(parts))
