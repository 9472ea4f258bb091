"""What a queue checks of its server before its first command: an eviction policy that could drop
its jobs (a warning; asked once per client), and, for a plain queue, a name the server records
sharded (refused)."""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
import weakref
from typing import Any

from redis.exceptions import NoPermissionError, RedisError, ResponseError

from echomq.engine.calls import text
from echomq.engine.clients import twins
from echomq.engine.errors import EvictionPolicyWarning
from echomq.engine.program import Invoke, Program, method
from echomq.queue.shard_layout import mismatch, record_key, recorded

log = logging.getLogger("echomq")
# The clients whose server has answered the policy's question (``evicting_check``): a queue made
# with ``check_policy`` on one of them does not ask it again.
_ANSWERED: weakref.WeakSet[Any] = weakref.WeakSet()


def evicting_policy(reply: Any) -> str | None:
    """The maxmemory-policy of a ``CONFIG GET maxmemory-policy`` reply when it may evict keys."""
    policies = {text(value) for value in reply.values()} if isinstance(reply, dict) else set()
    return next((policy for policy in sorted(policies) if policy != "noeviction"), None)


def eviction_message(policy: str) -> str:
    return (f"maxmemory-policy is {policy!r}: the server may evict queue keys and lose jobs; "
            "echomq needs 'noeviction'")


def server_checks(conn: Any, name: str, *, plain: bool,
                  again: bool = True) -> Program[str | None]:
    """``evicting_check`` (unless ``again`` is False and the server of ``conn`` has answered it
    already: then None), then, for a ``plain`` queue, ``refuse_if_sharded``."""
    policy = None
    if again or conn not in _ANSWERED:
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
    None when it cannot evict or the server does not say (CONFIG denied by ACL, or renamed), or
    cannot be reached (then the question stays open for the client: ``server_checks``)."""
    try:
        reply = yield Invoke(conn, method("config_get", "maxmemory-policy"))
    except twins(ResponseError):
        _answered(conn)  # the server refused the question: that is its answer
        return None
    except twins(RedisError):
        return None
    _answered(conn)
    policy = evicting_policy(reply)
    if policy is not None:
        log.warning(eviction_message(policy))
        warnings.warn(eviction_message(policy), EvictionPolicyWarning,
                      stacklevel=_outside_stacklevel())
    return policy


def _answered(conn: Any) -> None:
    """Note that the server of ``conn`` answered the policy's question (a client that cannot be
    referred to weakly is asked again by each queue)."""
    with contextlib.suppress(TypeError):
        _ANSWERED.add(conn)


def _outside_stacklevel() -> int:
    """The ``stacklevel`` of the nearest caller outside echomq, seen from a function called here
    (a warning then names the user's line, however deep the program that warns)."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("echomq."):
        frame, level = frame.f_back, level + 1
    return level
