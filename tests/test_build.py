"""How the project builds and installs: a user's build takes their compiler and does not fail on
warnings; the project's own builds do. CI installs Valkey without starting (or killing) any
server of the machine's."""

from __future__ import annotations

import os
import runpy
import subprocess
from pathlib import Path

import pytest
import setuptools

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "native"
CI = ROOT / ".ci" / "run"


def dry_make(*args: str, env: dict[str, str] | None = None) -> str:
    """The commands ``make -C native`` would run to rebuild trafikey.so (nothing is built)."""
    result = subprocess.run(["make", "-s", "-n", "-B", "-C", str(NATIVE), *args],
                            env={**os.environ, **(env or {})}, capture_output=True, text=True,
                            check=True)
    return result.stdout


def test_the_makefile_takes_the_environments_compiler_and_errs_on_warnings() -> None:
    assert dry_make("trafikey.so", env={"CC": "fake-cc"}).startswith("fake-cc ")
    assert "-Werror" in dry_make("trafikey.so")
    assert "-Werror" not in dry_make("trafikey.so", "WERROR=")


@pytest.fixture
def make_command(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setattr(setuptools, "setup", lambda **_: None)
    return runpy.run_path(str(ROOT / "setup.py"))["make_command"]


def test_a_users_pip_build_does_not_fail_on_warnings(make_command: object,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert callable(make_command)
    monkeypatch.delenv("ECHOMQ_WERROR", raising=False)
    command = make_command()
    assert command[:2] == ["make", "-C"]
    assert "-Werror" not in dry_make(*command[3:])
    monkeypatch.setenv("ECHOMQ_WERROR", "1")  # what `make install` sets
    assert "-Werror" in dry_make(*make_command()[3:])


def test_the_projects_install_builds_strictly() -> None:
    assert 'ECHOMQ_WERROR=1 $(PY) -m pip install' in (ROOT / "Makefile").read_text()


def ci(script: str, policy: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash with .ci/run's functions, its policy-rc.d at ``policy``."""
    return subprocess.run(["bash", "-c", f'source "{CI}"; {script}'], capture_output=True,
                          text=True, env={**os.environ, "POLICY_RC_D": str(policy)})


def test_ci_kills_no_process_by_name() -> None:
    text = CI.read_text()
    assert "pkill" not in text and "killall" not in text


def test_ci_refuses_service_starts_during_the_install_only(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    during = ci("""without_service_starts sh -c '"$POLICY_RC_D" valkey-server start; echo $?'""",
                policy)
    assert during.returncode == 0 and during.stdout.strip() == "101", during.stderr
    assert not policy.exists()  # there was none before

    policy.write_text("#!/bin/sh\nexit 0\n")
    failed = ci("without_service_starts false", policy)
    assert failed.returncode == 1
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"  # the machine's own, back in place


def make_test_django(ci: str | None) -> subprocess.CompletedProcess[str]:
    """``make test-django`` on a machine with no Python 3.12 or newer, in CI or not."""
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT), "test-django",
                           "DJANGO_PYTHON="], env=env, capture_output=True, text=True)


def test_without_python_312_the_django_stage_is_skipped_loudly_outside_ci() -> None:
    outside = make_test_django(None)
    assert outside.returncode == 0, outside.stderr
    assert outside.stdout.startswith("*** test-django SKIPPED: no Python 3.12 or newer")
    in_ci = make_test_django("true")
    assert in_ci.returncode != 0
    assert in_ci.stdout.startswith("test-django: no Python 3.12 or newer")


def test_ci_makes_sure_of_a_python_for_django() -> None:
    assert "install_django_python\n" in CI.read_text().split("main() {", 1)[1]


def test_the_distribution_lists_every_package_of_the_tree() -> None:
    """A subpackage missing from pyproject's list is missing from every wheel (``echomq worker``
    once failed from one that lacked ``echomq.worker``): the list is the tree's packages, and the
    Lua scripts' folders (the scripts and their includes), whose files are data."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    packages = {".".join(init.parent.relative_to(ROOT).parts)
                for init in (ROOT / "echomq").rglob("__init__.py")}
    assert listed == packages | {"echomq.lua", "echomq.lua.include"}
