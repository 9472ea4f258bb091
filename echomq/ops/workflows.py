"""A workflow's tree, as the dashboard shows it: a job, the jobs it waits on (its parents) and
the jobs that wait on it (its dependents, and theirs), each with its state.

The server keeps the links one way: a parent's row lists the jobs waiting on it (``next``), and
a waiting job's row counts the parents it still waits for (``waits``). A task's job also names
its parents in its envelope (``parents``: the results it is given), which is where the tree
finds them; a job admitted with ``Queue.enqueue_after`` from raw payloads shows its dependents
only. States are read in pages (``PAGE`` jobs a pipeline) and the tree is bounded: at most
``PARENTS_COUNTED`` parents counted (``PARENTS_SHOWN`` listed) and ``DEPENDENTS_SHOWN``
dependents walked, so a chord of 10,000 children is shown as counts and a sample.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from echomq.engine import rows as jobrow
from echomq.engine.calls import QueueCalls, outcome_of, payload_bytes, text
from echomq.tasks.envelope import PayloadError, decode_envelope
from echomq.tasks.workflow import leaves

PAGE = 1000
PARENTS_COUNTED = 10_000
PARENTS_SHOWN = 100
DEPENDENTS_SHOWN = 200


def workflow_of(conn: Any, name: str, job_id: str) -> dict[str, Any] | None:
    """The tree around ``job_id`` on queue ``name`` (None when it has no row): its state, the
    parents it waits for (``waits``: how many have not ended yet, for a waiting job), its
    parents by state with a sample, and its dependents as a tree."""
    calls = QueueCalls(name)
    row = calls.key("job", job_id)
    payload, waits, policy = conn.hmget(row, jobrow.PAYLOAD, "waits", "policy")
    [state] = states(conn, calls, [job_id])
    if state == "unknown":
        return None
    parents = _parents_of(payload)
    return {"id": job_id, "state": state, "task": _task_of(payload),
            "waits": None if waits is None else int(text(waits)),
            "policy": "fail" if policy is None else text(policy),
            "parents": _parent_summary(conn, calls, parents),
            "dependents": dependents_of(conn, calls, job_id)}


def states(conn: Any, calls: QueueCalls, job_ids: Sequence[str]) -> list[str]:
    """Each job's state as ``Queue.outcome`` reads it, in pages of ``PAGE`` jobs."""
    found: list[str] = []
    for start in range(0, len(job_ids), PAGE):
        page = job_ids[start:start + PAGE]
        reads = [calls.outcome_reads(job_id) for job_id in page]
        with conn.pipeline(transaction=False) as pipe:
            for commands in reads:
                for command in commands:
                    pipe.execute_command(*command)
            replies = pipe.execute(raise_on_error=False)
        width = len(reads[0]) if reads else 0
        found += [outcome_of(replies[n * width:(n + 1) * width]).state for n in range(len(page))]
    return found


def dependents_of(conn: Any, calls: QueueCalls, job_id: str) -> list[dict[str, Any]]:
    """The jobs waiting on ``job_id``, each with its own dependents, breadth first, at most
    ``DEPENDENTS_SHOWN`` in all (each once, however many parents lead to it)."""
    root: dict[str, Any] = {"dependents": []}
    frontier, seen = [(job_id, root)], {job_id}
    while frontier and len(seen) <= DEPENDENTS_SHOWN:
        nexts = _nexts(conn, calls, [job for job, _ in frontier])
        level = []
        for (_, node), found in zip(frontier, nexts, strict=True):
            for child in found:
                if child in seen or len(seen) > DEPENDENTS_SHOWN:
                    continue
                seen.add(child)
                made = {"id": child, "dependents": []}
                node["dependents"].append(made)
                level.append((child, made))
        for (_, made), state in zip(level, states(conn, calls, [c for c, _ in level]),
                                        strict=True):
            made["state"] = state
        frontier = level
    shown: list[dict[str, Any]] = root["dependents"]
    return shown


def _nexts(conn: Any, calls: QueueCalls, job_ids: Sequence[str]) -> list[list[str]]:
    with conn.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.hget(calls.key("job", job_id), "next")
        replies = pipe.execute(raise_on_error=False)
    return [text(reply).split() if isinstance(reply, bytes | str) else [] for reply in replies]


def _parent_summary(conn: Any, calls: QueueCalls, parents: list[str]) -> dict[str, Any]:
    counted = parents[:PARENTS_COUNTED]
    found = states(conn, calls, counted)
    return {"count": len(parents), "counted": len(counted), "states": dict(Counter(found)),
            "shown": [{"id": job, "state": state}
                      for job, state in zip(counted[:PARENTS_SHOWN], found, strict=False)]}


def _parents_of(payload: Any) -> list[str]:
    """The parents a task envelope names (none for any other payload)."""
    if payload is None:
        return []
    try:
        return list(leaves(decode_envelope(payload_bytes(payload)).parents))
    except PayloadError:
        return []


def _task_of(payload: Any) -> str | None:
    if payload is None:
        return None
    try:
        return decode_envelope(payload_bytes(payload)).task
    except PayloadError:
        return None
