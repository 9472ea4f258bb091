"""Directories named by a pid: the next one made removes those whose process is gone, and
nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from echomq.ops.piddirs import pid_directory, remove_orphans


def gone_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_only_the_directories_of_ended_processes_are_removed(tmp_path: Path) -> None:
    dead, alive = gone_pid(), os.getpid()
    orphan = tmp_path / f"m-{dead}-abc"
    kept = [tmp_path / f"m-{alive}-abc",  # its process runs
            tmp_path / "m-12345678",  # no pid in the name (a random suffix, all digits)
            tmp_path / f"other-{dead}-abc"]  # another prefix
    for path in [orphan, *kept]:
        path.mkdir()
    (orphan / "counts.db").write_bytes(b"x")
    (tmp_path / f"m-{dead}-file").write_bytes(b"not a directory")
    assert remove_orphans(str(tmp_path), "m-") == [str(orphan)]
    assert not orphan.exists()
    assert all(path.is_dir() for path in kept)
    assert (tmp_path / f"m-{dead}-file").exists()


def test_a_new_directory_is_named_by_its_pid_and_clears_the_orphans_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    orphan = tmp_path / f"m-{gone_pid()}-abc"
    orphan.mkdir()
    made = Path(pid_directory("m-"))
    assert made.parent == tmp_path and made.name.startswith(f"m-{os.getpid()}-")
    assert made.is_dir() and not orphan.exists()
