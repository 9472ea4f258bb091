"""Clients for workers: every connection has timeouts, TCP keepalive and a health check, so a
server that died (or a network that dropped it) is noticed instead of waited on for ever.

Parking is safe on these clients and on any other: a consumer parks for less than the socket
timeout of the connection it parks on (``socket_timeout_of``), so a BLPOP always answers first.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlparse

import redis
import redis.asyncio

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
