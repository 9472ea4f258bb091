"""The server's clock (``TIME``), the clock every transition sent with ``now=None`` runs on: one
decoder of its reply, for blocking and asyncio clients of either library, plain or cluster."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["async_server_ms", "server_ms", "time_ms"]


def time_ms(reply: Any) -> int:
    """The ms of a ``TIME`` reply: ``[seconds, microseconds]`` (numbers or their text), or the
    per-node mapping of such replies that a cluster client gives when it asks several nodes
    (the first node's; every node's clock is the server's)."""
    if isinstance(reply, Mapping):
        if not reply:
            raise ValueError("a TIME reply from no node")
        reply = next(iter(reply.values()))
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def server_ms(conn: Any) -> int:
    """The server's clock in ms, read through the blocking client ``conn``."""
    return time_ms(conn.time())


async def async_server_ms(conn: Any) -> int:
    """The server's clock in ms, read through the asyncio client ``conn``."""
    return time_ms(await conn.time())
