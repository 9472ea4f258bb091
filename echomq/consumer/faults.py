"""What an error from the server (or the way to it) means for a consumer's loop: ``classify``
tells one that heals by waiting (TRANSIENT: back off, try again) from one that never will
(FATAL: the loop stops with FatalServerError), for redis-py's and valkey-py's errors alike."""

from __future__ import annotations

import enum

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
CONNECTION_TYPES: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
    redis.exceptions.ClusterError, ConnectionError, TimeoutError,
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
    if isinstance(exc, twins(EchoMQError, redis.exceptions.RedisError)):
        return Fault.FATAL
    return None
