"""The parking promise and the recovery bound hold on a queue with queue-wide limits set: the
two tests of tests/test_parking.py run again on queues whose ``queueconf`` sets a concurrency
and a rate limit (an idle queue's parks cost what they cost without them; a SIGKILLed holder's
lease is back within ``lease_ms + housekeeping_ms`` while fifty consumers park)."""

from __future__ import annotations

import pytest
import redis

from echomq import Queue
from echomq.embedded import EmbeddedValkey
from tests.shells import Make, make_fixture, shell_fixture  # noqa: F401
from tests.test_parking import (
    test_a_sigkilled_holders_lease_is_back_within_the_bound_while_fifty_consumers_park as bound,
    test_idle_consumers_cost_one_read_and_one_blpop_per_park as idle_cost,
)


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.mark.pairs(("shell", "wire"), [("sync", 5), ("async", 6)])
def test_idle_consumers_cost_the_same_with_limits_set(make: Make, conn: redis.Redis,
                                                      wire: int) -> None:
    Queue(conn, "idle", check_policy=False).set_limits(concurrency=2, rate=5, window_ms=200)
    idle_cost(make, conn, wire)


def test_the_recovery_bound_holds_with_limits_set(conn: redis.Redis, valkey: EmbeddedValkey,
                                                  wire: int) -> None:
    # At most one lease at once: the holder's lost lease is the queue's only one.
    Queue(conn, "held", check_policy=False).set_limits(concurrency=1, rate=100)
    bound(conn, valkey, wire)
    assert Queue(conn, "held", check_policy=False).limits().concurrency == 1
