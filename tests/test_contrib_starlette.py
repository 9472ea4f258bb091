"""The Starlette lifespan, run by Starlette's own TestClient against a real server: the App's
connection is checked at startup and closed at shutdown, and with ``consume=True`` an asyncio
consumer in the web process runs the jobs an endpoint enqueues."""

from __future__ import annotations

import os
from typing import Any

import pytest
import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from echomq import App, Verdict
from echomq.contrib.starlette import async_twin, lifespan
from echomq.embedded import EmbeddedValkey
from echomq.tasks import TaskHandle
from tests.test_worker import wait_until


def tasks_app(conn: redis.Redis) -> App:
    """An echomq App with one async task that keeps its result."""
    app = App(conn, queue="web", check_policy=False)

    @app.task(name="shout", keep_result=True)
    async def shout(text: str) -> str:
        return text.upper()

    return app


def web_app(app: App, **options: Any) -> Starlette:
    def enqueue(request: Request) -> JSONResponse:
        handle = app.tasks["shout"].enqueue(request.query_params["text"])
        return JSONResponse({"id": handle.id})

    return Starlette(routes=[Route("/enqueue", enqueue, methods=["POST"])],
                     lifespan=lifespan(app, **options))


NAME = "web-app"


def clients_of(observer: redis.Redis) -> int:
    """Connections the server holds for the web app (its clients carry its name; the async twin
    takes the App client's options, the name among them)."""
    return sum(1 for client in observer.client_list() if client["name"] == NAME)


def app_client(server: EmbeddedValkey) -> redis.Redis:
    return redis.Redis(port=server.port, client_name=NAME)


@pytest.fixture
def observer(conn: redis.Redis) -> redis.Redis:
    return conn


def test_the_connection_opens_at_startup_and_closes_at_shutdown(
        valkey: EmbeddedValkey, observer: redis.Redis) -> None:
    app = tasks_app(app_client(valkey))
    assert clients_of(observer) == 0
    with TestClient(web_app(app)) as client:
        assert clients_of(observer) == 1  # pinged at startup, before any request
        job_id = client.post("/enqueue", params={"text": "hi"}).json()["id"]
        assert app.queue.outcome(job_id).state == "pending"  # no consumer asked for
    assert clients_of(observer) == 0


def test_an_unreachable_server_fails_the_startup() -> None:
    down = redis.Redis(port=1, socket_connect_timeout=0.5, retry=None)
    with pytest.raises(redis.ConnectionError), TestClient(web_app(tasks_app(down))):
        pass


def test_the_consumer_in_the_web_process_runs_what_an_endpoint_enqueues(
        valkey: EmbeddedValkey, observer: redis.Redis) -> None:
    app = tasks_app(app_client(valkey))
    with TestClient(web_app(app, consume=True, park_cap_ms=200)) as client:
        job_id = client.post("/enqueue", params={"text": "hello"}).json()["id"]
        handle = TaskHandle(job_id, app.queue, app.tasks["shout"], Verdict.ENQUEUED)
        assert handle.result(timeout=4) == "HELLO"  # run by the web process's own consumer
    assert clients_of(observer) == 0  # the consumer's asyncio client is closed too


def test_the_async_twin_talks_to_the_same_server_and_database(valkey: EmbeddedValkey) -> None:
    import asyncio

    conn = redis.Redis(port=valkey.port, db=3, socket_timeout=7)
    conn.set("k", "v")
    twin = async_twin(conn)

    async def read() -> Any:
        try:
            return await twin.get("k")
        finally:
            await twin.aclose(close_connection_pool=True)

    assert asyncio.run(read()) == b"v"
    assert twin.connection_pool.connection_kwargs["socket_timeout"] == 7
    conn.flushall()
    conn.close()
    with pytest.raises(TypeError, match="cluster"):
        async_twin(object())


def test_fastapi_takes_the_same_lifespan(valkey: EmbeddedValkey, observer: redis.Redis) -> None:
    """The guide's FastAPI line, run: FastAPI(lifespan=lifespan(app, consume=True))."""
    from fastapi import FastAPI

    app = tasks_app(app_client(valkey))
    web = FastAPI(lifespan=lifespan(app, consume=True, park_cap_ms=200))

    @web.post("/shout")
    def shout(text: str) -> dict[str, str]:
        return {"id": app.tasks["shout"].enqueue(text).id}

    with TestClient(web) as client:
        assert clients_of(observer) >= 1
        job_id = client.post("/shout", params={"text": "fast"}).json()["id"]
        handle = TaskHandle(job_id, app.queue, app.tasks["shout"], Verdict.ENQUEUED)
        assert handle.result(timeout=4) == "FAST"
    assert clients_of(observer) == 0


def test_the_consumer_in_the_web_process_is_a_live_worker(valkey: EmbeddedValkey,
                                                          observer: redis.Redis) -> None:
    from echomq.consumer.roster import live_workers

    app = tasks_app(app_client(valkey))
    with TestClient(web_app(app, consume=True, park_cap_ms=200)) as client:
        # The consumer's own ``run`` announces it, as it starts on the web process's loop.
        # On wire auto, the wire the server's first reply chose: its trafikey's.
        assert wait_until(lambda: [(r.queues, r.pid, r.wire) for r in live_workers(observer)]
                          == [(["web"], os.getpid(), 6)], timeout=20), live_workers(observer)
        job_id = client.post("/enqueue", params={"text": "seen"}).json()["id"]
        handle = TaskHandle(job_id, app.queue, app.tasks["shout"], Verdict.ENQUEUED)
        assert handle.result(timeout=4) == "SEEN"
    assert live_workers(observer) == []  # a clean stop takes the record off at once
