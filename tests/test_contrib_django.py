"""The Django 6 ``django.tasks`` backend against the real framework and a real server: Django's
own ``task.enqueue`` and ``get_result`` over the jobs it admits. Needs Django 6 (Python 3.12+):
``make test-django``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest
import redis

pytest.importorskip("django.tasks", reason="the django.tasks backend needs Django 6")

import django
from django.conf import settings
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.utils import timezone
from django.utils.module_loading import import_string

from echomq import Queue
from echomq.contrib.django import Call, error_text
from echomq.embedded import EmbeddedValkey
from tests.django_settings import settings_for

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


def run_once(conn: redis.Redis, name: str = "default") -> None:
    """What a worker does with the next job: claim it, run the task function, and settle, keeping
    the call's result or the exception."""
    q = queue(conn, name)
    job = q.claim()
    assert job is not None
    call = Call.decode(job.payload)
    task = import_string(call.task)
    started = timezone.now()
    try:
        value = task.call(*call.args, **call.kwargs)
    except Exception as exc:
        q.retry(job, delay_ms=0, error=error_text(exc), max_attempts=1)
        return
    call.ran = {"started_at": started.isoformat(), "finished_at": timezone.now().isoformat(),
                "worker_id": "test", "return_value": value}
    q.ack(job, result=call.encode())


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
    run_once(conn)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert "ValueError: no luck" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


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


