"""enqueue_many: a producer's batch, its jobs parsed and checked whole before any is admitted,
then each admitted as enqueue (delay_ms 0) or enqueue_delayed (delay_ms above 0) would admit it,
and one wake token per job admitted after them all."""

from __future__ import annotations

from echomq.conformance.model.call import Call
from echomq.conformance.model.flat import FlatTransitions
from echomq.conformance.model.replies import array, status
from echomq.conformance.model.state import Value
from echomq.conformance.model.words import dec, pending_score


class ManyEnqueue(FlatTransitions):
    """enqueue_many applied to the keyspace."""

    def _enqueue_many(self, call: Call) -> bytes:
        pending, delayed, wake_key = call.keys
        now, verdicts, admitted = call.numbers["now"], [], 0
        for job in call.jobs:
            row = call.base + b"job:" + job.id
            if row in self.keys:
                verdicts.append(status("DUPLICATE"))
                continue
            fields = {b"p": job.payload, b"t": dec(now)}
            if job.priority:
                fields[b"priority"] = dec(job.priority)
            self.keys[row] = Value(b"hash", fields)
            if job.delay_ms == 0:
                self.zadd(pending, pending_score(job.priority, now), job.id)
                self.emit("enqueued", job.id, 0, priority=job.priority)
            else:
                self.zadd(delayed, now + job.delay_ms, job.id)
                self.emit("enqueued", job.id, 0, due=now + job.delay_ms, priority=job.priority)
            admitted += 1
            verdicts.append(status("ENQUEUED"))
        self.wake(wake_key, admitted)
        return array(verdicts)
