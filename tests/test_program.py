"""The programs behind both clients' methods: a step's reply is sent into the program, a step's
error is thrown in at its ``yield`` (so it handles it as straight-line code would), and an
asyncio cancellation goes through the program, never swallowed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from echomq.engine.clients import async_twin
from echomq.engine.program import Invoke, Program, adrive, drive, method
from echomq.queue import aio


class Client:
    """Answers ``echo`` with its argument, fails ``boom``; ``aecho``/``aboom`` are awaitable."""

    def echo(self, value: Any) -> Any:
        return value

    def boom(self) -> Any:
        raise ValueError("boom")

    async def aecho(self, value: Any) -> Any:
        return value

    async def aboom(self) -> Any:
        raise ValueError("boom")


def handling(prefix: str = "") -> Program[list[Any]]:
    client = Client()
    seen = [(yield Invoke(client, method(prefix + "echo", 1)))]
    try:
        yield Invoke(client, method(prefix + "boom"))
    except ValueError as exc:
        seen.append(str(exc))
    seen.append((yield Invoke(client, method(prefix + "echo", 2))))
    return seen


def test_a_step_error_is_thrown_in_at_its_yield_on_both_drivers() -> None:
    assert drive(handling()) == [1, "boom", 2]
    assert asyncio.run(adrive(handling("a"))) == [1, "boom", 2]


def test_an_unhandled_step_error_leaves_the_program_as_it_came() -> None:
    def unhandled() -> Program[None]:
        yield Invoke(Client(), method("boom"))

    with pytest.raises(ValueError, match="boom"):
        drive(unhandled())


def test_a_cancelled_wait_is_cancelled(conn: redis.Redis) -> None:
    """``asyncio.wait_for`` around a long ``wait``: the cancellation is thrown into the program
    at its blocking step and comes out of the method as a timeout."""
    async def body() -> None:
        client = async_twin(conn)
        try:
            queue = aio.Queue(client, "cancelled", check_policy=False)
            await queue.enqueue("JOB:1", b"x", now=1)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(queue.wait("JOB:1", 3600), timeout=0.2)
            assert (await queue.outcome("JOB:1")).state == "pending"
        finally:
            await client.aclose()

    asyncio.run(body())
