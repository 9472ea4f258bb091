"""The case table again on a shard's keys: a sharded queue's shard is a plain queue under a hash
tag of its own (``emq:{q{3…}:``, see ``echomq.queue.shard_layout``), so a case, its set-up and its
arguments moved from the base ``emq:{q}:`` to a shard's, must give the same reply and the same
keyspace on both executors.

What a move of the base can break is how an executor finds and derives keys: the keys it builds
from a key it was given (a job's row, its lane, its dedupe key, the events stream), the checks
that the keys it was given belong to one queue (``EMQKEYS``), the type of what it meets there
(``WRONGTYPE``), the fence it reads there (``EMQFENCE``), and every reply that is not a refusal
(every transition's good paths, in each state the table sets up). So those cases run here (but
the 10,000-job batches: a batch's size is not the base's business), and the refusals of an
argument do not: a number, a job id's kind, an arity, a batch's item, a size, a policy, a mode
or a name (a step's) is judged on the argument alone, before any key's name is read, and the
table (``test_transitions.py``) checks each on the base. Under RESP3 only: the protocols are
compared by the table itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from echomq.conformance.cases import Case, case_differences
from echomq.conformance.cases.common import BASE
from echomq.conformance.harness import Pair
from echomq.conformance.resp import Arg
from echomq.embedded import EmbeddedValkey
from echomq.queue.shard_layout import shard_base
from tests.conformance.table import TABLE

SHARD_BASE = shard_base("q", 3, 8)
def moved(arg: Arg) -> Arg:
    """``arg`` with the plain queue's base, where it starts with it, made the shard's."""
    if isinstance(arg, str) and arg.startswith(BASE):
        return SHARD_BASE + arg.removeprefix(BASE)
    if isinstance(arg, bytes) and arg.startswith(BASE.encode()):
        return SHARD_BASE.encode() + arg.removeprefix(BASE.encode())
    return arg


def on_shard(case: Case) -> Case:
    return dataclasses.replace(case, argv=[moved(arg) for arg in case.argv],
                               setup=[[moved(arg) for arg in command]
                                      for command in case.setup])


# The refusals judged on an argument alone, whatever the keys are named.
ARGUMENT_REFUSALS = (b"-EMQNUM", b"-EMQKIND", b"-EMQARITY", b"-EMQITEM", b"-EMQSIZE",
                     b"-EMQPOLICY", b"-EMQMODE", b"-EMQLANE", b"-ERR")
# the cases that name a key of the base and can meet it (not those refused on an argument)
# A batch's size is not what a base move can break either: the 10,000-job batches (the table's
# slowest cases) run on the base only, the smaller batches on both.
CASES = [case for case in TABLE
         if on_shard(case) != case and not case.expect.startswith(ARGUMENT_REFUSALS)
         and not case.label.endswith("ten-thousand-jobs")]


@pytest.fixture(scope="module")
def pair(valkey: EmbeddedValkey) -> Iterator[Pair]:
    both = Pair(valkey.port, 3)
    yield both
    both.close()


def test_the_shard_base_is_another_tag() -> None:
    assert SHARD_BASE != BASE and SHARD_BASE.startswith("emq:{q{")
    chosen = {case.transition.name for case in CASES if not case.expect.startswith(b"-")}
    assert chosen == {case.transition.name for case in TABLE}  # each one's good paths
    refused = {case.expect.split(b" ", 1)[0] for case in CASES if case.expect.startswith(b"-")}
    assert refused == {b"-EMQKEYS", b"-WRONGTYPE", b"-EMQFENCE"}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_case_on_a_shard(pair: Pair, case: Case) -> None:
    assert case_differences(pair, on_shard(case)) == []
