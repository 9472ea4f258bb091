"""A cancel as the consumer meets it, with no server: the core's and the beat program's part
(``LoopCore.cancels``, ``Beat.heartbeat`` asking ``CancelAsked``), the flag a handler reads
(``echomq.cancel_requested()``: in its thread, in a thread it starts, in its task), and what a
round's CANCELLED verdict comes to (a log line and a count, never a retry's)."""

from __future__ import annotations

import asyncio
import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, strategies as st

import echomq
from echomq.consumer import actions
from echomq.consumer.actions import Stepper
from echomq.consumer.beat import Beat
from echomq.consumer.cancelling import CancelFlags, cancel_requested
from echomq.consumer.loop import Lineup, LoopCore
from echomq.consumer.shell import LoopShell, report_settled
from echomq.engine import calls
from echomq.engine.calls import Job, Verdict
from tests.test_loop import job, settings


def test_a_running_job_found_cancelled_is_told_once_and_its_lease_still_extended() -> None:
    core = LoopCore(settings())
    core.took(job(1), 0.0)
    core.took(job(2), 0.0)
    jobs = [job(1), job(2)]
    verdicts = [Verdict.CANCELLING, Verdict.EXTENDED]
    assert core.heartbeat_done(jobs, verdicts, 0.1) == []  # nothing lost: both extended
    assert core.leases[job(1)].expires == pytest.approx(0.1 + 0.3)
    assert core.cancels(jobs, verdicts, 0.1) == [job(1)]
    assert core.cancels(jobs, verdicts, 0.2) == []  # told already
    assert core.finished(job(1)) is True  # its outcome is settled as usual
    assert job(1) not in core.cancel_asked


def test_a_prefetched_job_found_cancelled_never_starts_and_is_released() -> None:
    core = LoopCore(settings())
    core.claimed([job(1), job(2)], 0.0)
    assert core.cancels([job(1), job(2)], [Verdict.CANCELLING, Verdict.EXTENDED], 0.1) == []
    assert core.next_job(0.1) == job(2)
    assert core.next_job(0.1) is None
    assert core.outbox == [calls.Release(job(1))]  # the server ends it cancelled


def test_a_finished_job_found_cancelled_is_settled_as_it_is() -> None:
    core = LoopCore(settings())
    core.took(job(1), 0.0)
    core.finished(job(1))
    core.record(job(1), core.settlement(None), 0.0)
    assert core.cancels([job(1)], [Verdict.CANCELLING], 0.2) == []
    assert core.outbox == [calls.Ack(job(1))]


@given(data=st.data(), size=st.integers(1, 8))
def test_no_job_found_cancelled_before_it_started_ever_starts(data: st.DataObject,
                                                              size: int) -> None:
    core = LoopCore(settings(capacity=size))
    jobs = [job(n) for n in range(size)]
    core.claimed(jobs, 0.0)
    started = data.draw(st.integers(0, size), label="started")
    finished = data.draw(st.integers(0, started), label="finished")
    for one in jobs[:started]:
        assert core.next_job(0.0) == one
    for one in jobs[:finished]:
        core.finished(one)
        core.record(one, core.settlement(None), 0.0)
    flagged = set(data.draw(st.sets(st.sampled_from(jobs)), label="cancelled"))
    in_hand = [*core.leases, *(outcome.job for outcome in core.outbox)]
    told = core.cancels(in_hand, [Verdict.CANCELLING if one in flagged else Verdict.EXTENDED
                                  for one in in_hand], 0.1)
    assert set(told) == flagged & set(jobs[finished:started])  # the handlers running now
    later = []
    while (next_one := core.next_job(0.1)) is not None:
        later.append(next_one)
    assert later == [one for one in jobs[started:] if one not in flagged]
    released = [outcome.job for outcome in core.outbox if isinstance(outcome, calls.Release)]
    assert released == [one for one in jobs[started:] if one in flagged]


def beat_host(core_settings: Any) -> Any:
    return SimpleNamespace(lineup=Lineup.of(core_settings, 1), clock=None, concurrency=1,
                           stopping=False, parking_timeout_s=None, monotonic=lambda: 0.5)


