"""The dashboard's queue-wide limits: shown in ``api/queues`` and ``api/queues/{name}/limits``,
set by a POST behind the guard every state change has (a foreign Host, a cross-origin or
token-less POST refused, the limits unchanged), a bad body refused (400) before anything is
sent, an allowed change answered with the limits as they now apply and logged with who asked;
the page has the column and its button."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue, QueueLimits
from echomq.ops.dashboard import create_app

SITE = "http://127.0.0.1:8042"
CSRF = "page-token"
ALLOWED = {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}


@pytest.fixture
def queue(conn: redis.Redis) -> Queue:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:waiting", b"payload")
    queue.set_limits(concurrency=3)
    return queue


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn, csrf_token=CSRF), base_url=SITE) as client:
        yield client


def set_limits(client: TestClient, headers: dict[str, str], body: object) -> int:
    return client.post("/api/queues/mail/limits", json=body, headers=headers).status_code


def test_the_limits_are_shown(client: TestClient, queue: Queue) -> None:
    shown = {q["name"]: q["limits"] for q in client.get("/api/queues").json()}
    assert shown["mail"] == {"concurrency": 3, "rate": None, "window_ms": 1000}
    assert client.get("/api/queues/mail/limits").json() == shown["mail"]


def test_a_refused_change_changes_nothing(client: TestClient, queue: Queue) -> None:
    body = {"concurrency": 9}
    for origin in ("http://evil.example", "http://127.0.0.1:9999", "null"):
        assert set_limits(client, {"Origin": origin, "X-EchoMQ-CSRF": CSRF}, body) == 403
    assert set_limits(client, {"X-EchoMQ-CSRF": CSRF}, body) == 403  # no Origin at all
    assert set_limits(client, {"Origin": SITE}, body) == 403  # no CSRF token
    foreign = {**ALLOWED, "Host": "evil.example"}
    assert set_limits(client, foreign, body) in (400, 403)
    for bad in ({"concurrency": 0}, {"rate": "5"}, {"rate": True}, {"weight": 2}, [3], None,
                {"window_ms": 10**15}):
        assert set_limits(client, ALLOWED, bad) == 400, bad
    assert queue.limits() == QueueLimits(3, None, 1000)


def test_an_allowed_change_answers_the_limits_and_is_logged(
        client: TestClient, queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="echomq.ops.dashboard"):
        response = client.post("/api/queues/mail/limits", headers=ALLOWED,
                               json={"concurrency": None, "rate": 10, "window_ms": 500})
    assert response.status_code == 200
    assert response.json() == {"concurrency": None, "rate": 10, "window_ms": 500}
    assert queue.limits() == QueueLimits(None, 10, 500)
    said = [record.getMessage() for record in caplog.records]
    assert any(line.startswith('dashboard limits queue="mail" set={"concurrency": null, '
                               '"rate": 10, "window_ms": 500} client=') for line in said), said


def test_the_page_has_the_limits_column_and_its_button(client: TestClient) -> None:
    assert ">limits</th>" in client.get("/").text
    script = client.get("/static/dashboard.js").text
    assert "function limitsButton" in script and "/limits`" in script
