"""The conformance tests' pair of executors: one scratch namespace each for the Lua and the native
executor on the shared server, under RESP2 and under RESP3."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.conformance.harness import Pair
from echomq.embedded import EmbeddedValkey


@pytest.fixture(scope="module", params=[2, 3], ids=["resp2", "resp3"])
def pair(request: pytest.FixtureRequest, valkey: EmbeddedValkey) -> Iterator[Pair]:
    both = Pair(valkey.port, request.param)
    yield both
    both.close()
