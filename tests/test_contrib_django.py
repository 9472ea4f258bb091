"""The Django 6 ``django.tasks`` backend against the real framework and a real server: Django's
own ``task.enqueue`` and ``get_result``, the handler that runs task functions, and real
``echomq worker echomq.contrib.django:handler`` processes. Needs Django 6 (Python 3.12+):
``make test-django``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis

pytest.importorskip("django.tasks", reason="the django.tasks backend needs Django 6")

import django
from django.conf import settings
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.utils import timezone

from echomq import Queue
from echomq.consumer.directives import Done, Reject, RetryIn
from echomq.embedded import EmbeddedValkey
from tests.django_settings import settings_for
from tests.process_groups import group

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tasks(valkey: EmbeddedValkey) -> ModuleType:
    """Django configured for the session's server, and the test task functions."""
    if not settings.configured:
        settings.configure(**settings_for(valkey.url))
        django.setup()
    from tests import django_tasks

    return django_tasks


def queue(conn: redis.Redis, name: str = "default") -> Queue:
    return Queue(conn, name, max_attempts=1, check_policy=False)


def run_once(conn: redis.Redis, name: str = "default") -> Any:
    """What a worker does with the next job: claim it, run the handler, settle its directive."""
    from echomq.contrib.django import handler

    q = queue(conn, name)
    job = q.claim()
    assert job is not None
    directive = handler(job)
    if isinstance(directive, Done):
        q.ack(job, result=directive.result)
    elif isinstance(directive, RetryIn):
        q.retry(job, delay_ms=directive.delay_ms, error=directive.error,
                max_attempts=directive.max_attempts)
    else:
        assert isinstance(directive, Reject)
        q.retry(job, delay_ms=0, error=directive.error, max_attempts=job.attempt)
    return directive


def test_enqueue_admits_a_job_and_get_result_reads_it(tasks: ModuleType,
                                                      conn: redis.Redis) -> None:
    result = tasks.add.enqueue(2, y=3)
    assert result.status == TaskResultStatus.READY
    assert result.id.startswith("JOB:")
    assert queue(conn).outcome(result.id).state == "pending"
    again = tasks.add.get_result(result.id)
    assert (again.status, again.args, again.kwargs) == (TaskResultStatus.READY, [2], {"y": 3})
    assert again.task.func is tasks.add.func
    assert again.enqueued_at == result.enqueued_at
    run_once(conn)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1
    assert result.started_at is not None and result.finished_at >= result.started_at


