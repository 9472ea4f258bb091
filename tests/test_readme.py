"""The README's valkey-cli session prints what it shows (its python blocks run in
tests/test_doc_blocks.py)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from echomq.embedded import EmbeddedValkey

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def valkey_cli(server: EmbeddedValkey) -> str:
    beside = Path(server.server).with_name("valkey-cli")
    found = str(beside) if beside.is_file() else shutil.which("valkey-cli")
    if found is None:
        pytest.skip("no valkey-cli beside the server or on PATH")
    return found


def fenced_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_the_valkey_cli_session_prints_what_the_readme_shows(valkey: EmbeddedValkey) -> None:
    valkey.client().flushall()
    cli = valkey_cli(valkey)
    (session,) = fenced_blocks("text")
    steps = re.split(r"^\$ ", session, flags=re.MULTILINE)[1:]
    assert len(steps) >= 4
    for step in steps:
        command, *shown = step.rstrip("\n").split("\n")
        argv = shlex.split(command)
        assert argv[0] == "valkey-cli"
        run = [cli, "--no-raw", "-p", str(valkey.port), *argv[1:]]
        printed = subprocess.run(run, capture_output=True, text=True, check=True).stdout
        assert printed.rstrip("\n").split("\n") == shown, command
    valkey.client().flushall()

