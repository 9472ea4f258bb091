"""The lockstep machine's producer batches (a mixin of QueueMachine in tests/test_stateful.py):
enqueue_many admits 0 to 4 jobs drawn from the pool (some live already, some given twice, some
delayed, at a priority or not, mixed payloads), and each verdict is checked against what the
machine knows: an id whose row exists, or given earlier in the batch, is DUPLICATE and changes
nothing; one admitted was neither live nor a ghost, and waits where its single enqueue would have
put it, in pending in its band or in delayed at now + delay_ms. The jobs admitted are live."""

from __future__ import annotations

from typing import Any

from hypothesis import event, strategies as st
from hypothesis.stateful import rule

from echomq.conformance.model import raw
from echomq.engine.transitions import ENQUEUE_MANY
from tests.stateful_priority import PRIORITIES, band
from tests.stateful_world import PAYLOADS, ZSETS, Argv, key, parsed

DELAYS = st.sampled_from([0, 0, 1, 1_000, 60_000])
Job = tuple[bytes, bytes, int, int]  # id, payload, delay_ms, priority


def batch_jobs(argv: Argv) -> list[Job]:
    """A valid enqueue_many's jobs, after its keys and ``now``."""
    words = argv[1 + int(argv[0]) + 1:]
    return [(raw(words[i]), raw(words[i + 1]), int(words[i + 2]), int(words[i + 3]))
            for i in range(0, len(words), 4)]


class Batches:
    """The enqueue_many rule; the machine gives ``draw_id``, ``execute``, ``admitted_at``,
    ``model``, ``now``, ``live`` and ``ghosts``."""

    @rule(data=st.data())
    def enqueue_batch(self, data: st.DataObject) -> None:
        machine: Any = self
        words: Argv = []
        for _ in range(data.draw(st.integers(0, 4), label="jobs")):
            words += [self.batch_id(data), data.draw(PAYLOADS, label="payload"),
                      data.draw(DELAYS, label="delay_ms"), data.draw(PRIORITIES, label="priority")]
        self.admitted_many([3, key(b"pending"), key(b"delayed"), key(b"wake"), machine.now,
                            *words])

    def batch_id(self, data: st.DataObject) -> bytes:
        """An id of the pool but a ghost's, often a live one's (a DUPLICATE)."""
        machine: Any = self
        live = sorted(machine.live)
        if live and data.draw(st.booleans(), label="a live id"):
            job_id: bytes = data.draw(st.sampled_from(live), label="id")
            return job_id
        return bytes(machine.draw_id(data))

    def admitted_many(self, argv: Argv) -> bytes:
        """An enqueue_many (``argv``: numkeys 3, pending, delayed, wake, now, then each job's id,
        payload, delay_ms and priority), checked job by job; its reply."""
        machine: Any = self
        jobs = batch_jobs(argv)
        rows = {job_id: key(b"job", job_id) for job_id, *_ in jobs}
        known = {job_id for job_id, row in rows.items() if machine.model.kind(row) == b"hash"}
        before = {job_id: self.footprint(job_id) for job_id in known}
        reply, outcomes = machine.execute(ENQUEUE_MANY, argv)
        if reply.startswith(b"-"):
            event("enqueue_many refused")
            return bytes(reply)
        verdicts = parsed(reply)
        assert len(verdicts) == len(jobs), (jobs, verdicts)
        first: dict[bytes, Job] = {}
        for job, verdict in zip(jobs, verdicts, strict=True):
            if job[0] in known or job[0] in first:
                assert verdict == b"DUPLICATE", (job[0], verdict)
                twice = job[0] in first
                event("enqueue_many: " + ("an id given twice" if twice else "a duplicate"))
                continue
            assert verdict == b"ENQUEUED", (job[0], verdict)
            assert job[0] not in machine.live and job[0] not in machine.ghosts, job[0]
            first[job[0]] = job
        for job_id, footprint in before.items():  # invariant 2: admit once
            assert self.footprint(job_id) == footprint, job_id
        for job in first.values():
            self.check_placed(job, int(argv[4]))
        if not first:
            assert outcomes["lua"].after == outcomes["lua"].before
        share = "none" if not first else "all" if len(first) == len(jobs) else "some"
        event(f"enqueue_many: {share} of its jobs admitted")
        return bytes(reply)

    def footprint(self, job_id: bytes) -> Any:
        """What a DUPLICATE of ``job_id`` leaves as it was: its row, and its scores in the
        queue's sets."""
        machine: Any = self
        row = machine.model.keys[key(b"job", job_id)]
        sets = {role: dict(machine.model.zitems(key(role))) for role in ZSETS
                if machine.model.kind(key(role)) == b"zset"}
        return dict(row.data), {role: scores[job_id] for role, scores in sets.items()
                                if job_id in scores}

    def check_placed(self, job: Job, now: int) -> None:
        """A job the batch admitted (the first time its id was given) holds that job's payload
        and waits where its single enqueue would have put it: in pending in its priority's band,
        or in delayed at now + delay_ms. It is live."""
        machine: Any = self
        job_id, payload, delay_ms, priority = job
        assert machine.model.hget(key(b"job", job_id), b"p") == payload, job_id
        if delay_ms:
            assert dict(machine.model.zitems(key(b"delayed")))[job_id] == now + delay_ms, job
        else:
            assert band(dict(machine.model.zitems(key(b"pending")))[job_id]) == priority, job
        machine.admitted_at(job_id, priority)
