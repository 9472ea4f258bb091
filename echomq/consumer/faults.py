"""What an error from the server (or the way to it) means for a consumer's loop: ``classify``
tells one that heals by waiting (TRANSIENT: back off, try again) from one that never will
(FATAL: the loop stops with FatalServerError), for redis-py's and valkey-py's errors alike."""

from __future__ import annotations

import enum
from types import TracebackType

import redis

from echomq.engine.clients import twins
from echomq.engine.errors import EchoMQError, StaleLease, reply_code

__all__ = ["Fault", "classify"]

# Server error codes that heal by themselves: a failover (READONLY, MASTERDOWN), a resharding or a
# cluster still forming (TRYAGAIN, CLUSTERDOWN), a restart loading its data (LOADING), a script
# cache flushed between load and call (NOSCRIPT), a long script (BUSY).
TRANSIENT_CODES = frozenset({"TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "LOADING",
                             "NOSCRIPT", "BUSY"})
TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    redis.exceptions.ReadOnlyError, redis.exceptions.NoScriptError,
    redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError,
)
# A refused login or permission never heals by waiting (redis-py files them under ConnectionError).
FATAL_CONNECTION_TYPES: tuple[type[BaseException], ...] = (
    redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError,
)
# redis-py 8.2 raises RedisClusterUnreachableError (no RedisError) when a refresh of the slot map
# reached no node: the nodes coming back heals it. Earlier versions have no such class.
_UNREACHABLE: type[BaseException] | None = getattr(
    redis.exceptions, "RedisClusterUnreachableError", None)
CONNECTION_TYPES: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
    redis.exceptions.ClusterError, ConnectionError, TimeoutError,
    *((_UNREACHABLE,) if _UNREACHABLE is not None else ()),
)


class Fault(enum.Enum):
    """What an error from the server (or the way to it) means for the loop."""

    TRANSIENT = "transient"  # back off and try again
    FATAL = "fatal"  # stop the loop with FatalServerError


def classify(exc: BaseException) -> Fault | None:
    """TRANSIENT or FATAL for a server or connection error (of redis-py or valkey-py); None for
    anything else (a lost lease or an error that is not the server's, which the loop does not
    judge)."""
    if isinstance(exc, twins(*FATAL_CONNECTION_TYPES)):
        return Fault.FATAL
    if isinstance(exc, twins(*TRANSIENT_TYPES, *CONNECTION_TYPES)):
        return Fault.TRANSIENT
    if isinstance(exc, twins(redis.exceptions.ResponseError)):
        return Fault.TRANSIENT if reply_code(exc) in TRANSIENT_CODES else Fault.FATAL
    if isinstance(exc, StaleLease):
        return None
    if client_table_race(exc):
        return Fault.TRANSIENT
    if isinstance(exc, twins(EchoMQError, redis.exceptions.RedisError)):
        return Fault.FATAL
    return None


# The packages whose cluster clients keep a table of nodes that threads share.
CLIENT_PACKAGES = ("redis", "valkey")


def client_table_race(exc: BaseException) -> bool:
    """Whether ``exc`` is a cluster client's table of nodes changing under a reader: redis-py's
    (8.1) and valkey-py's clients move or add a node in that table without their lock when a node
    fails or a MOVED names a new one, so another thread reading it meanwhile gets RuntimeError
    "dictionary ... changed ... during iteration" from inside the library. The table is whole
    again once the writer is done: the call heals by being sent again."""
    if not isinstance(exc, RuntimeError) or "during iteration" not in str(exc):
        return False
    return _raised_in(exc.__traceback__).split(".")[0] in CLIENT_PACKAGES


def _raised_in(trace: TracebackType | None) -> str:
    """The module of the innermost frame of ``trace`` ("" without one)."""
    module = ""
    while trace is not None:
        module = str(trace.tb_frame.f_globals.get("__name__", ""))
        trace = trace.tb_next
    return module
