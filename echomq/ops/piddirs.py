"""Temporary directories named by the pid of the process that made them, so that the next one
made removes those whose process is gone: a supervisor killed by SIGKILL cannot remove its own.

A directory is ``<prefix><pid>-<random>`` in the temporary directory (``TMPDIR``). Only this
user's directories are removed, and only once no process has their pid: a pid reused by a live
process keeps its directory until a later start finds that process gone too.
"""

from __future__ import annotations

import os
import shutil
import tempfile

__all__ = ["pid_directory", "remove_orphans"]


def pid_directory(prefix: str) -> str:
    """A new directory named by this process's pid, made after removing the orphans of
    ``prefix`` (directories whose process is gone)."""
    parent = tempfile.gettempdir()
    remove_orphans(parent, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)


def remove_orphans(parent: str, prefix: str) -> list[str]:
    """Remove this user's ``<prefix><pid>-…`` directories in ``parent`` whose process is gone;
    the paths removed."""
    removed = []
    with os.scandir(parent) as entries:
        for entry in entries:
            pid = _pid_of(entry.name, prefix)
            if pid is None or _alive(pid) or not _ours(entry):
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _pid_of(name: str, prefix: str) -> int | None:
    """The pid in a name ``<prefix><pid>-<random>``; None for any other name."""
    if not name.startswith(prefix):
        return None
    digits, separator, _ = name[len(prefix):].partition("-")
    return int(digits) if separator and digits.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _ours(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False) and \
            entry.stat(follow_symlinks=False).st_uid == os.getuid()
    except OSError:
        return False
