"""``SettleAll`` performed, written once for both consumer shells: the settle calls of one round
on several queues of one client (a spread consumer's shards) as one program
(``echomq.engine.program``), which the blocking shell drives and the asyncio one awaits.

On one server the calls (each followed by its queue's watch tokens when it sends them) go out
in one flush: one round trip, each call sent once (``echomq.engine.once``). A server error is that
call's own reply (its shard's outcomes wait for the next round); a call refused with NOSCRIPT (a
server that lost its scripts) is sent again alone once its script is loaded. On a cluster the
round is one round trip too (``echomq.engine.scatter``): the calls grouped by their slot's node,
every node's group written before any reply is read, each call sent once. A node's failed
connection is its own calls' error only (their shards rest; the others go on); a call refused
with MOVED or ASK (its slot moved: nothing ran) is sent again alone through the cluster client,
which follows the refusal. Queues on different clients are sent to one by one, each on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq.consumer.actions import Settle
from echomq.engine.calls import Call, settled
from echomq.engine.clients import is_cluster
from echomq.engine.execution import ExecutorMethods
from echomq.engine.program import Flush, Program, Scatter
from echomq.engine.scatter import redirected
from echomq.queue.methods import QueueMethods
from echomq.queue.parking import WATCH_ROLE, watch_commands


def settle_all(queues: Sequence[Any], calls: Sequence[Settle], lease_ms: int,
               retention_ms: int | None, now: int | None) -> Program[list[Any]]:
    """For each of ``calls`` (on ``queues[call.index]``), in order: (verdicts, jobs claimed),
    or the exception that call met. Raised: what failed them all (the flush's connection)."""
    if not calls:
        return []
    conn = queues[calls[0].index].conn
    if len(calls) == 1 or any(queues[call.index].conn is not conn for call in calls):
        return (yield from one_by_one(queues, calls, lease_ms, retention_ms, now))
    made = [(queues[call.index], settle_call(queues[call.index], call, lease_ms, retention_ms,
                                             now)) for call in calls]
    commands: list[Any] = []
    places: list[int] = []  # where each call's reply is among the flush's
    for call, (queue, made_call) in zip(calls, made, strict=True):
        places.append(len(commands))
        commands.append(queue.executor.command(*made_call))
        if call.watch:
            commands.extend(watch_commands(queue.key(WATCH_ROLE)))
    replies = yield (Scatter if is_cluster(conn) else Flush)(conn, commands)
    results: list[Any] = []
    for call, (queue, made_call), place in zip(calls, made, places, strict=True):
        if redirected(replies[place]):  # its slot moved: nothing ran
            results.extend((yield from one_by_one(queues, [call], lease_ms, retention_ms, now)))
            continue
        try:
            reply = yield from ExecutorMethods._settle.program(queue.executor, conn, made_call,
                                                              replies[place])
            results.append(settled(reply))
        except Exception as exc:
            results.append(exc)
    return results


def one_by_one(queues: Sequence[Any], calls: Sequence[Settle], lease_ms: int,
               retention_ms: int | None, now: int | None) -> Program[list[Any]]:
    """``settle_all``, each call sent on its own (a cluster: to its slot's node, once)."""
    results: list[Any] = []
    for call in calls:
        round_ = call.round
        try:
            results.append((yield from QueueMethods.settle_leased.program(
                queues[call.index], round_.outcomes, round_.claim, lease_ms, retention_ms, now,
                watch=call.watch, claim_id=round_.claim_id)))
        except Exception as exc:
            results.append(exc)
    return results


def settle_call(queue: Any, call: Settle, lease_ms: int, retention_ms: int | None,
                now: int | None) -> Call:
    """The settle call of ``call``'s round on ``queue`` (its outcomes came from its claims)."""
    round_ = call.round
    made: Call = queue.calls.settle(round_.outcomes, round_.claim, lease_ms, retention_ms, now,
                                    leased=True, claim_id=round_.claim_id)
    return made
