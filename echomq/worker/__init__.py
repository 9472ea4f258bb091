"""Supervised worker processes: ``echomq worker MODULE:HANDLER --queue Q --concurrency N``.

``--queue`` may repeat: one consumer serves the queues in strict priority order, the first
first. The target may name an App (anything with ``handler`` and ``queues``) instead of a
handler: its ``handler`` runs the jobs and its queues are served unless ``--queue`` says
otherwise; an App with ``async def`` tasks runs on the asyncio consumer with
``--async-concurrency`` jobs in flight per process, its plain tasks (if any) in a pool of
threads beside them. Each worker process calls the App's
``worker_started(spec)`` once it reached the server and ``worker_stopping()`` as it stops (also
before it exits to be replaced after a job overran its time limit), when the App has them.

Before any process starts, the server is checked: reachable, and (``wire=6``) with trafikey
loaded; if not, the command exits 1 with one line saying why. The supervisor then runs N consumer
processes, each a fresh interpreter that dies with the supervisor: the die-with-parent signal
(Linux ``PR_SET_PDEATHSIG``, SIGTERM) is set between fork and exec, and a child whose parent is
already gone by then ends at once — so no worker outlives a supervisor killed at any moment.

A child that dies is restarted. One that dies at start (before it reached the server, or within
``QUICK_DEATH_S`` of it without having started a job: an import error, a refused connection, a
server error that cannot heal) is restarted after a growing pause; after ``START_TRIES`` such
deaths in a row the supervisor stops the others and exits 1 with the last reason in one line. A
child that started a job is never a failed start, however soon it died (a job that kills its
process, retried on a short lease): it is replaced at once, and that job alone is charged the
attempts. A child that exits because a job overran ``--time-limit`` (the attempt already failed)
is replaced at once, and so is one whose handler raised SystemExit or KeyboardInterrupt (a
library calling ``sys.exit()``): that attempt is failed and sent first, and the consumer stops.

On SIGTERM or SIGINT the supervisor asks every child to stop: each stops claiming, lets its
running job finish and exits; a child still running after the grace period is killed, and its job
comes back through its lease. The supervisor then exits 0. A second signal kills the children at
once. A child whose supervisor died stops the same way (its running job finishes first).

Each child announces itself in the registry of workers (``echomq.consumer.presence``) while it
runs, and takes its record off on a clean stop. Its record's thread beats every 2 s while a job
runs; while the consumer parks, the flush before each park carries the record instead, as an
announced consumer's own, so an idle worker process costs the server what an idle consumer does.


The pieces: ``spec`` (what a worker runs and the checks before any process starts), ``build``
(each process's consumer), ``child`` (a worker process's life) and ``supervisor`` (the N
processes).
"""

from echomq.worker.build import build_consumer
from echomq.worker.spec import (
    QUICK_DEATH_S,
    START_TRIES,
    WorkersFailed,
    WorkerSpec,
    app_queues,
    check_spec,
    is_app,
    load_callable,
    load_target,
    probe_server,
    runs_async,
)
from echomq.worker.supervisor import run_workers

__all__ = ["QUICK_DEATH_S", "START_TRIES", "WorkerSpec", "WorkersFailed", "app_queues",
           "build_consumer", "check_spec", "is_app", "load_callable", "load_target",
           "probe_server", "run_workers", "runs_async"]
