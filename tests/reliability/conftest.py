"""Each reliability scenario prints its counts (enqueued, acked, still present, lost); this hook
repeats them in the session's summary so a CI log shows them without ``-s``."""

from __future__ import annotations

import pytest

_COUNTS: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "tests/reliability/" in report.nodeid:
        _COUNTS.extend(line for line in report.capstdout.splitlines() if line.startswith("["))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _COUNTS:
        terminalreporter.section("reliability scenarios: counts")
        for line in _COUNTS:
            terminalreporter.write_line(line)
