"""CI takes packages only from the sources the machine configures (apt's source lists, pip's own
configuration), names no host of its own, and stops in one line when it has none to use."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".ci" / "run"
ARCHIVE = "http://archive.invalid/debian"


def ci(script: str, apt: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash with .ci/run's functions, apt's configuration at ``apt``; with
    ``env`` given, pip's configuration is only what it says."""
    release = apt / "os-release"
    release.write_text('ID=debian\nVERSION_CODENAME="bookworm"\n')
    machine = {k: v for k, v in os.environ.items() if not (env and k.startswith("PIP_"))}
    return subprocess.run(["bash", "-c", f'source "{CI}"; {script}'], capture_output=True,
                          text=True, env={**machine, "APT_DIR": str(apt),
                                          "OS_RELEASE": str(release), **env})


def sources(tmp_path: Path, **files: str) -> Path:
    """An apt configuration directory with these files under sources.list.d."""
    (tmp_path / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (tmp_path / "sources.list.d" / name.replace("_", ".")).write_text(text)
    return tmp_path


def test_ci_names_no_package_host() -> None:
    text = CI.read_text()
    assert re.findall(r"[a-z][a-z0-9+.-]*://[^\s'\"]+", text) == []
    assert re.findall(r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:org|com|net|io)\b", text) == []


def test_the_debian_archive_is_the_one_the_machines_apt_uses(tmp_path: Path) -> None:
    apt = sources(tmp_path, debian_sources=(
        "# a comment\n"
        "Types: deb\nURIs: http://off.invalid/debian\nSuites: bookworm\nComponents: main\n"
        "Enabled: no\n\n"
        "Types: deb\nURIs: http://security.invalid/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        f"Types: deb\nURIs: {ARCHIVE}\nSuites: bookworm bookworm-updates\nComponents: main\n"))
    found = ci("debian_archive", apt)
    assert found.returncode == 0 and found.stdout == ARCHIVE + "\n", found.stderr

    one_line = sources(tmp_path / "one-line", mirror_list=(
        "# deb http://commented.invalid/debian bookworm main\n"
        f"deb [arch=amd64 signed-by=/k.gpg] {ARCHIVE} bookworm main\n"))
    assert ci("debian_archive", one_line).stdout == ARCHIVE + "\n"


def test_backports_come_from_the_machines_archive(tmp_path: Path) -> None:
    apt = sources(tmp_path, debian_sources=f"Types: deb\nURIs: {ARCHIVE}\nSuites: bookworm\n")
    written = ci("write_backports_source", apt)
    assert written.returncode == 0, written.stderr
    backports = (apt / "sources.list.d" / "echomq-backports.sources").read_text()
    assert f"URIs: {ARCHIVE}\nSuites: bookworm-backports\n" in backports


def test_without_a_debian_source_ci_stops_in_one_line(tmp_path: Path) -> None:
    apt = sources(tmp_path, other_sources="Types: deb\nURIs: http://other.invalid/apt\n"
                                          "Suites: nodistro\n")
    stopped = ci("write_backports_source; echo went on", apt)
    assert stopped.returncode == 1 and "went on" not in stopped.stdout
    assert stopped.stderr.count("\n") == 1
    assert stopped.stderr.startswith(".ci/run: no Debian archive in the machine's apt sources")
    assert not (apt / "sources.list.d" / "echomq-backports.sources").exists()


def test_without_a_reachable_package_index_ci_stops_in_one_line(tmp_path: Path) -> None:
    stopped = ci("check_pip_index; echo went on", sources(tmp_path), PIP_CONFIG_FILE=os.devnull,
                 PIP_INDEX_URL="http://127.0.0.1:1/simple")  # loopback, nothing listening
    assert stopped.returncode == 1 and "went on" not in stopped.stdout
    assert stopped.stderr.count("\n") == 1
    assert stopped.stderr.startswith(".ci/run: pip reaches no package index")
