# ruff: noqa: RUF001  (the analysis writes the multiplication sign on purpose)
"""The analysis of RESULTS.md, rendered from the results of the run it sits beside.

``bench/FINDINGS.md`` is a template whose prose carries no figure of its own. A placeholder
``{name}`` is filled from one of three tables:

- ``FIGURES``: computed from the run's results.json (a phase this run left out leaves its
  figures out, and every paragraph that needs one is left out with them);
- ``CONSTANTS``: what is not measured — a target, a default of the code, a fact of the id's
  design — each with what it is;
- ``QUOTED``: a figure of an earlier run that results.json does not hold (a profile); a
  paragraph that quotes one names that run with ``{run:key}`` (``RUNS``: what ran, its date
  and the commit it was recorded with), and rendering refuses a paragraph that does not.

A paragraph with no figure of this run names the phase it speaks of with ``{phase:name}``
(rendered as nothing), so it is left out of a run without that phase.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.e2e import BATCH, BATCH_REPS
from echomq.consumer.loop import PREFETCH

TEMPLATE = os.path.join(os.path.dirname(__file__), "FINDINGS.md")
PLACEHOLDER = re.compile(r"\{(run:|phase:)?([a-z0-9_]+)\}")
CODE = re.compile(r"(`[^`]*`)")

# The targets of the targets table (bench.targets reads them from here too).
TARGETS = {"consumer_rate": 40_000, "over_get_loop": 4.0, "over_dramatiq": 15.0,
           "wire6_over_wire5": 1.6, "server_cpu": 0.35, "p99_ms": 2.0,
           "produce_batch": 150_000, "over_rq_batch": 10.0, "over_set_pipeline": 1.0,
           "memory": 210, "memory_stretch": 200,
           "native_over_lua": 0.5, "native_over_bare": 1.3}

ID_PREFIX = "JOB:"
ID_MS_BITS = 45  # echomq.queue.ids: the id's time part
ID_BITS_PER_CHAR = 6  # its base-64 alphabet
COLLISION_IDS_PER_S = 1_000_000  # the rate the id's collision figures are stated at


@dataclass(frozen=True)
class Run:
    """An earlier run whose figures the analysis quotes: what ran, when, on which commit."""

    what: str
    date: str
    commit: str

    def cite(self) -> str:
        return f"({self.what}, recorded {self.date} with commit {self.commit})"


RUNS = {
    "profile_consumer": Run("cProfile, `python -m bench.profile_consumer`, wire=6",
                            "2026-11-30", "a6d4eee"),
    "profile_native": Run("perf, `python -m bench.profile_native`", "2026-11-30", "a6d4eee"),
    "earlier_get_loop": Run("`make bench`, a GET loop whose best round was faster", "2026-11-30",
                            "a6d4eee"),
}

# name: (value, the run of RUNS it comes from)
QUOTED = {
    "profiled_jobs": ("50,000", "profile_consumer"),
    "profiled_settles": ("792", "profile_consumer"),
    "jobs_per_settle": ("63", "profile_consumer"),
    "python_us_per_job": ("4–5", "profile_consumer"),
    "decimal_share": ("0.5 %", "profile_native"),
    "report_cut": ("0.25 %", "profile_native"),
    "earlier_get_loop": ("40,000", "earlier_get_loop"),
    "earlier_over_get_loop": ("2.7", "earlier_get_loop"),
}


def _collisions_per_year(random_bits: int) -> float:
    """Expected id collisions a year at ``COLLISION_IDS_PER_S`` (the ids of one ms compete)."""
    per_ms = COLLISION_IDS_PER_S / 1000
    return float(per_ms * per_ms / 2 / 2**random_bits * 1000 * 3600 * 24 * 365)


def _random_bits(id_bytes: int) -> int:
    return (id_bytes - len(ID_PREFIX)) * ID_BITS_PER_CHAR - ID_MS_BITS


CONSTANTS: dict[str, tuple[str, str]] = {
    "target_consumer_rate": (f"{TARGETS['consumer_rate']:,}", "target"),
    "target_over_get_loop": (f"{TARGETS['over_get_loop']:.0f}", "target"),
    "target_server_cpu": (f"{TARGETS['server_cpu']:.2f}", "target"),
    "target_p99_ms": (f"{TARGETS['p99_ms']:.0f}", "target"),
    "target_produce_batch": (f"{TARGETS['produce_batch']:,}", "target"),
    "target_over_rq_batch": (f"{TARGETS['over_rq_batch']:.0f}", "target"),
    "target_memory": (f"{TARGETS['memory']}", "target"),
    "target_memory_stretch": (f"{TARGETS['memory_stretch']}", "target"),
    "target_native_over_bare": (f"{TARGETS['native_over_bare']:.1f}", "target"),
    "prefetch": (f"{PREFETCH}", "echomq's default prefetch"),
    "batch": (f"{BATCH}", "the bench's enqueue_many batch"),
    "batch_reps": (f"{BATCH_REPS}", "the bench's timed runs of a batched produce"),
    "id_prefix_chars": (f"{len(ID_PREFIX)}", "the id's prefix"),
    "ms_bits": (f"{ID_MS_BITS}", "the id's time part"),
    "collision_rate": (f"{COLLISION_IDS_PER_S:,}", "the rate the collision figures assume"),
    "short_ids": ("19", "the id length the collision figures are stated for"),
    "size_class": ("16", "the allocator's size classes"),
}


def _w(results: dict[str, Any], wire: str) -> dict[str, Any]:
    single: dict[str, Any] = results["workers"]["single"][wire]
    return single


def _verdict(ok: bool, ratio: float, target: float) -> str:
    if ok:
        return "met"
    return "missed, narrowly" if abs(ratio - target) <= 0.1 * target else "missed"


def _peers(results: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in results["e2e"].items()
            if "error" not in v and not k.startswith("echomq")}


def _ours_e2e(results: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in results["e2e"].items() if "error" not in v and k.startswith("echomq")}


def _busy(row: dict[str, Any]) -> float:
    return float(row["rate"] * row["server_cpu_us_per_job"] / 1e4)


def _cores(results: dict[str, Any]) -> int:
    return int(results["env"]["machine"].split(", ")[-1].split()[0])


def _saturated(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [r for r in results["workers"]["scaling"] if r["consumers"] == _cores(results)]
    if not rows:
        raise KeyError("no K equal to the cores")
    return rows


def _top_rate(results: dict[str, Any], wire: int) -> float:
    return float(max(r["rate"] for r in results["workers"]["scaling"]
                     if int(r["wire"]) == wire))


def _id_groups(results: dict[str, Any]) -> str:
    """Runs of id lengths that cost the same (within a quarter of a size class)."""
    groups: list[list[dict[str, Any]]] = []
    for row in results["memory"]["id_lengths"]:
        if groups and abs(row["pending_job"] - groups[-1][0]["pending_job"]) < 4:
            groups[-1].append(row)
        else:
            groups.append([row])
    return ", ".join(f"{g[0]['id_bytes']}–{g[-1]['id_bytes']} bytes {g[0]['pending_job']:.0f} B"
                     if len(g) > 1 else f"{g[0]['id_bytes']} bytes {g[0]['pending_job']:.0f} B"
                     for g in groups)


def _id_cost(results: dict[str, Any], id_bytes: int) -> float:
    return float(next(r["pending_job"] for r in results["memory"]["id_lengths"]
                      if r["id_bytes"] == id_bytes))


def _renamed(results: dict[str, Any]) -> bool:
    """Whether the run measured the one-letter row names (its enqueue writes them), with the
    earlier release's names beside them; an older run measured the reverse."""
    return "row_old_names" in results["memory"]["breakdown"]


