"""The executors of every transition, chosen by ``wire=``: scripts (``Wire.SCRIPTS``, 5), native
(``Wire.NATIVE``, 6), and auto (``Wire.AUTO``, the default: native where the server runs it,
else scripts).

Every one takes the same keys and arguments and receives byte-identical replies; the Queue talks
to the ``Executor`` interface and never branches on the wire itself. A transition is sent once,
never through the client's automatic retry (``echomq.engine.once``). What a call does is written
once (``echomq.engine.execution``); this is its blocking shell.
"""

from __future__ import annotations

from echomq.engine.execution import (
    AutoWire,
    ExecutorMethods,
    NativeWire,
    ScriptWire,
    of_wire,
    raise_mapped,
)
from echomq.engine.program import BlockingShell
from echomq.engine.wire import Wire

__all__ = ["AutoExecutor", "Executor", "NativeExecutor", "ScriptExecutor", "executor_for",
           "raise_mapped"]


class Executor(ExecutorMethods, BlockingShell):
    """Runs transitions on a redis-py client (``Redis``, ``RedisCluster``) or its pipeline."""


class ScriptExecutor(ScriptWire, Executor):
    """wire=5: ``EVALSHA`` of the transition's Lua script, loaded again on ``NOSCRIPT``."""


class NativeExecutor(NativeWire, Executor):
    """wire=6: the trafikey module's ``EMQ.*`` command; script-only transitions are refused."""


class AutoExecutor(AutoWire, Executor):
    """wire="auto": native commands while the server runs them, else scripts (``AutoWire``)."""


_EXECUTORS: dict[int, Executor] = {Wire.SCRIPTS: ScriptExecutor(), Wire.NATIVE: NativeExecutor()}


def executor_for(wire: int | str, queue: str = "") -> Executor:
    """The executor of ``wire`` (5: scripts, 6: native, shared; auto: one of ``queue``'s own,
    which learns from its replies)."""
    return of_wire(_EXECUTORS, wire, lambda: AutoExecutor(queue))
