"""What a queue checks of its server as it is made: an eviction policy that could drop its jobs
(a warning), and, for a plain queue, a name the server records sharded (refused)."""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any

from redis.exceptions import NoPermissionError, RedisError

from echomq.engine.calls import text
from echomq.engine.clients import twins
from echomq.engine.errors import EvictionPolicyWarning
from echomq.engine.program import Invoke, Program, method
from echomq.queue.shard_layout import mismatch, record_key, recorded

log = logging.getLogger("echomq")


def evicting_policy(reply: Any) -> str | None:
    """The maxmemory-policy of a ``CONFIG GET maxmemory-policy`` reply when it may evict keys."""
    policies = {text(value) for value in reply.values()} if isinstance(reply, dict) else set()
    return next((policy for policy in sorted(policies) if policy != "noeviction"), None)


def eviction_message(policy: str) -> str:
    return (f"maxmemory-policy is {policy!r}: the server may evict queue keys and lose jobs; "
            "echomq needs 'noeviction'")


def server_checks(conn: Any, name: str, *, plain: bool) -> Program[str | None]:
    """``evicting_check``, then, for a ``plain`` queue, ``refuse_if_sharded``."""
    policy = yield from evicting_check(conn)
    if plain:
        yield from refuse_if_sharded(conn, name)
    return policy


def refuse_if_sharded(conn: Any, name: str) -> Program[None]:
    """Refuse a plain queue ``name`` (ShardError) when the server records it sharded: its jobs
    are on its shards, where a plain queue would never look; one GET. A client the server
    lets read nothing but its queue's transitions (an ACL) is not asked."""
    try:
        found = recorded((yield Invoke(conn, method("get", record_key(name)))))
    except twins(NoPermissionError):
        return
    if found is not None:
        raise mismatch(name, None, found)


def evicting_check(conn: Any) -> Program[str | None]:
    """Warns (EvictionPolicyWarning, and the ``echomq`` log) when the server's maxmemory-policy
    may evict keys: a queue's jobs would then vanish under memory pressure. Returns that policy;
    None when it cannot evict or the server does not say (CONFIG denied by ACL, or renamed)."""
    try:
        policy = evicting_policy((yield Invoke(conn, method("config_get", "maxmemory-policy"))))
    except twins(RedisError):
        return None
    if policy is not None:
        log.warning(eviction_message(policy))
        warnings.warn(eviction_message(policy), EvictionPolicyWarning,
                      stacklevel=_outside_stacklevel())
    return policy


def _outside_stacklevel() -> int:
    """The ``stacklevel`` of the nearest caller outside echomq, seen from a function called here
    (a warning then names the user's line, however deep the program that warns)."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("echomq."):
        frame, level = frame.f_back, level + 1
    return level