def _names_saving(results: dict[str, Any]) -> float:
    """What the earlier release's long field names cost a row more than the one-letter ones (the
    row with its attempts, as the earlier release wrote it)."""
    parts = results["memory"]["breakdown"]
    if _renamed(results):
        return float(parts["row_old_names"] - parts["row_with_attempts"])
    return float(parts["row"] - parts["row_short_names"])


def _job_with(results: dict[str, Any], long_names: bool) -> float:
    """A pending job's cost in the earlier release's row (long names), or in this one's."""
    parts = results["memory"]["breakdown"]
    pending = float(parts["pending_job"])
    if not _renamed(results):  # a run of the earlier release: its job, and the names' saving
        return pending if long_names else pending - _names_saving(results)
    return pending + float(parts["row_old_names"] - parts["row"]) if long_names else pending


def _no_attempts(results: dict[str, Any]) -> str:
    parts = results["memory"]["breakdown"]
    if "row_with_attempts" not in parts:
        return "was not measured in this run"
    return (f"measures {parts['row']:.0f} B a row without it, {parts['row_with_attempts']:.0f} B "
            "with it")


def _tombstone_expiry(results: dict[str, Any]) -> float:
    tombstone = results["memory"]["tombstone"]
    return float(tombstone["tombstone"] - tombstone["without_expiry"])


