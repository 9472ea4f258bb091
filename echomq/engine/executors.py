"""The two executors of every transition, chosen by ``wire=``: scripts (``Wire.SCRIPTS``, 5) and
native (``Wire.NATIVE``, 6).

Both take the same keys and arguments and receive byte-identical replies; the Queue talks to the
``Executor`` interface and never branches on the wire itself. A transition is sent once, never
through the client's automatic retry (``echomq.engine.once``). What a call does is written once
(``echomq.engine.execution``); this is its blocking shell.
"""

from __future__ import annotations

from echomq.engine.execution import (
    ExecutorMethods,
    NativeWire,
    ScriptWire,
    of_wire,
    raise_mapped,
)
from echomq.engine.program import BlockingShell
from echomq.engine.wire import Wire

__all__ = ["Executor", "NativeExecutor", "ScriptExecutor", "executor_for", "raise_mapped"]


class Executor(ExecutorMethods, BlockingShell):
    """Runs transitions on a redis-py client (``Redis``, ``RedisCluster``) or its pipeline."""


class ScriptExecutor(ScriptWire, Executor):
    """wire=5: ``EVALSHA`` of the transition's Lua script, loaded again on ``NOSCRIPT``."""


class NativeExecutor(NativeWire, Executor):
    """wire=6: the trafikey module's ``EMQ.*`` command; script-only transitions are refused."""


_EXECUTORS: dict[int, Executor] = {Wire.SCRIPTS: ScriptExecutor(), Wire.NATIVE: NativeExecutor()}


def executor_for(wire: int) -> Executor:
    """The executor of ``wire`` (5: scripts, 6: native)."""
    return of_wire(_EXECUTORS, wire)