def test_the_heartbeat_asks_for_the_handlers_of_cancelled_jobs_to_be_told() -> None:
    host = beat_host(settings())
    core = host.lineup.cores[0]
    core.took(job(1), 0.0)
    steps = Stepper(Beat(host).heartbeat(0, [job(1)]))
    assert steps.step() == actions.Extend(0, [job(1)])
    steps.reply([Verdict.CANCELLING])
    assert steps.step() == actions.CancelAsked(0, [job(1)])
    assert steps.step() is None
    assert core.holds(job(1))  # its lease goes on, extended, until its handler returns


def test_a_handler_reads_its_own_flag_in_its_thread_and_the_threads_and_tasks_it_starts(
) -> None:
    flags = CancelFlags()
    seen: dict[str, bool] = {}

    async def inside() -> None:
        seen["task"] = await asyncio.ensure_future(_flag_in_task())
        seen["to_thread"] = await asyncio.to_thread(cancel_requested)

    with flags.running(job(1), set()):
        seen["before"] = echomq.cancel_requested()
        assert flags.request([job(1), job(2)]) == [job(1)]  # job 2 runs nowhere here
        seen["thread"] = echomq.cancel_requested()
        asyncio.run(inside())
    seen["after"] = cancel_requested()
    assert seen == {"before": False, "thread": True, "task": True, "to_thread": True,
                    "after": False}


async def _flag_in_task() -> bool:
    return cancel_requested()


def test_a_flag_asked_before_the_handler_starts_is_set_from_its_start() -> None:
    flags = CancelFlags()
    with flags.running(job(1), {job(1)}):
        assert cancel_requested()
    other = threading.Thread(target=lambda: None)
    other.start()
    other.join()
    assert not cancel_requested()


def test_a_cancelled_attempt_is_logged_as_cancelled_never_as_a_retry(
        caplog: pytest.LogCaptureFixture) -> None:
    acked: list[Job] = []
    outcomes = [calls.Ack(job(1)), calls.Retry(job(2), 1_000, "CancelledError"),
                calls.Release(job(3))]
    with caplog.at_level(logging.INFO, logger="echomq"):
        report_settled(outcomes, [Verdict.CANCELLED] * 3, acked.append)
    said = [record.getMessage() for record in caplog.records]
    assert said == [f"job JOB:{n} cancelled (attempt 1 ended)" for n in (1, 2, 3)]
    assert acked == []


def test_an_attempt_whose_job_was_cancelled_is_counted_cancelled() -> None:
    # The one rule (cancelled_wins, what the App's Attempt and instrument call once an attempt's
    # outcome is judged) turns any ending of a cancelled job's attempt into "cancelled"; the
    # metrics hook counts what the record says, and decides nothing itself.
    from prometheus_client import REGISTRY

    from echomq.ops.metrics import PrometheusHooks
    from echomq.tasks.hooks import RETRIED, cancelled_wins

    def count(name: str) -> float:
        labels = {"queue": "cancel-core", "task": "t"}
        return REGISTRY.get_sample_value(f"echomq_jobs_{name}_total", labels) or 0.0

    before = {name: count(name) for name in ("cancelled", "retried", "succeeded")}
    hooks, flags = PrometheusHooks(), CancelFlags()
    with flags.running(job(1), {job(1)}), \
            hooks.running("cancel-core", "t", job(1), {}, None) as record:
        record.outcome = RETRIED  # raised CancelledError: a failed attempt, by itself
        assert cancelled_wins(record).outcome == "cancelled"
    with flags.running(job(2), set()), \
            hooks.running("cancel-core", "t", job(2), {}, None) as record:
        flags.request([job(2)])  # returned normally after the cancel reached it
        cancelled_wins(record)
    with flags.running(job(3), set()), \
            hooks.running("cancel-core", "t", job(3), {}, None) as record:
        assert cancelled_wins(record).outcome == "succeeded"  # no cancel: nothing changes
    after = {name: count(name) for name in before}
    assert {name: after[name] - before[name] for name in before} == {
        "cancelled": 2, "retried": 0, "succeeded": 1}


def test_a_round_that_ends_a_job_cancelled_counts_it_and_tells_a_handler_still_running() -> None:
    shell = SimpleNamespace(cancelled=0, flags=CancelFlags(), on_ack=None)
    with shell.flags.running(job(1), set()):  # past its time limit, still running
        LoopShell._report(shell, actions.Report(  # type: ignore[arg-type]
            [calls.Retry(job(1), 0, "TimeLimitExceeded"), calls.Ack(job(2))],
            [Verdict.CANCELLED, Verdict.ACKED]))
        assert cancel_requested()
    assert shell.cancelled == 1