def _cost(results: dict[str, Any], name: str, key: str) -> float:
    return float(results["cost"]["table"][name][key])


def _lua_over_native(results: dict[str, Any]) -> list[float]:
    return sorted(row["lua"] / row["native"] for row in results["cost"]["table"].values())


def _knob_cost(results: dict[str, Any]) -> list[float]:
    return sorted(r["lane_claim_limits/5"] - r["lane_claim/5"] for r in results["lanes"]["rows"])


def _task_overheads(results: dict[str, Any]) -> list[float]:
    return sorted(100 * ((f["enqueue task"] + f["work task"]) / (f["enqueue raw"] + f["work raw"])
                         - 1) for f in results["tasks"].values())


def _cpu_ratio(results: dict[str, Any]) -> float:
    return float(_w(results, "6")["server_cpu_us_per_job"]
                 / _w(results, "5")["server_cpu_us_per_job"])


def _over_rq_batch(results: dict[str, Any]) -> float:
    e2e = results["e2e"]
    return float(e2e["echomq wire=6"]["produce_batch"] / e2e["rq (SimpleWorker)"]["produce_batch"])


def _over_set_pipeline(results: dict[str, Any]) -> float:
    figures = results["e2e"]["echomq wire=6"]
    return float(figures["produce_batch"] / figures["set_pipeline"])


def _growth(rows: list[dict[str, Any]], key: str) -> float:
    """The last row's figure over the first's."""
    return float(rows[-1][key] / rows[0][key])


def _parking(results: dict[str, Any], wire: str) -> dict[str, Any]:
    row: dict[str, Any] = results["parking"][wire]
    return row


def _lease_back_ms(results: dict[str, Any], wire: str) -> str:
    ms = _parking(results, wire)["lease_back"]["after_expiry_ms"]
    return "never" if ms is None else f"{ms:,}"


def _range(values: list[float], fmt: str) -> str:
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    if lo == hi:
        return lo
    # an en dash after a minus sign reads as a second minus: spell a range that crosses zero out
    return f"{lo} to {hi}" if min(values) < 0 else f"{lo}–{hi}"


def _knob_sentence(results: dict[str, Any]) -> str:
    """What the lane knobs cost a claim, as the run measured it: a fixed amount when every size
    paid more, else a difference lost in the run's noise (some sizes measured it cheaper)."""
    costs = _knob_cost(results)
    if min(costs) > 0:
        return f"costs a fixed {_range(costs, '.1f')} µs more at every size"
    return (f"costs no fixed amount this run could tell apart from its noise: "
            f"from {_range(costs, '.1f')} µs beside the claim without knobs, size by size")


