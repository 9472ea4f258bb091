"""Every case again on a shard's keys: a sharded queue's shard is a plain queue under a hash tag
of its own (``emq:{q{3…}:``, see ``echomq.queue.shard_layout``), so each case, its set-up and its
arguments moved from the base ``emq:{q}:`` to a shard's, must give the same reply and the same
keyspace on both executors. Under RESP3 only: the protocols are compared by the cases
themselves."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from echomq.conformance.cases import Case, all_cases, case_differences
from echomq.conformance.cases.common import BASE
from echomq.conformance.harness import Pair
from echomq.conformance.resp import Arg
from echomq.embedded import EmbeddedValkey
from echomq.queue.shard_layout import shard_base

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


# the cases that name a key of the base (not those refused before any key is read)
CASES = [case for case in all_cases() if on_shard(case) != case]


@pytest.fixture(scope="module")
def pair(valkey: EmbeddedValkey) -> Iterator[Pair]:
    both = Pair(valkey.port, 3)
    yield both
    both.close()


def test_the_shard_base_is_another_tag() -> None:
    assert SHARD_BASE != BASE and SHARD_BASE.startswith("emq:{q{")
    assert len(CASES) > len(all_cases()) // 2


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_case_on_a_shard(pair: Pair, case: Case) -> None:
    assert case_differences(pair, on_shard(case)) == []
