"""Django task functions for the tests of echomq.contrib.django (imported once Django's settings
are configured: the @task decorator asks the backend)."""

from __future__ import annotations

from django.tasks import TaskContext, task


@task
def add(x: int, y: int) -> int:
    return x + y


@task
async def greet(name: str) -> str:
    return f"hello {name}"


@task(takes_context=True)
def attempt(context: TaskContext) -> int:
    return context.attempt


@task
def explode(reason: str) -> None:
    raise ValueError(reason)


@task(backend="patient", queue_name="patient")
def flaky(marker_key: str, url: str) -> int:
    """Fails twice, then succeeds: counts its runs in ``marker_key``."""
    import redis

    runs = redis.Redis.from_url(url).incr(marker_key)
    if runs < 3:
        raise RuntimeError(f"run {runs} fails")
    return int(runs)
