"""A task App the metrics and tracing tests run in worker processes (``tests.obs_app:app``).

Its hooks count attempts (Prometheus) and trace them to the file ``ECHOMQ_TEST_SPANS`` names
(see ``tests.obs_handlers``). ``charge(cents)`` returns ``cents`` and fails for a negative
amount (two attempts, 10 ms apart). ``producer_of_charge`` is the same task on the producer's
side, on the test's server and with the test's hooks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import redis

from echomq import App, Backoff
from echomq.ops.metrics import PrometheusHooks
from echomq.ops.tracing import TracingHooks
from tests.obs_handlers import worker_tracer

app = App(redis.Redis.from_url(os.environ.get("ECHOMQ_URL", "redis://127.0.0.1:6379")),
          queue="billing", hooks=[PrometheusHooks(), TracingHooks(worker_tracer())],
          check_policy=False)


@app.task(name="billing.charge", max_attempts=2, backoff=Backoff(first_ms=10, max_ms=10))
def charge(cents: int) -> int:
    if cents < 0:
        raise ValueError(f"cannot charge {cents} cents")
    return cents


def producer_of_charge(conn: redis.Redis, hooks: Sequence[Any] = ()) -> Any:
    producer = App(conn, queue="billing", hooks=hooks, check_policy=False)

    @producer.task(name="billing.charge")
    def charge(cents: int) -> int:
        raise AssertionError("runs in the worker")

    return charge
