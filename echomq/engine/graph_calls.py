"""The calls that admit a job waiting for others (docs/PROTOCOL.md "Dependencies"): what
``ENQUEUE_AFTER`` and ``AFTER`` send, each argument checked by the protocol's rule before
anything is sent."""

from __future__ import annotations

from collections.abc import Sequence

from echomq.engine import transitions as t
from echomq.engine.calls import (
    Arg,
    Call,
    Payload,
    QueueCalls,
    checked_arg,
    payload_bytes,
)
from echomq.engine.deadlines import priority_args
from echomq.engine.errors import ArgumentError
from echomq.engine.native import checked_id, checked_now
from echomq.engine.transitions import ERRORS

# What a dead parent does to the jobs waiting on it: they go dead with its error ("fail"), run
# as if it had succeeded, its result None ("ignore"), or run at once ("continue").
POLICIES = ("fail", "ignore", "continue")


def checked_policy(policy: str) -> str:
    """``policy`` if it is one of ``POLICIES``; ArgumentError with the server's words."""
    if policy not in POLICIES:
        raise ArgumentError(ERRORS["POLICY"].text)
    return policy


def enqueue_after(calls: QueueCalls, job_id: str, payload: Payload, now: int | None,
                  policy: str, priority: int) -> Call:
    """Admit ``job_id`` waiting (its parents named by ``after`` calls, the last one sealing)."""
    args: tuple[Arg, ...] = (checked_id(job_id), payload_bytes(payload), checked_now(now),
                             checked_policy(policy), *priority_args(priority))
    return t.ENQUEUE_AFTER, t.keys_for(calls.base, t.ENQUEUE_AFTER, job_id,
                                       events=calls.events), args


def after(calls: QueueCalls, job_id: str, now: int | None, seal: bool,
          parents: Sequence[str]) -> Call:
    """Name ``parents`` of the waiting ``job_id``; with ``seal``, no more come."""
    args: tuple[Arg, ...] = (checked_id(job_id), checked_now(now),
                             checked_arg("seal", int(seal)),
                             *(checked_id(parent) for parent in parents))
    return t.AFTER, t.keys_for(calls.base, t.AFTER, job_id, events=calls.events), args
