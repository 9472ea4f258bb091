"""The two executors of every transition, chosen by ``wire=``: scripts (``Wire.SCRIPTS``, 5) and
native (``Wire.NATIVE``, 6).

Both take the same keys and arguments and receive byte-identical replies; the Queue talks to the
``Executor`` interface and never branches on the wire itself. A transition is sent once, never
through the client's automatic retry (``echomq.engine.once``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from echomq.engine.calls import Arg, Call
from echomq.engine.clients import twins
from echomq.engine.errors import Wire6Unsupported, mapped_error
from echomq.engine.once import flush_once, send_once
from echomq.engine.scripts import script_for
from echomq.engine.transitions import Transition
from echomq.engine.wire import Wire


def raise_mapped(exc: BaseException) -> None:
    """Re-raise a server error as the echomq error its code names, if it is one of ours; an
    ``EMQ.*`` command the server does not know means trafikey is missing there."""
    mapped = mapped_error(exc)
    if mapped is not None:
        raise mapped from exc
    raise exc


class Executor(ABC):
    """Runs transitions on a redis-py client (``Redis``, ``RedisCluster``) or its pipeline."""

    wire: Wire

    def call(self, client: Any, transition: Transition, keys: Sequence[str],
             args: Sequence[Arg]) -> Any:
        try:
            return self._send(client, transition, keys, args)
        except twins(ResponseError) as exc:
            raise_mapped(exc)

    def call_many(self, client: Any, calls: Sequence[Call],
                  then: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
        """Runs many calls in one pipeline flush; a reply each. Every transition is prepared (and
        a refused one raises) before anything is sent. Calls refused with NOSCRIPT (a server that
        lost its scripts) have their scripts loaded once and are sent again in one more flush.
        ``then``: plain commands sent after the calls in every flush (their replies dropped)."""
        for transition in {call[0] for call in calls}:
            self.prepare(client, transition)
        replies = self._flush(client, calls, then)
        no_script = twins(NoScriptError)
        lost = [n for n, reply in enumerate(replies) if isinstance(reply, no_script)]
        if lost:
            for transition in {calls[n][0] for n in lost}:
                self.load(client, transition)
            again = self._flush(client, [calls[n] for n in lost], then)
            for n, reply in zip(lost, again, strict=True):
                replies[n] = reply
        return [self._settle(client, call, reply) for call, reply in zip(calls, replies,
                                                                         strict=True)]

    def _flush(self, client: Any, calls: Sequence[Call],
               then: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
        commands = [self.command(*call) for call in calls]
        return flush_once(client, [*commands, *then])[:len(calls)]

    def _settle(self, client: Any, call: Call, reply: Any) -> Any:
        if isinstance(reply, twins(NoScriptError)):
            # The server lost its scripts mid-flush (restart, SCRIPT FLUSH): run this one again.
            return self.call(client, *call)
        if isinstance(reply, twins(ResponseError)):
            raise_mapped(reply)
        if isinstance(reply, Exception):  # a connection or cluster error in place of a reply
            raise reply
        return reply

    @abstractmethod
    def prepare(self, client: Any, transition: Transition) -> None:
        """Refuses ``transition`` before a pipeline is built if this wire cannot run it."""

    @abstractmethod
    def load(self, client: Any, transition: Transition) -> None:
        """Makes ``transition`` runnable again on a server that refused it with NOSCRIPT."""

    @abstractmethod
    def command(self, transition: Transition, keys: Sequence[str],
                args: Sequence[Arg]) -> tuple[Any, ...]:
        """The command that runs ``transition`` on this wire."""

    @abstractmethod
    def _send(self, client: Any, transition: Transition, keys: Sequence[str],
              args: Sequence[Arg]) -> Any: ...


class ScriptExecutor(Executor):
    """wire=5: ``EVALSHA`` of the transition's Lua script, loaded again on ``NOSCRIPT``."""

    wire = Wire.SCRIPTS

    def command(self, transition: Transition, keys: Sequence[str],
                args: Sequence[Arg]) -> tuple[Any, ...]:
        # EVALSHA as a command: a RedisCluster pipeline refuses .evalsha(), not EVALSHA itself
        return ("EVALSHA", script_for(transition).sha, len(keys), *keys, *args)

    def _send(self, client: Any, transition: Transition, keys: Sequence[str],
              args: Sequence[Arg]) -> Any:
        command = self.command(transition, keys, args)
        try:
            return send_once(client, *command)
        except twins(NoScriptError):
            client.script_load(script_for(transition).source)
            return send_once(client, *command)

    def prepare(self, client: Any, transition: Transition) -> None:
        """Nothing: a batch is sent as EVALSHA, and only a NOSCRIPT reply loads the script."""

    def load(self, client: Any, transition: Transition) -> None:
        client.script_load(script_for(transition).source)


class NativeExecutor(Executor):
    """wire=6: the trafikey module's ``EMQ.*`` command; script-only transitions are refused."""

    wire = Wire.NATIVE

    def command(self, transition: Transition, keys: Sequence[str],
                args: Sequence[Arg]) -> tuple[Any, ...]:
        return (transition.native, len(keys), *keys, *args)

    def _send(self, client: Any, transition: Transition, keys: Sequence[str],
              args: Sequence[Arg]) -> Any:
        self.prepare(client, transition)
        return send_once(client, *self.command(transition, keys, args))

    def prepare(self, client: Any, transition: Transition) -> None:
        if transition.native is None:
            raise Wire6Unsupported(transition.name)

    def load(self, client: Any, transition: Transition) -> None:
        """Nothing: a module's commands are never lost as scripts are."""


_EXECUTORS: dict[int, Executor] = {Wire.SCRIPTS: ScriptExecutor(), Wire.NATIVE: NativeExecutor()}


def executor_for(wire: int) -> Executor:
    """The executor of ``wire`` (5: scripts, 6: native)."""
    try:
        return _EXECUTORS[wire]
    except KeyError:
        raise ValueError(f"wire must be 5 (scripts) or 6 (native), not {wire!r}") from None
