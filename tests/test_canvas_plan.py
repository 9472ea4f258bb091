"""The canvas planned as jobs (no server): who waits on whom, what each is given first, and the
shape of a workflow's result — Celery's semantics, nesting included."""

from __future__ import annotations

from typing import Any

import pytest

from echomq import ArgumentError
from echomq.tasks.canvas import MAX_DEPTH, Chain, TaskSignature, chain, chord, group
from echomq.tasks.workflow import Planned, leaves, planned


def sig(name: str, *args: Any, immutable: bool = False) -> TaskSignature:
    return TaskSignature(name, args, {}, immutable, job_id=f"JOB:{name}")


def by_name(jobs: list[Planned]) -> dict[str, Planned]:
    return {job.job_id.removeprefix("JOB:"): job for job in jobs}


def test_one_signature_is_one_job_waiting_on_nothing() -> None:
    plan, shape = planned(sig("a", 1))
    assert shape == "JOB:a"
    [job] = plan.jobs
    assert (job.after, job.parents, job.policy) == ((), None, "fail")


def test_a_chain_gives_each_the_result_of_the_one_before() -> None:
    plan, shape = planned(chain(sig("a"), sig("b"), sig("c")))
    jobs = by_name(plan.jobs)
    assert shape == "JOB:c"
    assert [job.job_id for job in plan.jobs] == ["JOB:a", "JOB:b", "JOB:c"]
    assert (jobs["b"].after, jobs["b"].parents) == (("JOB:a",), "JOB:a")
    assert (jobs["c"].after, jobs["c"].parents) == (("JOB:b",), "JOB:b")


def test_an_immutable_signature_waits_but_is_given_nothing() -> None:
    plan, _ = planned(chain(sig("a"), sig("b", immutable=True)))
    b = by_name(plan.jobs)["b"]
    assert (b.after, b.parents) == (("JOB:a",), None)


def test_a_chord_gives_its_body_the_header_results_in_order() -> None:
    plan, shape = planned(chord([sig("x"), sig("y"), sig("z")], sig("sum")))
    body = by_name(plan.jobs)["sum"]
    assert shape == "JOB:sum"
    assert body.after == ("JOB:x", "JOB:y", "JOB:z")
    assert body.parents == ["JOB:x", "JOB:y", "JOB:z"]


def test_a_group_in_a_chain_is_a_chord_and_a_group_after_a_task_fans_out() -> None:
    plan, shape = planned(chain(sig("a"), group(sig("b"), sig("c")), sig("d")))
    jobs = by_name(plan.jobs)
    assert (jobs["b"].parents, jobs["c"].parents) == ("JOB:a", "JOB:a")
    assert jobs["d"].after == ("JOB:b", "JOB:c")
    assert jobs["d"].parents == ["JOB:b", "JOB:c"]
    assert shape == "JOB:d"


def test_nesting_keeps_the_shape_of_groups() -> None:
    inner = chord([sig("p"), sig("q")], sig("pq"))
    plan, shape = planned(group(inner, chain(sig("r"), sig("s")), sig("t")))
    assert shape == ["JOB:pq", "JOB:s", "JOB:t"]
    assert list(leaves(shape)) == ["JOB:pq", "JOB:s", "JOB:t"]
    plan, shape = planned(chord([group(sig("u"), sig("v")), sig("w")], sig("all")))
    body = by_name(plan.jobs)["all"]
    assert body.parents == [["JOB:u", "JOB:v"], "JOB:w"]
    assert body.after == ("JOB:u", "JOB:v", "JOB:w")


def test_a_chain_of_chords_waits_on_each_body() -> None:
    plan, shape = planned(chain(chord([sig("a"), sig("b")], sig("ab")),
                                chord([sig("c"), sig("d")], sig("cd"))))
    jobs = by_name(plan.jobs)
    assert (jobs["c"].after, jobs["c"].parents) == (("JOB:ab",), "JOB:ab")
    assert jobs["cd"].after == ("JOB:c", "JOB:d")
    assert shape == "JOB:cd"
    order = [job.job_id for job in plan.jobs]
    for job in plan.jobs:  # each job comes after every job it waits on
        assert all(order.index(parent) < order.index(job.job_id) for parent in job.after)


def test_the_policy_applies_to_the_jobs_its_node_makes_wait() -> None:
    plan, _ = planned(chain(sig("a"), chord([sig("b")], sig("c"), policy="ignore"),
                            sig("d"), policy="continue"))
    jobs = by_name(plan.jobs)
    assert (jobs["b"].policy, jobs["c"].policy, jobs["d"].policy) == ("ignore", "ignore",
                                                                      "continue")


def test_bad_canvases_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ArgumentError, match="policy must be fail, ignore or continue"):
        chain(sig("a"), policy="skip")
    with pytest.raises(TypeError, match="takes signatures"):
        group(sig("a"), "b")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        group()
    with pytest.raises(TypeError, match="body"):
        chord([sig("a")], "b")  # type: ignore[arg-type]
    assert isinstance(chain(sig(str(n)) for n in range(3)), Chain)


@pytest.mark.parametrize("nest", [chain, group, lambda node: chord([sig("h")], node)])
def test_a_canvas_nested_past_the_limit_is_refused_naming_it(nest: Any) -> None:
    """A ValueError naming the limit when the canvas is built, where planning one nested some
    hundreds deep ran out of stack (RecursionError)."""
    node: Any = sig("a")
    while node.depth < MAX_DEPTH:
        node = nest(node)
    assert node.depth == MAX_DEPTH
    plan, _ = planned(node)  # the deepest allowed plans well within the stack
    assert "JOB:a" in [job.job_id for job in plan.jobs]
    with pytest.raises(ValueError, match=f"at most {MAX_DEPTH} deep; this one would nest "
                                         f"{MAX_DEPTH + 1} deep"):
        nest(node)
