"""Examples the lockstep test (tests/test_stateful.py) found, kept as fixed sequences of its
machine: each state that once made the executors or the model part, run on both protocols."""

from __future__ import annotations

import pytest

from echomq.conformance.model import status
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import ACK, RETRY
from tests.stateful_world import GROUPS, POOL, key
from tests.test_stateful import QueueMachine


@pytest.mark.parametrize("protocol", [2, 3])
def test_lane_lease_acked_over_a_wrong_typed_ring(valkey: EmbeddedValkey, protocol: int) -> None:
    """An example the lockstep test found: a lane lease acked while the ring holds another type.
    The ack touches the ring (its group may come back to it), so both executors and the model
    refuse it with WRONGTYPE and nothing changes."""
    machine = QueueMachine(valkey.port, protocol)
    try:
        machine.enqueue_id(POOL[0], b"p")
        job_id = machine.claim_one(1_000)
        assert job_id == POOL[0]
        machine.behind_the_back(b"HSET", key(b"job", job_id), b"lane", GROUPS[0])
        machine.plant(b"ring", 0)
        argv = [2, key(b"active"), key(b"job", job_id), job_id, 1, 0]
        assert machine.fenced(ACK, job_id, 1, argv).startswith(b"-WRONGTYPE ")
        machine.keyspaces_agree()
    finally:
        machine.teardown()


@pytest.mark.parametrize("protocol", [2, 3])
def test_retry_replay_over_a_row_without_payload(valkey: EmbeddedValkey, protocol: int) -> None:
    """An example the lockstep test found: a job whose payload went behind the queue's back is
    claimed and retried at its last attempt, DEAD. Sent again, that retry is STALE on both
    executors and the model: a retry's replay is told by its row's payload, which this row
    lacks (docs/PROTOCOL.md, Replays)."""
    machine = QueueMachine(valkey.port, protocol)
    try:
        machine.enqueue_id(POOL[0], b"p")
        machine.behind_the_back(b"HDEL", key(b"job", POOL[0]), b"p")
        job_id = machine.claim_one(1_000)
        assert job_id == POOL[0]
        fence = machine.fences[job_id][-1]
        argv = [4, key(b"active"), key(b"delayed"), key(b"dead"), key(b"job", job_id), job_id,
                fence, 0, 1, b"boom", machine.now]
        assert machine.fenced(RETRY, job_id, fence, argv) == status("DEAD")
        assert machine.replay_settlement(machine.settlements[-1]) == status("STALE")
    finally:
        machine.teardown()
