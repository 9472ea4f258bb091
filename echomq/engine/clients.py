"""The two client libraries echomq accepts: redis-py (``redis.Redis``, ``redis.asyncio``) and
valkey-py (``valkey.Valkey``, ``valkey.asyncio``).

valkey-py is a fork of redis-py: the same calls and replies, and exception classes of the same
names (``ValkeyError`` for ``RedisError``) that are not subclasses of redis-py's. Errors are told
apart by class through ``twins``: a redis-py exception class with its valkey-py namesake. valkey-py
is never imported here: a valkey-py error can only come from a valkey-py client, and one exists
only once ``valkey`` is imported, so its classes are looked up among the modules already loaded.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from functools import cache
from typing import Any

import redis
import redis.exceptions

__all__ = ["async_twin", "client_library", "is_cluster", "twins"]

# redis-py's names that valkey-py spells its own way; every other exception keeps its name.
_RENAMED = {"RedisError": "ValkeyError", "RedisClusterException": "ValkeyClusterException"}
_CLUSTER_CLASSES = {"redis": "RedisCluster", "valkey": "ValkeyCluster"}


def twins(*kinds: type[BaseException]) -> tuple[type[BaseException], ...]:
    """``kinds`` with, for each redis-py exception class among them, its valkey-py namesake
    (when valkey-py is loaded): what to catch or test for an error from either library."""
    return _twins(kinds, sys.modules.get("valkey.exceptions"))


@cache
def _twins(kinds: tuple[type[BaseException], ...], valkey_exceptions: Any
           ) -> tuple[type[BaseException], ...]:
    found = list(kinds)
    for kind in kinds:
        if valkey_exceptions is None or kind.__module__ != redis.exceptions.__name__:
            continue
        twin = getattr(valkey_exceptions, _RENAMED.get(kind.__name__, kind.__name__), None)
        if isinstance(twin, type) and issubclass(twin, BaseException):
            found.append(twin)
    return tuple(found)


def client_library(conn: Any) -> str:
    """``"valkey"`` for a valkey-py client (blocking or asyncio, or its pipeline), else
    ``"redis"``."""
    return "valkey" if type(conn).__module__.partition(".")[0] == "valkey" else "redis"


def is_cluster(conn: Any) -> bool:
    """Whether ``conn`` is a cluster client (blocking or asyncio) of either library."""
    library = client_library(conn)
    name = _CLUSTER_CLASSES[library]
    for module in (f"{library}.cluster", f"{library}.asyncio.cluster"):
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type) and isinstance(conn, kind):
            return True
    return False


def private_twin(conn: Any, socket_timeout: float | None, *, single: bool = True) -> Any:
    """A client of ``conn``'s own class (blocking or asyncio, either library) on a pool of its
    own to the same server, with ``conn``'s options but ``socket_timeout`` as its read timeout,
    keeping one connection for itself when ``single`` (a blocking consumer parks on it; an
    asyncio one's pipelines take the pool's); None for a client that has no single pool (a
    cluster client, or anything else)."""
    pool = getattr(conn, "connection_pool", None)
    if pool is None or is_cluster(conn) or client_library(conn) not in ("redis", "valkey"):
        return None
    options = dict(pool.connection_kwargs)
    options["socket_timeout"] = socket_timeout
    own_pool = type(pool)(connection_class=pool.connection_class, **options)
    client_class: Any = type(conn)
    return client_class(connection_pool=own_pool, single_connection_client=single)


def async_twin(conn: Any) -> Any:
    """A new asyncio client of ``conn``'s library, on a pool of its own, to the server the
    blocking ``conn`` talks to, with its options (TCP, TLS or a Unix socket). TypeError for a
    client that has no single pool (a cluster)."""
    pool = getattr(conn, "connection_pool", None)
    if pool is None or is_cluster(conn):
        raise TypeError("an asyncio twin needs a redis.Redis or valkey.Valkey client of one "
                        "server, not a cluster one")
    library = client_library(conn)
    aio = importlib.import_module(f"{library}.asyncio")
    connections = importlib.import_module(f"{library}.asyncio.connection")
    kind = getattr(connections, pool.connection_class.__name__, connections.Connection)
    client_class = aio.Valkey if library == "valkey" else aio.Redis
    options = dict(pool.connection_kwargs)
    if options.get("retry") is not None:
        options["retry"] = _async_retry(library, options["retry"])
    # from_pool: the twin owns its pool, so closing the twin closes its connections.
    return client_class.from_pool(aio.ConnectionPool(connection_class=kind, **options))


def _async_retry(library: str, retry: Any) -> Any:
    """The asyncio library's ``Retry`` with the blocking ``retry``'s policy (its backoff, tries
    and errors). redis-py 8.2 makes that conversion itself, with a UserWarning for every client;
    earlier versions, and valkey-py, keep the blocking one, whose retries an asyncio connection
    never runs (its calls are coroutines). A retry of another kind is kept as it is."""
    if inspect.iscoroutinefunction(getattr(type(retry), "call_with_retry", None)):
        return retry
    needed = ("_backoff", "_retries", "_supported_errors")
    if not all(hasattr(retry, name) for name in needed):
        return retry
    aio_retry = importlib.import_module(f"{library}.asyncio.retry")
    extra = {} if getattr(retry, "_is_retryable", None) is None \
        else {"is_retryable": retry._is_retryable}
    return aio_retry.Retry(retry._backoff, retry._retries, retry._supported_errors, **extra)
