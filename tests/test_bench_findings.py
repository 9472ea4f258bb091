# ruff: noqa: RUF001  (the analysis writes the multiplication sign on purpose)
"""The bench's analysis quotes the run it sits beside: every figure in its prose is rendered from
that run's results.json, or is a declared constant, or names the earlier run it comes from."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import findings
from bench.parking import section as parking_table

ROOT = Path(__file__).resolve().parent.parent
# The results of the full run of 2026-11-30 that docs/bench/RESULTS.md showed beside an analysis
# quoting figures of other runs.
FIXTURE = Path(__file__).resolve().parent / "data" / "bench_results_2026-11-30.json"
NUMBER = re.compile(r"(?<![\w=./-])\d+(?:,\d{3})*(?:\.\d+)?")
NAMES = re.compile(r"`[^`]*`|O\([^)]*\)")  # code spans and complexities are names


@pytest.fixture
def results() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(FIXTURE.read_text())
    return loaded


def numbers(text: str) -> list[str]:
    """The figures of a text: its numbers outside code spans and names (p99, wire=6, O(1))."""
    return NUMBER.findall(NAMES.sub("", text))


def test_the_template_carries_no_figure_of_its_own() -> None:
    template = Path(findings.TEMPLATE).read_text()
    prose = findings.PLACEHOLDER.sub("", template)
    assert numbers(prose) == []


def test_every_figure_of_the_rendered_analysis_is_the_runs_or_declared(
        results: dict[str, Any]) -> None:
    rendered = findings.render(results)
    declared = {n for v, _ in findings.CONSTANTS.values() for n in numbers(v)}
    quoted = {n for v, _ in findings.QUOTED.values() for n in numbers(v)}
    cited = {n for run in findings.RUNS.values() for n in numbers(run.cite())}
    measured = {n for v in findings.figures(results).values() for n in numbers(v)}
    stray = [n for n in numbers(rendered) if n not in declared | quoted | cited | measured]
    assert stray == []
    # The figures the old analysis took from other runs are this run's now.
    assert "96,511 jobs/s" in rendered and "16,139 calls/s" in rendered
    assert "96,500" not in rendered and "16,100" not in rendered


def test_the_analysis_follows_the_results_it_is_rendered_from(results: dict[str, Any]) -> None:
    slower = copy.deepcopy(results)
    slower["workers"]["single"]["6"]["rate"] = 48_000.0
    before, after = findings.render(results), findings.render(slower)
    assert "at 96,511 jobs/s" in before and "6.0×, over the 4× target" in before
    assert "at 48,000 jobs/s" in after and "3.0×, under the 4× target" in after
    assert "96,511" not in after


def test_a_quoted_figure_names_the_run_it_comes_from(results: dict[str, Any]) -> None:
    rendered = findings.render(results)
    for run in findings.RUNS.values():
        assert run.cite() in rendered
    known = findings.values(results)
    with pytest.raises(ValueError, match="without citing"):
        findings.render_paragraph("It made {profiled_settles} settle calls.", known, results)
    with pytest.raises(ValueError, match="unknown figure"):
        findings.render_paragraph("It made {settles_typed_by_hand} calls.", known, results)


def test_the_quoted_runs_commits_are_in_the_history() -> None:
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True)
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("not a full git checkout")
    for run in findings.RUNS.values():
        found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e",
                                f"{run.commit}^{{commit}}"], capture_output=True)
        assert found.returncode == 0, run


def test_a_run_of_some_phases_renders_the_paragraphs_it_measured(
        results: dict[str, Any]) -> None:
    parking = {"idle": {"window_s": 65.0, "commands": 20, "per_consumer_per_s": 0.077,
                        "blpop": 4},
               "recovery": {"pending": 200_000, "after_expiry_ms": 70, "recovered": 5_000,
                            "recover_s": 0.05, "rate_per_s": 100_000.0},
               "lease_back": {"parked": 50, "lease_ms": 1_000, "bound_ms": 1_000,
                              "after_expiry_ms": 312},
               "wake_one": {"enqueues": 10, "empty_claims_per_enqueue": 1.0, "jobs_taken": 10,
                            "blpop_per_enqueue": 2.0}}
    only_parking = {"mode": "full", "env": results["env"], "parking": {"5": parking,
                                                                       "6": parking}}
    rendered = findings.render(only_parking)
    assert "run again 312 ms (wire=5) and 312 ms (wire=6)" in rendered
    assert "One consumer" not in rendered and "valkey-benchmark" not in rendered
    assert "| 312 ms (50 parked) |" in parking_table(only_parking["parking"])


def test_the_published_analysis_is_rendered_from_the_published_results() -> None:
    published = (ROOT / "docs" / "bench" / "RESULTS.md").read_text()
    run = json.loads((ROOT / "docs" / "bench" / "results.json").read_text())
    analysis = findings.render(run)
    assert analysis.split("\n", 1)[0] in published
    assert analysis in published


def test_a_cost_lost_in_the_noise_is_not_called_fixed(results: dict[str, Any]) -> None:
    rows = results["lanes"]["rows"]
    for row in rows:
        row["lane_claim_limits/5"] = row["lane_claim/5"] + 3.0
    assert findings.FIGURES["knob_cost"](results) == "costs a fixed 3.0 µs more at every size"
    rows[0]["lane_claim_limits/5"] = rows[0]["lane_claim/5"] - 2.5
    noisy = findings.FIGURES["knob_cost"](results)
    assert "no fixed amount" in noisy and "from -2.5 to 3.0 µs" in noisy