Figure = Callable[[dict[str, Any]], str]
FIGURES: dict[str, Figure] = {
    # the machine and the run
    "cores": lambda r: f"{_cores(r)}",
    "get_loop_runs": lambda r: ", ".join(f"{x:,.0f}" for x in r["workers"]["get_loops"]),
    # one consumer
    "consumer_rate": lambda r: f"{_w(r, '6')['rate']:,.0f}",
    "consumer_us_per_job": lambda r: f"{1e6 / _w(r, '6')['rate']:.1f}",
    "server_cpu_6": lambda r: f"{_w(r, '6')['server_cpu_us_per_job']:.1f}",
    "server_cpu_5": lambda r: f"{_w(r, '5')['server_cpu_us_per_job']:.1f}",
    "get_loop": lambda r: f"{r['workers']['get_loop']:,.0f}",
    "over_get_loop": lambda r: f"{_w(r, '6')['rate'] / r['workers']['get_loop']:.1f}",
    "over_get_loop_side": lambda r: ("over" if _w(r, '6')['rate'] / r['workers']['get_loop']
                                     >= TARGETS["over_get_loop"] else "under"),
    "over_dramatiq": lambda r: f"{_w(r, '6')['rate'] / r['e2e']['dramatiq']['consume']:.0f}",
    "target_us_per_job": lambda r: (
        f"{1e6 / (TARGETS['over_get_loop'] * r['workers']['get_loop']):.1f}"),
    # server CPU per job
    "cpu_ratio": lambda r: f"{_cpu_ratio(r):.2f}",
    "cpu_verdict": lambda r: _verdict(_cpu_ratio(r) <= TARGETS["server_cpu"], _cpu_ratio(r),
                                      TARGETS["server_cpu"]),
    "lua_over_native": lambda r: _range(_lua_over_native(r), ".1f"),
    "claim_native": lambda r: f"{_cost(r, 'claim', 'native'):.1f}",
    "ack_native": lambda r: f"{_cost(r, 'ack', 'native'):.1f}",
    "saturated_k": lambda r: f"{_saturated(r)[0]['consumers']}",
    "saturated_busy": lambda r: _range([_busy(row) for row in _saturated(r)], ".0f"),
    "top_rate_6": lambda r: f"{_top_rate(r, 6):,.0f}",
    "top_rate_5": lambda r: f"{_top_rate(r, 5):,.0f}",
    # latency to a parked worker
    "p50_6": lambda r: f"{r['workers']['latency']['6']['p50_ms']:.2f}",
    "p50_5": lambda r: f"{r['workers']['latency']['5']['p50_ms']:.2f}",
    "p99_6": lambda r: f"{r['workers']['latency']['6']['p99_ms']:.2f}",
    "p99_5": lambda r: f"{r['workers']['latency']['5']['p99_ms']:.2f}",
    "max_6": lambda r: f"{r['workers']['latency']['6']['max_ms']:.2f}",
    "max_5": lambda r: f"{r['workers']['latency']['5']['max_ms']:.2f}",
    "p99_side": lambda r: ("under" if max(r["workers"]["latency"][w]["p99_ms"] for w in ("5", "6"))
                           <= TARGETS["p99_ms"] else "not under"),
    # batched produce
    "produce_batch": lambda r: f"{r['e2e']['echomq wire=6']['produce_batch']:,.0f}",
    "produce_us_per_job": lambda r: f"{1e6 / r['e2e']['echomq wire=6']['produce_batch']:.1f}",
    "produce_verdict": lambda r: _verdict(
        r["e2e"]["echomq wire=6"]["produce_batch"] >= TARGETS["produce_batch"],
        r["e2e"]["echomq wire=6"]["produce_batch"], TARGETS["produce_batch"]),
    "over_rq_batch": lambda r: f"{_over_rq_batch(r):.1f}",
    "set_pipeline": lambda r: f"{r['e2e']['echomq wire=6']['set_pipeline']:,.0f}",
    "over_set_pipeline": lambda r: f"{_over_set_pipeline(r):.2f}",
    "over_set_pipeline_verdict": lambda r: _verdict(
        _over_set_pipeline(r) >= TARGETS["over_set_pipeline"], _over_set_pipeline(r),
        TARGETS["over_set_pipeline"]),
    "over_rq_batch_verdict": lambda r: _verdict(_over_rq_batch(r) >= TARGETS["over_rq_batch"],
                                                _over_rq_batch(r), TARGETS["over_rq_batch"]),
    # memory per pending job
    "ulid_bytes": lambda r: f"{r['memory']['id_lengths'][-1]['id_bytes']}",
    "ulid_cost": lambda r: f"{r['memory']['id_lengths'][-1]['pending_job']:.0f}",
    "id_bytes": lambda r: f"{r['memory']['breakdown']['id_bytes']}",
    "id_chars": lambda r: f"{r['memory']['breakdown']['id_bytes'] - len(ID_PREFIX)}",
    "random_bits": lambda r: f"{_random_bits(r['memory']['breakdown']['id_bytes'])}",
    "pending_job": lambda r: f"{r['memory']['breakdown']['pending_job']:.0f}",
    "e2e_memory": lambda r: f"{min(v['memory_per_job'] for v in _ours_e2e(r).values()):.0f}",
    "leanest_peer": lambda r: min(_peers(r), key=lambda k: _peers(r)[k]["memory_per_job"]),
    "leanest_peer_memory": lambda r: (
        f"{min(v['memory_per_job'] for v in _peers(r).values()):.0f}"),
    "allocator": lambda r: f"{r['memory']['allocator']}",
    "memory_queue": lambda r: f"{r['memory']['queue']}",
    "id_groups": _id_groups,
    "short_random_bits": lambda r: f"{_random_bits(19)}",
    "short_collisions": lambda r: f"{_collisions_per_year(_random_bits(19)):,.0f}",
    "default_collision_years": lambda r: (
        f"{1 / _collisions_per_year(_random_bits(r['memory']['breakdown']['id_bytes'])):,.0f}"),
    "row": lambda r: f"{r['memory']['breakdown']['row']:.0f}",
    "pending_entry": lambda r: f"{r['memory']['breakdown']['pending_entry']:.0f}",
    "old_names_saving": lambda r: f"{_names_saving(r):.0f}",
    "old_names_job": lambda r: f"{_job_with(r, True):.0f}",
    "short_names_job": lambda r: f"{_job_with(r, False):.0f}",
    "short_ids_job": lambda r: (
        f"{_id_cost(r, 19) - (0 if _renamed(r) else _names_saving(r)):.0f}"),
    "no_attempts": _no_attempts,
    "tombstone": lambda r: f"{r['memory']['tombstone']['tombstone']:.0f}",
    "tombstone_expiry": lambda r: f"{_tombstone_expiry(r):.0f}",
    # native cost against the bare commands
    "claim_over_core": lambda r: f"{_cost(r, 'claim', 'native_over_core'):.2f}",
    "claim_over_all": lambda r: f"{_cost(r, 'claim', 'native_over_all'):.2f}",
    "claim_bare_side": lambda r: ("misses" if _cost(r, "claim", "native_over_core")
                                  > TARGETS["native_over_bare"] else "meets"),
    "enqueue_over_core": lambda r: f"{_cost(r, 'enqueue', 'native_over_core'):.2f}",
    "enqueue_over_all": lambda r: f"{_cost(r, 'enqueue', 'native_over_all'):.2f}",
    # other observations
    "size_lo": lambda r: f"{r['scaling']['flat'][0]['pending']:,}",
    "size_hi": lambda r: f"{r['scaling']['flat'][-1]['pending']:,}",
    "claim_growth_6": lambda r: f"{_growth(r['scaling']['flat'], 'claim/6'):.2f}",
    "lanes_lo": lambda r: f"{r['scaling']['lanes'][0]['lanes']:,}",
    "lanes_hi": lambda r: f"{r['scaling']['lanes'][-1]['lanes']:,}",
    "lanes_jobs": lambda r: f"{r['scaling']['lanes'][-1]['jobs']:,}",
    "lane_growth": lambda r: f"{_growth(r['scaling']['lanes'], 'lane_claim/5'):.2f}",
    "knob_cost": _knob_sentence,
    "limit_lanes": lambda r: ", ".join(
        f"{row['lane_claim_limits/5']:.1f} µs at {row['lanes']:,} lanes"
        for row in r["lanes"]["rows"]),
    "task_overhead": lambda r: _range(_task_overheads(r), ".0f"),
    # parking
    "idle_5": lambda r: f"{_parking(r, '5')['idle']['per_consumer_per_s']:.3f}",
    "idle_6": lambda r: f"{_parking(r, '6')['idle']['per_consumer_per_s']:.3f}",
    "idle_window": lambda r: f"{_parking(r, '6')['idle']['window_s']:.0f}",
    "lease_back_5": lambda r: _lease_back_ms(r, "5"),
    "lease_back_6": lambda r: _lease_back_ms(r, "6"),
    "lease_back_parked": lambda r: f"{_parking(r, '6')['lease_back']['parked']}",
    "lease_back_bound": lambda r: f"{_parking(r, '6')['lease_back']['bound_ms']:,}",
    "empty_claims": lambda r: _range([_parking(r, w)["wake_one"]["empty_claims_per_enqueue"]
                                      for w in ("5", "6")], ".2f"),
    "blpops": lambda r: _range([_parking(r, w)["wake_one"]["blpop_per_enqueue"]
                                for w in ("5", "6")], ".2f"),
    "recover_5": lambda r: f"{_parking(r, '5')['recovery']['rate_per_s']:,.0f}",
    "recover_6": lambda r: f"{_parking(r, '6')['recovery']['rate_per_s']:,.0f}",
}


