"""Every case of the conformance table in one list: the flat transitions' cases
(``echomq.conformance.cases``, which also holds what every case is built of), the batched
ones, the lane bookkeeping and the replays, each module importing only ``cases`` below it."""

from __future__ import annotations

from echomq.conformance import cases as flat
from echomq.conformance.batch_cases import batch_cases
from echomq.conformance.cases import Case
from echomq.conformance.lane_cases import lane_cases
from echomq.conformance.record_cases import record_cases
from echomq.conformance.replay_cases import replay_cases

__all__ = ["all_cases"]


def all_cases() -> list[Case]:
    """Every case of the table, each id once."""
    cases = [*flat.generic_cases(), *flat.enqueue_cases(), *flat.claim_cases(),
             *flat.ack_cases(), *flat.retry_cases(), *flat.extend_cases(), *flat.recover_cases(),
             *flat.promote_cases(), *batch_cases(), *flat.enqueue_delayed_cases(),
             *flat.ack_result_cases(), *lane_cases(), *replay_cases(),
             *record_cases()]
    ids = [case.id for case in cases]
    duplicates = {i for i in ids if ids.count(i) > 1}
    assert not duplicates, duplicates
    return cases
