"""A command that starts processes of its own (a worker supervisor, a Django worker, a shell
block's command), started in a process group of its own and ended with every process of that
group: the suite's one way of doing it, so no grandchild outlives a test however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any


def end_group(process: subprocess.Popen[Any], grace_s: float) -> int | None:
    """SIGTERM to ``process``'s group, up to ``grace_s`` for ``process`` to exit, then SIGKILL to
    whatever is left of the group. The exit status SIGTERM led to, or None when it had to be
    killed."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def group(argv: Sequence[str], grace_s: float, **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """``argv`` running in a group of its own for the time of the block (``end_group`` after)."""
    process = subprocess.Popen(argv, start_new_session=True, **popen)
    try:
        yield process
    finally:
        end_group(process, grace_s)