def figures(results: dict[str, Any]) -> dict[str, str]:
    """Every figure of ``FIGURES`` that this run's results hold."""
    found = {}
    for name, figure in FIGURES.items():
        try:
            found[name] = figure(results)
        except (KeyError, IndexError, StopIteration, ValueError):
            continue  # a phase this run left out, or a row it did not measure
    return found


def values(results: dict[str, Any]) -> dict[str, str]:
    """What each placeholder of the template renders as, for this run."""
    return {**{n: v for n, (v, _) in CONSTANTS.items()},
            **{n: v for n, (v, _) in QUOTED.items()}, **figures(results)}


def prose(paragraph: str) -> list[str]:
    """The paragraph's text outside its code spans (a code span is a name, never a figure)."""
    return CODE.split(paragraph)[::2]


def check_placeholders(names: list[tuple[str, str]], known: dict[str, str]) -> None:
    """Every run cited is known, every figure named exists, every quote cites its run."""
    cited = {name for run, name in names if run}
    for run, name in names:
        if run and name not in RUNS:
            raise ValueError(f"FINDINGS.md cites an unknown run {{run:{name}}}")
        if not run and name not in known and name not in FIGURES:
            raise ValueError(f"FINDINGS.md names an unknown figure {{{name}}}")
        if not run and name in QUOTED and QUOTED[name][1] not in cited:
            raise ValueError(f"FINDINGS.md quotes {{{name}}} without citing "
                             f"{{run:{QUOTED[name][1]}}} in the same paragraph")


