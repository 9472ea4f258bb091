"""``wire=6`` against a server without trafikey: an echomq error that says how to load it, on
both executors (blocking and asyncio), single calls and pipelines alike."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aredis

from echomq import Queue, aio
from echomq.embedded import EmbeddedValkey
from echomq.engine.errors import EchoMQError, TrafikeyMissing
from echomq.engine.executors import raise_mapped
from tests.conftest import start_server


@pytest.fixture(scope="module")
def bare() -> Iterator[EmbeddedValkey]:
    """A valkey-server with no module loaded."""
    server = start_server(module=False)
    yield server
    server.stop()


def assert_names_the_fix(error: BaseException) -> None:
    assert isinstance(error, TrafikeyMissing) and isinstance(error, EchoMQError)
    message = str(error)
    assert "trafikey" in message and "--loadmodule" in message
    assert "EMQ.ENQUEUE" in message


def test_a_wire6_call_names_the_missing_module(bare: EmbeddedValkey) -> None:
    queue = Queue(bare.client(), "q", wire=6)
    with pytest.raises(TrafikeyMissing) as single:
        queue.enqueue("JOB:1", b"")
    assert_names_the_fix(single.value)
    with pytest.raises(TrafikeyMissing) as piped:
        queue.enqueue_many([("JOB:1", b""), ("JOB:2", b"")])
    assert_names_the_fix(piped.value)
    assert bare.client().dbsize() == 0
    queue.conn.close()


def test_an_asyncio_wire6_call_names_the_missing_module(bare: EmbeddedValkey) -> None:
    async def attempt() -> list[BaseException]:
        conn = aredis.Redis(host="127.0.0.1", port=bare.port)
        queue = aio.Queue(conn, "q", wire=6)
        raised: list[BaseException] = []
        for call in (lambda: queue.enqueue("JOB:1", b""),
                     lambda: queue.enqueue_many([("JOB:1", b"")])):
            try:
                await call()
            except Exception as exc:
                raised.append(exc)
        await conn.aclose()
        return raised

    raised = asyncio.run(attempt())
    assert len(raised) == 2
    for error in raised:
        assert_names_the_fix(error)


def test_other_unknown_commands_stay_server_errors() -> None:
    error = redis.ResponseError("unknown command 'NOSUCH', with args beginning with: ")
    with pytest.raises(redis.ResponseError) as raised:
        raise_mapped(error)
    assert raised.value is error
