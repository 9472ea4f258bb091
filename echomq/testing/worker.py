"""Running what a test enqueued, in the test's own process, until nothing is left to run: the
consumer and the App's handler as ``echomq worker`` runs them, on the test's server and clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from echomq.consumer.blocking import Consumer
from echomq.consumer.directives import Done, Reject
from echomq.engine.calls import DEFAULT_MAX_ATTEMPTS, Job
from echomq.tasks.app import App
from echomq.tasks.attempts import Directive
from echomq.tasks.envelope import PayloadError, decode_envelope
from echomq.worker.spec import app_queues

# A test whose tasks keep enqueueing more (a task that enqueues itself) is stopped after this
# many attempts rather than left to run for ever.
MAX_ATTEMPTS_RUN = 10_000


@dataclass(frozen=True)
class Ran:
    """One attempt run: the job, its task, the attempt's number and how it ended: "done",
    "retrying" (due again after its back-off, by the test's clock) or "dead"; ``error`` is the
    failure's text (its traceback from the task's frame on), None when done."""

    job_id: str
    task: str
    attempt: int
    outcome: str
    error: str | None


class DeadJobs(AssertionError):
    """Jobs that ended dead while ``run_until_idle`` ran: each one's id, task and error."""

    def __init__(self, dead: list[Ran], ran: list[Ran]) -> None:
        self.dead, self.ran = dead, ran
        lines = [f"{len(dead)} job(s) ended dead:"]
        for each in dead:
            lines += [f"- {each.job_id} ({each.task}, attempt {each.attempt}):",
                      *(f"    {line}" for line in (each.error or "").splitlines())]
        super().__init__("\n".join(lines))


def ran_of(job: Job, directive: Directive) -> Ran:
    """The record of ``job``'s attempt that ended with ``directive``."""
    try:
        task = decode_envelope(job.payload).task
    except PayloadError:
        task = "<no task>"
    if isinstance(directive, Done):
        return Ran(job.id, task, job.attempt, "done", None)
    if isinstance(directive, Reject):
        return Ran(job.id, task, job.attempt, "dead", directive.error)
    last = job.attempt >= (directive.max_attempts or DEFAULT_MAX_ATTEMPTS)
    return Ran(job.id, task, job.attempt, "dead" if last else "retrying", directive.error)


class Worker:
    """Runs the jobs of ``app``'s queues here, in this thread, as ``echomq worker app`` would:
    claims, the App's handler, acks, retries and dead jobs are the real transitions on the
    server. ``clock`` (ms) is the consumer's clock, the test's."""

    def __init__(self, app: App, clock: Callable[[], int]) -> None:
        self.app, self.clock = app, clock
        self.ran: list[Ran] = []
        self.run_schedules()  # a schedule starts at the worker's start, as in a worker process

    def run_until_idle(self, *, raise_dead: bool = True) -> list[Ran]:
        """Admit the periodic ticks due by the clock, recover and promote what is due, then run
        jobs until none is left to run now; again until a round runs none. The attempts run, in
        order. DeadJobs (an AssertionError) when ``raise_dead`` and any of them ended dead.
        Jobs delayed or retrying stay until the clock reaches them (``echomq_clock.advance``)."""
        ran: list[Ran] = []
        queues = [self.app.queue_named(name) for name in app_queues(self.app)]

        def handler(job: Job) -> Directive:
            directive = self.app.handler(job)
            ran.append(ran_of(job, directive))
            return directive

        consumer = Consumer(queues, handler, clock=self.clock, announce=False)
        try:
            while len(ran) < MAX_ATTEMPTS_RUN:
                self.run_schedules()
                if not consumer.beat(park=False):
                    break
            else:
                raise RuntimeError(f"{MAX_ATTEMPTS_RUN} attempts ran and the queues are still "
                                   "not idle (does a task enqueue itself?)")
        finally:
            consumer.close()
        self.ran += ran
        dead = [each for each in ran if each.outcome == "dead"]
        if dead and raise_dead:
            raise DeadJobs(dead, ran)
        return ran

    def run_schedules(self) -> None:
        """One pass of the App's periodic schedules at the clock's now."""
        for entry in self.app.scheduler.entries:
            entry.run_due(self.clock())