def render_paragraph(paragraph: str, known: dict[str, str],
                     results: dict[str, Any]) -> str | None:
    """One paragraph filled in, or None when this run did not measure a figure it needs (or the
    phase a ``{phase:name}`` placeholder names)."""
    found = [f for text in prose(paragraph) for f in PLACEHOLDER.findall(text)]
    if any(kind == "phase:" and name not in results for kind, name in found):
        return None
    names = [(kind, name) for kind, name in found if kind != "phase:"]
    check_placeholders(names, known)
    if any(not run and name not in known for run, name in names):
        return None

    def fill(match: re.Match[str]) -> str:
        if match[1] == "phase:":
            return ""
        return RUNS[match[2]].cite() if match[1] else known[match[2]]

    parts = CODE.split(paragraph)
    return "".join(part if n % 2 else PLACEHOLDER.sub(fill, part) for n, part in enumerate(parts))


def render(results: dict[str, Any], template: str | None = None) -> str:
    """The analysis for this run: the template's paragraphs that its figures can fill."""
    if template is None:
        with open(TEMPLATE) as source:
            template = source.read()
    known = values(results)
    paragraphs = (render_paragraph(p, known, results) for p in template.strip().split("\n\n"))
    return "\n\n".join(p for p in paragraphs if p is not None)
