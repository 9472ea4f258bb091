"""The default job id: time-sortable, strictly increasing in a process, unique across processes,
and always within the kind gate."""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Callable, Iterator

import pytest

from echomq.engine.native import id_ok
from echomq.queue import ids
from echomq.queue.ids import ALPHABET, JobIds, new_job_id

SHAPE = re.compile(r"JOB:[-0-9A-Z_a-z]{18}")
MAX_RANDOM = (1 << ids.RANDOM_BITS) - 1


def frozen_clock(*ms: int) -> Callable[[], int]:
    """A clock (ns) that reads each of ``ms`` in turn, then stays at the last."""
    readings: Iterator[int] = iter(ms)
    last = [ms[0]]

    def clock() -> int:
        last[0] = next(readings, last[0])
        return last[0] * 1_000_000

    return clock


def fixed_random(*values: int) -> Callable[[int], int]:
    draws = iter(values)
    return lambda bits: next(draws)


def test_the_alphabet_is_in_ascii_order_and_inside_the_kind_gate() -> None:
    assert list(ALPHABET) == sorted(ALPHABET)
    assert len(ALPHABET) == 64 == len(set(ALPHABET))
    assert id_ok("JOB:" + ALPHABET)


def test_default_ids_pass_the_kind_gate_and_are_short() -> None:
    made = [new_job_id() for _ in range(1000)]
    assert all(SHAPE.fullmatch(job_id) and id_ok(job_id) for job_id in made)
    assert {len(job_id) for job_id in made} == {22}


def test_ids_sort_in_creation_order_across_millisecond_boundaries() -> None:
    # the earlier millisecond draws the largest random part, the later one the smallest
    maker = JobIds(clock=frozen_clock(1_000, 1_001, 1_002), randbits=fixed_random(
        MAX_RANDOM, 0, MAX_RANDOM // 2))
    made = [maker() for _ in range(3)]
    assert made == sorted(made)
    assert len(set(made)) == 3
    assert [ids.created_ms(job_id) for job_id in made] == [1_000, 1_001, 1_002]


def test_ids_sort_by_real_time_from_the_epoch_to_the_last_millisecond_they_hold() -> None:
    maker = JobIds(clock=frozen_clock(0, 1, 2**45 - 1), randbits=fixed_random(5, 5, 5))
    made = [maker() for _ in range(3)]
    assert made == sorted(made)
    assert made[0] == "JOB:" + "-" * 17 + "4"  # ms 0, random 5: the smallest ids there are


def test_ids_increase_strictly_within_one_millisecond() -> None:
    maker = JobIds(clock=frozen_clock(7_000), randbits=fixed_random(12345))
    made = [maker() for _ in range(10_000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert all(ids.created_ms(job_id) == 7_000 for job_id in made)


def test_a_random_part_that_runs_out_carries_into_the_next_millisecond() -> None:
    maker = JobIds(clock=frozen_clock(7_000), randbits=fixed_random(MAX_RANDOM - 1))
    made = [maker() for _ in range(3)]
    assert made == sorted(made) and len(set(made)) == 3
    assert [ids.created_ms(job_id) for job_id in made] == [7_000, 7_000, 7_001]


@pytest.mark.parametrize("job_id", [
    "JOB:order-1",  # too short
    "JOB:" + "A" * 19,  # too long
    "JOX:" + "A" * 18,  # another prefix
    "JOB:" + "A" * 17 + ".",  # the kind gate's byte outside the ids' alphabet
])
def test_an_id_of_another_shape_has_no_creation_time(job_id: str) -> None:
    with pytest.raises(ValueError, match="not a default job id"):
        ids.created_ms(job_id)


def test_ids_keep_increasing_when_the_clock_steps_back() -> None:
    maker = JobIds(clock=frozen_clock(9_000, 8_000, 8_500), randbits=fixed_random(3, 0, 0))
    made = [maker() for _ in range(3)]
    assert made == sorted(made) and len(set(made)) == 3


def _make_ids(count: int, start: multiprocessing.synchronize.Barrier,
              out: multiprocessing.queues.Queue[list[str]]) -> None:
    start.wait()
    out.put([new_job_id() for _ in range(count)])


def _ids_from_children(children: int, count: int) -> list[list[str]]:
    context = multiprocessing.get_context("fork")
    start = context.Barrier(children)
    out: multiprocessing.queues.Queue[list[str]] = context.Queue()
    procs = [context.Process(target=_make_ids, args=(count, start, out))
             for _ in range(children)]
    for proc in procs:
        proc.start()
    made = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return made


def test_processes_started_at_once_make_distinct_ids() -> None:
    made = _ids_from_children(children=4, count=5_000)
    assert all(batch == sorted(batch) for batch in made)
    every = [job_id for batch in made for job_id in batch]
    assert len(set(every)) == len(every)


def test_forked_children_do_not_continue_the_parent_sequence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a clock frozen at one millisecond: parent and children all make ids "at once"
    monkeypatch.setattr(ids.DEFAULT, "clock", frozen_clock(1_700_000_000_000))
    parent = new_job_id()
    made = _ids_from_children(children=4, count=1)
    every = [parent] + [job_id for batch in made for job_id in batch]
    assert len(set(every)) == len(every)
