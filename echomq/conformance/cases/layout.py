"""Cases of rows an earlier release wrote (``payload``, ``attempts``, ``enqueued_at``, ``fence``)
met by every transition that reads the job row's four fields (docs/PROTOCOL.md, "The job row"):
each reads such a row as a row of this layout — recover sends a lease whose ``attempts`` are used
up to dead and puts one back at its ``enqueued_at``, cancel ends a pending job, after waits for a
live parent, ack/retry/extend/progress and settle's release find the lease's ``fence``, a replay
finds the tombstone's, the end hook releases a child at its ``enqueued_at`` — and a row that
becomes a tombstone drops ``payload`` as it drops ``p``. A claim's upgrade of such a row is in
``flat`` (``old_layout_claim_cases``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from echomq.conformance.cases.common import (
    NOW,
    Case,
    Command,
    _argv,
    _case,
    dead,
    delayed,
    held,
    key,
    leased,
    replied,
    row,
    settle,
    waiting,
)
from echomq.conformance.resp import Arg

# Each of the four one-letter fields to the name the earlier layout gave it.
OLD_NAMES = {"p": "payload", "a": "attempts", "t": "enqueued_at", "f": "fence"}


def old_layout(setup: Sequence[Command]) -> list[Command]:
    """``setup`` as the earlier release would have written it: the four fields of every job row
    (an HSET of a ``job:`` key) under their earlier names."""
    out: list[Command] = []
    for command in setup:
        if command[0] == "HSET" and ":job" in str(command[1]):
            fields = [OLD_NAMES.get(str(f), f) if i % 2 == 0 else f
                      for i, f in enumerate(command[2:])]
            command = [*command[:2], *fields]
        out.append(command)
    return out


def after_call(seal: int, *parents: str) -> list[Arg]:
    return [5, key("waiting"), key("pending"), key("dead"), key("job"), key("wake"), "JOB:1",
            NOW, seal, *parents]


def acked(job_id: str) -> list[Command]:
    """What an ack of lease (``job_id``, 1) leaves, in the earlier layout: a tombstone."""
    return old_layout([row(job_id, "a", "1", "t", str(NOW - 5), "f", "1"),
                       ["PEXPIRE", key("job", job_id), "60000"]])


def layout_cases() -> Iterator[Case]:
    yield from lease_cases()
    yield from waiting_cases()


def lease_cases() -> Iterator[Case]:
    """Leases an earlier release's worker held: expired (recover), or settled by their fence."""
    yield _case("recover", "old-layout-spent", _argv("recover"), b":1",
                old_layout(leased("JOB:1", attempt=3, deadline=1)))
    yield _case("recover", "old-layout-back-at-enqueued-at", _argv("recover"), b":1",
                old_layout(leased("JOB:1", attempt=1, deadline=1)))
    yield _case("recover", "old-layout-flagged", _argv("recover"), b":1",
                old_layout([*leased("JOB:1", deadline=1),
                            ["HSET", key("job"), "cancel", "5000", "cancelled", "7"]]))
    yield _case("ack", "old-layout-lease", _argv("ack"), b"+ACKED", old_layout(leased("JOB:1")))
    yield _case("ack_result", "old-layout-lease", _argv("ack_result"), b"+ACKED",
                old_layout(leased("JOB:1")))
    yield _case("ack", "old-layout-replay", _argv("ack"), b"+ACKED", acked("JOB:1"))
    yield _case("retry", "old-layout-spent", _argv("retry"), b"+DEAD",
                old_layout(leased("JOB:1", attempt=3, fence=1)))
    yield _case("retry", "old-layout-retrying", _argv("retry"), b"+RETRYING",
                old_layout(leased("JOB:1")))
    yield _case("extend", "old-layout-lease", _argv("extend"), b"+EXTENDED",
                old_layout(leased("JOB:1")))
    yield _case("extend", "old-layout-stale", _argv("extend", fence=2), b"+STALE",
                old_layout(leased("JOB:1")))
    yield _case("progress", "old-layout-lease", _argv("progress"), b"+RECORDED",
                old_layout(leased("JOB:1")))
    yield _case("settle", "old-layout-release", settle("release", "JOB:1", 2),
                replied([b"RELEASED"], []), old_layout(leased("JOB:1", attempt=2)))
    yield _case("settle", "old-layout-ack-and-retry", list(_argv("settle")),
                replied([b"ACKED", b"DEAD"], []),
                old_layout(leased("JOB:1") + leased("JOB:2", attempt=3, fence=1)))


def waiting_cases() -> Iterator[Case]:
    """Jobs of the earlier layout not leased: cancelled, waited for, released, promoted."""
    yield _case("cancel", "old-layout-pending", _argv("cancel"), b"+CANCELLED",
                old_layout(waiting("JOB:1")))
    yield _case("cancel", "old-layout-delayed", _argv("cancel"), b"+CANCELLED",
                old_layout(delayed("JOB:1", due=NOW + 9)))
    yield _case("cancel", "old-layout-leased", _argv("cancel"), b"+CANCELLING",
                old_layout(leased("JOB:1")))
    yield _case("cancel", "old-layout-tombstone", _argv("cancel"), b"+DONE", acked("JOB:1"))
    yield _case("cancel", "old-layout-dead", _argv("cancel"), b"+DEAD",
                old_layout(dead("JOB:1", NOW - 3)))
    yield _case("after", "old-layout-live-parent", after_call(1, "JOB:2"), b"+WAITING",
                held("JOB:1") + old_layout(waiting("JOB:2")))
    yield _case("after", "old-layout-done-parent", after_call(1, "JOB:2"), b"+READY",
                held("JOB:1") + acked("JOB:2"))
    yield _case("after", "old-layout-waiting-job", after_call(1), b"+READY",
                old_layout(held("JOB:1")))
    yield _case("ack", "old-layout-child-released-at-enqueued-at", _argv("ack"), b"+ACKED",
                [*leased("JOB:1"), ["HSET", key("job"), "next", "JOB:5"],
                 *old_layout(held("JOB:5", at=NOW - 40, hold=False))])
    yield _case("promote", "old-layout-delayed", _argv("promote"), b":1",
                old_layout(delayed("JOB:1", due=NOW - 1)))