def test_a_task_that_raises_fails_with_its_class_and_traceback(tasks: ModuleType,
                                                               conn: redis.Redis) -> None:
    result = tasks.explode.enqueue("no luck")
    assert isinstance(run_once(conn), RetryIn)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert "ValueError: no luck" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_dead_list_shows_a_failed_task_as_its_error_and_traceback(
        tasks: ModuleType, valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    from tests.command_line import cli

    conn.delete(queue(conn).key("dead"))
    result = tasks.explode.enqueue("no luck")
    run_once(conn)
    (listed,) = json.loads(cli(valkey, "dead", "list", "default", "--json"))
    assert listed["id"] == result.id
    assert listed["error"].startswith("ValueError: no luck\nTraceback (most recent call last)")
    table = cli(valkey, "dead", "list", "default")
    assert "ValueError: no luck" in table and "exception_class_path" not in table


def test_async_and_context_tasks_run(tasks: ModuleType, conn: redis.Redis) -> None:
    greeting = tasks.greet.enqueue("ada")
    attempt = tasks.attempt.enqueue()
    run_once(conn)
    run_once(conn)
    assert tasks.greet.get_result(greeting.id).return_value == "hello ada"
    assert tasks.attempt.get_result(attempt.id).return_value == 1


def test_run_after_waits_in_the_delayed_set(tasks: ModuleType, conn: redis.Redis) -> None:
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    assert queue(conn).outcome(later.id).state == "delayed"
    assert tasks.add.get_result(later.id).status == TaskResultStatus.READY


def test_other_queues_and_unknown_ids(tasks: ModuleType, conn: redis.Redis) -> None:
    mail = tasks.add.using(queue_name="emails").enqueue(1, 2)
    assert queue(conn, "emails").outcome(mail.id).state == "pending"
    assert tasks.add.get_result(mail.id).task.queue_name == "emails"
    with pytest.raises(InvalidTask, match="not valid for backend"):
        tasks.add.using(queue_name="nowhere")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("JOB:never-admitted")


def test_a_higher_priority_task_runs_first(tasks: ModuleType, conn: redis.Redis) -> None:
    """Django's priority (-100 to 100, higher first, 0 by default) is the job's priority."""
    assert task_backends["default"].supports_priority
    later = tasks.add.enqueue(1, 1)
    first = tasks.add.using(priority=10).enqueue(2, 2)
    last = tasks.add.using(priority=-100).enqueue(3, 3)
    for expected in (first, later, last):
        run_once(conn)
        assert expected.refresh() is None and expected.status == TaskResultStatus.SUCCESSFUL


def test_a_job_acked_keeping_no_result_is_no_django_result(tasks: ModuleType,
                                                           conn: redis.Redis) -> None:
    for job_id, kept in (("JOB:none-kept", None), ("JOB:empty-kept", b"")):
        queue(conn).enqueue(job_id, b"{}")
        job = queue(conn).claim()
        assert job is not None and job.id == job_id
        queue(conn).ack(job, result=kept)
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(job_id)


def test_a_job_that_is_no_django_call_is_rejected(tasks: ModuleType, conn: redis.Redis) -> None:
    queue(conn).enqueue("JOB:junk", b"not json")
    directive = run_once(conn)
    assert isinstance(directive, Reject)
    assert "not a Django task call" in directive.error
    assert queue(conn).outcome("JOB:junk").state == "dead"


def ended(q: Queue, job_id: str, within_s: float) -> bool:
    """Whether the job ends within ``within_s``: waits of 4 s, under the client's 5 s socket
    timeout (``Queue.wait`` blocks on the job's ended key, no polling)."""
    return any(q.wait(job_id, timeout_s=4).ended for _ in range(int(within_s // 4) + 1))


# real workers --------------------------------------------------------------------------------

@contextlib.contextmanager
def worker(server: EmbeddedValkey, tmp_path: Path, *queues: str) -> Iterator[Path]:
    """``echomq worker echomq.contrib.django:handler`` serving ``queues``, with the tests'
    Django settings as its DJANGO_SETTINGS_MODULE."""
    log = tmp_path / "worker.log"
    argv = [sys.executable, "-m", "echomq", "worker", "echomq.contrib.django:handler",
            "--url", server.url]
    for name in queues:
        argv += ["--queue", name]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.django_settings",
           "ECHOMQ_DJANGO_URL": server.url, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as sink, group(argv, 15.0, cwd=ROOT, env=env,
                                        stdin=subprocess.DEVNULL, stdout=sink,
                                        stderr=subprocess.STDOUT):
        yield log


def test_a_real_worker_runs_django_tasks(tasks: ModuleType, valkey: EmbeddedValkey,
                                         conn: redis.Redis, tmp_path: Path) -> None:
    with worker(valkey, tmp_path, "default", "patient") as log:
        ok = tasks.add.enqueue(20, 22)
        bad = tasks.explode.enqueue("boom")
        flaky = tasks.flaky.enqueue("runs", valkey.url)
        for job_id, name in ((ok.id, "default"), (bad.id, "default"), (flaky.id, "patient")):
            assert ended(queue(conn, name), job_id, within_s=30), log.read_text(errors="replace")
    ok.refresh()
    bad.refresh()
    flaky.refresh()
    said = log.read_text(errors="replace")
    for state in ("RUNNING", "SUCCESSFUL"):  # each line once, under DEBUG too
        assert said.count(f"id={ok.id} path=tests.django_tasks.add state={state}") == 1, said
    assert (ok.status, ok.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    assert bad.status == TaskResultStatus.FAILED
    assert bad.errors[0].exception_class_path == "builtins.ValueError"
    # the "patient" backend retries: two failed runs, then a third that succeeds
    assert (flaky.status, flaky.return_value, flaky.attempts) == (
        TaskResultStatus.SUCCESSFUL, 3, 3)
