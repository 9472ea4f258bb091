"""Clients for workers: every connection has timeouts, TCP keepalive and a health check, so a
server that died (or a network that dropped it) is noticed instead of waited on for ever.

These clients keep redis-py's own retry policy for reads; transitions are sent once whatever
it is (``echomq.engine.once``: a transition replayed after a lost reply would be applied twice).

Parking is safe on these clients and on any other: a consumer parks for less than the socket
timeout of the connection it parks on (``socket_timeout_of``), so a BLPOP always answers first.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse

import redis
import redis.asyncio
import redis.connection

from echomq.engine.clients import is_cluster

SOCKET_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
HEALTH_CHECK_S = 30
# Probe an idle connection after 30 s, every 10 s, and drop it after 3 unanswered probes.
KEEPALIVE_OPTIONS: dict[int, int] = {
    option: value
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
    if (option := getattr(socket, name, None)) is not None
}


def client_options(url: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The options a worker's client gets for ``url``, ``overrides`` last. A Unix socket gets no
    keepalive (it has none)."""
    options: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "health_check_interval": HEALTH_CHECK_S,
    }
    if urlparse(url).scheme in ("redis", "rediss", "valkey", "valkeys"):
        options["socket_keepalive"] = True
        options["socket_keepalive_options"] = dict(KEEPALIVE_OPTIONS)
    options.update(overrides)
    return options


def tcp_url(url: str) -> str:
    """redis-py reads ``redis://``; a ``valkey://`` URL means the same."""
    if url.startswith("valkey://"):
        return "redis://" + url.removeprefix("valkey://")
    if url.startswith("valkeys://"):
        return "rediss://" + url.removeprefix("valkeys://")
    return url


def redis_from_url(url: str, **overrides: Any) -> redis.Redis:
    """A blocking client for ``url`` with socket and connect timeouts, TCP keepalive and a
    health check; ``overrides`` are passed on to ``redis.Redis.from_url`` last."""
    return redis.Redis.from_url(tcp_url(url), **client_options(url, overrides))


def async_redis_from_url(url: str, **overrides: Any) -> redis.asyncio.Redis:
    """The asyncio twin of ``redis_from_url``."""
    return redis.asyncio.Redis.from_url(tcp_url(url), **client_options(url, overrides))


def socket_timeout_of(conn: Any) -> float | None:
    """The read timeout (s) of the connections ``conn`` makes (blocking or asyncio client);
    None when it has none or it cannot be told (a cluster client)."""
    pool = getattr(conn, "connection_pool", None)
    if pool is None:  # a cluster client keeps its nodes' options on its nodes manager
        options = getattr(getattr(conn, "nodes_manager", None), "connection_kwargs", None) or {}
        value = options.get("socket_timeout")
        return float(value) if value else None
    try:  # a connection object is made without connecting: it holds the effective default
        probe = pool.connection_class(**pool.connection_kwargs)
    except Exception:
        value = pool.connection_kwargs.get("socket_timeout")
    else:
        value = getattr(probe, "socket_timeout", None)
    return float(value) if value else None


# Options a redis-py pool keeps in its connections' options for itself (maintenance
# notifications bound to that pool, and the timeouts it set out with): a new pool makes its own.
_POOL_OWN_OPTIONS = ("maint_notifications_pool_handler", "oss_cluster_maint_notifications_handler",
                     "orig_host_address", "orig_socket_timeout", "orig_socket_connect_timeout")


def client_like(conn: Any) -> Any:
    """A new blocking client of ``conn``'s own class (``redis.Redis``, ``valkey.Valkey``) on a
    pool of its own, making connections as ``conn``'s do (address, database, credentials, TLS),
    with a worker's socket and connect timeouts, TCP keepalive and health check where ``conn``
    has none. ValueError for a client that is not one server's (a cluster)."""
    pool = getattr(conn, "connection_pool", None)
    if pool is None or is_cluster(conn):
        raise ValueError("a worker rebuilds a client of one server (redis.Redis, "
                         "valkey.Valkey), not a cluster one")
    options = {key: value for key, value in pool.connection_kwargs.items()
               if key not in _POOL_OWN_OPTIONS}
    scheme = "unix" if "path" in options else "redis"
    for key, value in client_options(f"{scheme}://", {}).items():
        if not options.get(key):
            options[key] = value
    client_class: Any = type(conn)
    return client_class(connection_pool=type(pool)(connection_class=pool.connection_class,
                                                   **options))


def server_of(conn: Any) -> tuple[str, str, int, int]:
    """The server and database ``conn`` talks to, as ``server_of_url`` gives them: (``"unix"``,
    path, 0, db) or (``"tcp"``, address, port, db), a host name resolved to its address."""
    return _address(conn.connection_pool.connection_kwargs)


def server_of_url(url: str) -> tuple[str, str, int, int]:
    """As ``server_of``, for the server ``url`` names (ValueError for one that is not a URL)."""
    return _address(redis.connection.parse_url(tcp_url(url)))  # type: ignore[no-untyped-call]


def _address(options: dict[str, Any]) -> tuple[str, str, int, int]:
    db = int(options.get("db") or 0)
    if options.get("path"):
        return ("unix", str(options["path"]), 0, db)
    host = str(options.get("host") or "localhost")
    with contextlib.suppress(OSError):  # a name that does not resolve is compared as it is
        host = socket.gethostbyname(host)
    return ("tcp", host, int(options.get("port") or 6379), db)


def shown_server(conn: Any) -> str:
    """The server and database ``conn`` talks to as a URL without credentials, for messages."""
    options = conn.connection_pool.connection_kwargs
    db = int(options.get("db") or 0)
    if options.get("path"):
        return f"unix://{options['path']}" + (f"?db={db}" if db else "")
    tls = "SSL" in conn.connection_pool.connection_class.__name__
    return f"{'rediss' if tls else 'redis'}://{options.get('host')}:{options.get('port')}/{db}"


def shown_url(url: str) -> str:
    """``url`` without its credentials (a user and password before ``@``, a ``password`` or
    ``username`` option), for messages; of what is not a URL (an unclosed ``[``), what follows
    its last ``@``."""
    try:
        parts = urlparse(url)
    except ValueError:
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}{rest.rpartition('@')[2]}"
    options = [(key, value) for key, value in parse_qsl(parts.query)
               if key not in ("password", "username")]
    query = urlencode(options)
    return (f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
            + (f"?{query}" if query else ""))
