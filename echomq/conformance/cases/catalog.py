"""Every case of the conformance table in one list, by family: the cases every transition has
(``generic``), the single verbs' (``flat``), the batched ones (``batch``), the lane bookkeeping
(``lanes``) and priority inside a lane (``lane_priority``), the replays (``replay``), the claim
records (``records``), cancel (``cancel``), the bounds of dead jobs (``dead``), flat priority
(``priority``), dependencies with the join (``after``), the unique enqueue (``unique``), the
queue-wide limits (``limits``), the producer's batch (``many``), rows of the earlier
layout (``layout``), durable steps (``steps``) and expiry (``expiry``), then every one of them
again with the events stream declared
(``events``); each family imports only ``common``, and only this module gathers them."""

from __future__ import annotations

from collections import Counter

import echomq.conformance.cases.flat as flat
from echomq.conformance.cases.after import join_cases
from echomq.conformance.cases.batch import batch_cases
from echomq.conformance.cases.cancel import cancel_cases
from echomq.conformance.cases.common import Case
from echomq.conformance.cases.dead import trim_dead_cases
from echomq.conformance.cases.events import event_cases
from echomq.conformance.cases.expiry import expiry_cases
from echomq.conformance.cases.generic import generic_cases
from echomq.conformance.cases.lane_priority import lane_priority_cases
from echomq.conformance.cases.lanes import lane_cases
from echomq.conformance.cases.layout import layout_cases
from echomq.conformance.cases.limits import limit_cases
from echomq.conformance.cases.many import many_cases
from echomq.conformance.cases.priority import priority_cases
from echomq.conformance.cases.records import record_cases
from echomq.conformance.cases.replay import replay_cases
from echomq.conformance.cases.steps import step_cases
from echomq.conformance.cases.unique import unique_cases

__all__ = ["all_cases"]


def all_cases() -> list[Case]:
    """Every case of the table, each id once."""
    cases = [*generic_cases(), *flat.enqueue_cases(), *flat.claim_cases(),
             *flat.ack_cases(), *flat.retry_cases(), *flat.extend_cases(), *flat.recover_cases(),
             *flat.promote_cases(), *batch_cases(), *flat.enqueue_delayed_cases(),
             *flat.ack_result_cases(), *lane_cases(), *replay_cases(),
             *record_cases(), *flat.progress_cases(), *cancel_cases(), *trim_dead_cases(),
             *priority_cases(), *lane_priority_cases(), *join_cases(), *unique_cases(),
             *limit_cases(), *many_cases(), *layout_cases(), *step_cases(),
             *expiry_cases()]
    cases += event_cases(cases)
    counts = Counter(case.id for case in cases)
    duplicates = {i for i, n in counts.items() if n > 1}
    assert not duplicates, duplicates
    return cases
