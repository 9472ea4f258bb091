"""The asyncio executors of every transition, on a ``redis.asyncio`` client: the twins of
``echomq.engine.executors`` (scripts, ``Wire.SCRIPTS``; native, ``Wire.NATIVE``), sending the same
commands and mapping the same errors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from echomq.engine.calls import Arg, Call
from echomq.engine.clients import twins
from echomq.engine.errors import Wire6Unsupported
from echomq.engine.executors import raise_mapped
from echomq.engine.once import async_flush_once, async_send_once
from echomq.engine.scripts import script_for
from echomq.engine.transitions import Transition
from echomq.engine.wire import Wire

__all__ = ["AsyncExecutor", "async_executor_for"]


class AsyncExecutor(ABC):
    """Runs transitions on a ``redis.asyncio`` client (``Redis``, ``RedisCluster``)."""

    wire: Wire

    async def call(self, client: Any, transition: Transition, keys: Sequence[str],
                   args: Sequence[Arg]) -> Any:
        try:
            return await self._send(client, transition, keys, args)
        except twins(ResponseError) as exc:
            raise_mapped(exc)

    async def call_many(self, client: Any, calls: Sequence[Call],
                        then: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
        """Runs many calls in one pipeline flush; a reply each (see Executor.call_many: calls
        refused with NOSCRIPT are sent again, together, once their scripts are loaded; ``then``
        queues plain commands after the calls of every flush)."""
        for transition in {call[0] for call in calls}:
            await self.prepare(client, transition)
        replies = await self._flush(client, calls, then)
        no_script = twins(NoScriptError)
        lost = [n for n, reply in enumerate(replies) if isinstance(reply, no_script)]
        if lost:
            for transition in {calls[n][0] for n in lost}:
                await self.load(client, transition)
            again = await self._flush(client, [calls[n] for n in lost], then)
            for n, reply in zip(lost, again, strict=True):
                replies[n] = reply
        return [await self._settle(client, call, reply)
                for call, reply in zip(calls, replies, strict=True)]

    async def _flush(self, client: Any, calls: Sequence[Call],
                     then: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
        commands = [self.command(*call) for call in calls]
        return (await async_flush_once(client, [*commands, *then]))[:len(calls)]

    async def _settle(self, client: Any, call: Call, reply: Any) -> Any:
        if isinstance(reply, twins(NoScriptError)):
            return await self.call(client, *call)
        if isinstance(reply, twins(ResponseError)):
            raise_mapped(reply)
        if isinstance(reply, Exception):  # a connection or cluster error in place of a reply
            raise reply
        return reply

    @abstractmethod
    async def prepare(self, client: Any, transition: Transition) -> None:
        """Refuses ``transition`` before a pipeline is built if this wire cannot run it."""

    @abstractmethod
    async def load(self, client: Any, transition: Transition) -> None:
        """Makes ``transition`` runnable again on a server that refused it with NOSCRIPT."""

    @abstractmethod
    async def _send(self, client: Any, transition: Transition, keys: Sequence[str],
                    args: Sequence[Arg]) -> Any: ...

    @abstractmethod
    def command(self, transition: Transition, keys: Sequence[str],
                 args: Sequence[Arg]) -> tuple[Any, ...]: ...


class AsyncScriptExecutor(AsyncExecutor):
    """wire=5: ``EVALSHA``, the script loaded again on ``NOSCRIPT``."""

    wire = Wire.SCRIPTS

    async def prepare(self, client: Any, transition: Transition) -> None:
        """Nothing: a batch is sent as EVALSHA, and only a NOSCRIPT reply loads the script."""

    async def load(self, client: Any, transition: Transition) -> None:
        await client.script_load(script_for(transition).source)

    async def _send(self, client: Any, transition: Transition, keys: Sequence[str],
                    args: Sequence[Arg]) -> Any:
        command = self.command(transition, keys, args)
        try:
            return await async_send_once(client, *command)
        except twins(NoScriptError):
            await client.script_load(script_for(transition).source)
            return await async_send_once(client, *command)

    def command(self, transition: Transition, keys: Sequence[str],
                 args: Sequence[Arg]) -> tuple[Any, ...]:
        # EVALSHA as a command: a cluster pipeline refuses .evalsha(), not EVALSHA itself
        return ("EVALSHA", script_for(transition).sha, len(keys), *keys, *args)


class AsyncNativeExecutor(AsyncExecutor):
    """wire=6: the trafikey module's ``EMQ.*`` command; script-only transitions are refused."""

    wire = Wire.NATIVE

    async def prepare(self, client: Any, transition: Transition) -> None:
        if transition.native is None:
            raise Wire6Unsupported(transition.name)

    async def load(self, client: Any, transition: Transition) -> None:
        """Nothing: a module's commands are never lost as scripts are."""

    async def _send(self, client: Any, transition: Transition, keys: Sequence[str],
                    args: Sequence[Arg]) -> Any:
        await self.prepare(client, transition)
        return await async_send_once(client, *self.command(transition, keys, args))

    def command(self, transition: Transition, keys: Sequence[str],
                 args: Sequence[Arg]) -> tuple[Any, ...]:
        return (transition.native, len(keys), *keys, *args)


_EXECUTORS: dict[int, AsyncExecutor] = {Wire.SCRIPTS: AsyncScriptExecutor(),
                                         Wire.NATIVE: AsyncNativeExecutor()}


def async_executor_for(wire: int) -> AsyncExecutor:
    """The asyncio executor of ``wire`` (5: scripts, 6: native)."""
    try:
        return _EXECUTORS[wire]
    except KeyError:
        raise ValueError(f"wire must be 5 (scripts) or 6 (native), not {wire!r}") from None
