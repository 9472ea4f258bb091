"""Run the seeded bugs of catalog.py against the test-quick selection.

    python -m tests.mutants.run [--only NAME ...] [--hinted] [--no-baseline] [--report PATH]
        [--timeout S] -- <pytest args>

The checkout is copied once to a scratch directory (the checkout itself is never edited); each
mutant's edits are applied there (after a Lua edit the script-size table of docs/PROTOCOL.md is
rewritten, as after any script change), the module rebuilt when a file under native/ changed,
the pytest arguments run with ``-x`` (a killed mutant stops at its first failure) under a
timeout, and the files and built modules put back. With ``--hinted`` the files of the selection
the catalog names for a mutant run first, in one process: a failure there kills it as surely,
sooner; the whole selection runs when they pass. The unmutated copy runs first: it must pass. The
scratch directory is removed however the run ends (Ctrl-C or SIGTERM included). The report
(killed, survivors, the first failing test of each killed one) is printed and written to
``--report`` (default tests/mutants/REPORT.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.mutants.catalog import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parents[2]
# Not copied: virtual environments, git's data, build output, caches.
SKIPPED = {".git", ".venv", ".venv-lowest", ".venv-django", "build", "dist", ".env",
           "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"}
# What a rebuild of native/ writes: kept and put back after each mutant that touched native/.
BUILT = ("native/trafikey.so", "echomq/trafikey.so")
SIZES_DOC = "docs/PROTOCOL.md"  # its table of each script's size (echomq.engine.script_sizes)
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    verdict: str  # "killed", "survived", "timeout", "broken" (its edit or build failed)
    detail: str  # the first failing test, or why broken
    seconds: float


class Stopped(Exception):
    """SIGTERM, turned into an exception so the scratch directory is removed."""


def _stop(signum: int, frame: object) -> None:
    raise Stopped(f"signal {signum}")


@contextmanager
def scratch_copy() -> Iterator[Path]:
    """A copy of the checkout (sources and built modules) in a temporary directory."""
    parent = Path(tempfile.mkdtemp(prefix="echomq-mutants-"))
    try:
        tree = parent / "tree"
        shutil.copytree(ROOT, tree, ignore=lambda _d, names: [n for n in names if n in SKIPPED],
                        symlinks=True)
        yield tree
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def check_imports_from(tree: Path) -> None:
    """The copy's echomq is the one its tests import (the editable install points elsewhere)."""
    found = subprocess.run([python(), "-c", "import echomq; print(echomq.__file__)"], cwd=tree,
                           check=True, capture_output=True, text=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the scratch copy imports echomq from {found}, not from {tree}")


def apply(tree: Path, mutant: Mutant) -> dict[Path, str]:
    """Apply the mutant's edits; the original text of each file it changed."""
    originals: dict[Path, str] = {}
    for edit in mutant.edits:
        path = tree / edit.path
        text = originals.get(path) or path.read_text()
        originals.setdefault(path, text)
        current = path.read_text()
        if current.count(edit.old) != 1:
            restore(originals)
            raise ValueError(f"{edit.path}: the text to replace occurs "
                             f"{current.count(edit.old)} times, not once")
        path.write_text(current.replace(edit.old, edit.new))
    return originals


def restore(originals: dict[Path, str]) -> None:
    for path, text in originals.items():
        path.write_text(text)


def touches_lua(mutant: Mutant) -> bool:
    return any(edit.path.startswith("echomq/lua/") for edit in mutant.edits)


def touches_native(mutant: Mutant) -> bool:
    return any(edit.path.startswith("native/") for edit in mutant.edits)


def touches_core(mutant: Mutant) -> bool:
    """The pure C core is also built into the cffi binding echomq._core."""
    return any(edit.path.startswith("native/emq_core") for edit in mutant.edits)


def rebuild(tree: Path, core: bool) -> str | None:
    """Build the mutated module (warnings allowed: a seeded bug may leave a variable unused);
    the compiler's complaint, or None."""
    steps = [["make", "-s", "-C", ".", "trafikey.so", "WERROR="]]
    if core:  # echomq._core, by native/build_core.py's builder, in native/ (away from the
        # checkout's pyproject.toml, which the builder's setuptools would read)
        steps.append([python(), "-c", "from build_core import ffibuilder; "
                      "ffibuilder.compile(tmpdir='.', target='_core.abi3.so')"])
    for step in steps:
        done = subprocess.run(step, cwd=tree / "native", capture_output=True, text=True)
        if done.returncode != 0:
            return (done.stdout + done.stderr).strip()[-400:]
    if core:
        built = tree / "native" / "echomq" / "_core.abi3.so"
        shutil.copy2(built, tree / "echomq" / "_core.abi3.so")
        shutil.rmtree(tree / "native" / "echomq")
    return None


def built_files(tree: Path) -> dict[Path, bytes]:
    names = [*BUILT, *(str(p.relative_to(tree)) for p in (tree / "echomq").glob("_core*.so"))]
    return {tree / name: (tree / name).read_bytes() for name in names if (tree / name).exists()}


def run_tests(tree: Path, pytest_args: Sequence[str], timeout_s: float) -> tuple[str, str]:
    """Run pytest with -x in the copy: ("passed" | "failed" | "timeout", first failing test)."""
    command = [python(), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *pytest_args]
    with subprocess.Popen(command, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True) as child:
        try:
            out, _ = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            return "timeout", f"over {timeout_s:.0f} s"
        except BaseException:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise
    if child.returncode == 0:
        return "passed", ""
    failed = FAILED.findall(out)
    return "failed", failed[0] if failed else out.strip().splitlines()[-1] if out.strip() else ""


def hinted_args(mutant: Mutant, pytest_args: Sequence[str]) -> list[str]:
    """The mutant's hinted files that are in the selection, in one process: a test of the
    selection that fails there kills it as surely as in the whole run, sooner."""
    return [hint for hint in mutant.hints if hint in pytest_args]


def run_mutant(tree: Path, mutant: Mutant, built: dict[Path, bytes], pytest_args: Sequence[str],
               timeout_s: float, hints: bool) -> Outcome:
    start = time.monotonic()
    try:
        originals = apply(tree, mutant)
    except ValueError as exc:
        return Outcome(mutant, "broken", str(exc), 0.0)
    if touches_lua(mutant):  # the sizes table follows the scripts, as after any script change
        originals[tree / SIZES_DOC] = (tree / SIZES_DOC).read_text()
        subprocess.run([python(), "-m", "echomq.engine.script_sizes"], cwd=tree, check=True,
                       capture_output=True)
    try:
        problem = rebuild(tree, touches_core(mutant)) if touches_native(mutant) else None
        if problem is not None:
            return Outcome(mutant, "broken", f"build failed: {problem}", time.monotonic() - start)
        result, first = "passed", ""
        hinted = hinted_args(mutant, pytest_args) if hints else []
        if hinted:
            result, first = run_tests(tree, hinted, timeout_s)
        if result == "passed":
            result, first = run_tests(tree, pytest_args, timeout_s)
    finally:
        restore(originals)
        if touches_native(mutant):
            for path, data in built.items():
                path.write_bytes(data)
    verdict = {"passed": "survived", "failed": "killed", "timeout": "timeout"}[result]
    return Outcome(mutant, verdict, first, time.monotonic() - start)


def report(outcomes: Sequence[Outcome], pytest_args: Sequence[str], planned: int = 0) -> str:
    killed = [o for o in outcomes if o.verdict == "killed"]
    judged = [o for o in outcomes if o.verdict in ("killed", "survived")]
    share = 100 * len(killed) / len(judged) if judged else 0.0
    lines = [
        "# Mutation check",
        "",
        f"{len(killed)} of {len(judged)} seeded bugs killed ({share:.0f} %) by "
        f"`pytest -x {' '.join(pytest_args)}`.",
        "",
        "| mutant | area | what it breaks | verdict | first failing test | s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        detail = " ".join(o.detail.split()).replace("|", "\\|")  # one line of the table
        lines.append(f"| {o.mutant.name} | {o.mutant.area} | {o.mutant.description} | "
                     f"{o.verdict} | {detail} | {o.seconds:.0f} |")
    survivors = [o.mutant.name for o in outcomes if o.verdict != "killed"]
    lines += ["", f"Not killed: {', '.join(survivors) if survivors else 'none'}."]
    if planned > len(outcomes):
        lines += ["", f"Run so far: {len(outcomes)} of {planned} mutants."]
    lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1] if __doc__ else None)
    parser.add_argument("--only", nargs="*", default=None, help="mutant names to run")
    parser.add_argument("--report", default=str(ROOT / "tests" / "mutants" / "REPORT.md"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the run of the unmutated copy (known to pass)")
    parser.add_argument("--hinted", action="store_true",
                        help="run each mutant's hinted files first (the whole selection only "
                             "when they pass)")
    parser.add_argument("pytest_args", nargs="+", help="the test selection (after --)")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MUTANTS}
    unknown = set(args.only or ()) - set(by_name)
    if unknown:
        parser.error(f"no such mutants: {', '.join(sorted(unknown))}")
    chosen = MUTANTS if args.only is None else [by_name[name] for name in args.only]
    signal.signal(signal.SIGTERM, _stop)
    try:
        outcomes = run_all(chosen, args.pytest_args, args.timeout, not args.no_baseline,
                           Path(args.report), args.hinted)
    except (KeyboardInterrupt, Stopped):
        print("stopped; the scratch copy is removed, the checkout was never edited",
              file=sys.stderr)
        return 130
    if outcomes is None:
        return 2
    print(report(outcomes, args.pytest_args))
    return 0


def passes_unmutated(tree: Path, pytest_args: Sequence[str], timeout_s: float) -> bool:
    start = time.monotonic()
    result, first = run_tests(tree, pytest_args, timeout_s)
    if result != "passed":
        print(f"the unmutated copy does not pass ({result}: {first})", file=sys.stderr)
        return False
    print(f"the unmutated copy passes ({time.monotonic() - start:.0f} s)", flush=True)
    return True


def run_all(chosen: Sequence[Mutant], pytest_args: Sequence[str], timeout_s: float,
            baseline: bool, report_path: Path, hints: bool) -> list[Outcome] | None:
    """Each mutant's outcome, in order, the report rewritten after each; None when the
    unmutated copy fails."""
    outcomes: list[Outcome] = []
    with scratch_copy() as tree:
        check_imports_from(tree)
        if baseline and not passes_unmutated(tree, pytest_args, timeout_s):
            return None
        built = built_files(tree)
        for n, mutant in enumerate(chosen, 1):
            outcome = run_mutant(tree, mutant, built, pytest_args, timeout_s, hints)
            outcomes.append(outcome)
            print(f"[{n}/{len(chosen)}] {mutant.name}: {outcome.verdict} {outcome.detail} "
                  f"({outcome.seconds:.0f} s)", flush=True)
            report_path.write_text(report(outcomes, pytest_args, len(chosen)))
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
