"""The dashboard's Cancel of one job: behind the guard every state change has (a cross-origin or
token-less POST is refused and the job stays as it is), a bad id refused before anything is
sent, an allowed cancel answered with its verdict and logged with who asked; the job view has
the button."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue, Verdict
from echomq.ops.dashboard import create_app

SITE = "http://127.0.0.1:8042"
CSRF = "page-token"
ALLOWED = {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}


@pytest.fixture
def queue(conn: redis.Redis) -> Queue:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:waiting", b"payload")
    return queue


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn, csrf_token=CSRF), base_url=SITE) as client:
        yield client


def cancel(client: TestClient, headers: dict[str, str], job_id: str = "JOB:waiting") -> int:
    return client.post(f"/api/queues/mail/jobs/{job_id}/cancel", json={},
                       headers=headers).status_code


def test_a_cross_origin_or_token_less_cancel_is_refused_and_changes_nothing(
        client: TestClient, queue: Queue) -> None:
    for origin in ("http://evil.example", "http://127.0.0.1:9999", "null"):
        assert cancel(client, {"Origin": origin, "X-EchoMQ-CSRF": CSRF}) == 403
    assert cancel(client, {"X-EchoMQ-CSRF": CSRF}) == 403  # no Origin at all
    assert cancel(client, {"Origin": SITE}) == 403  # no CSRF token
    assert cancel(client, {"Origin": SITE, "X-EchoMQ-CSRF": "guessed"}) == 403
    assert queue.outcome("JOB:waiting").state == "pending"


def test_a_cancel_from_the_page_answers_its_verdict_and_is_logged_with_who(
        client: TestClient, queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="echomq.ops.dashboard"):
        response = client.post("/api/queues/mail/jobs/JOB:waiting/cancel", json={},
                               headers=ALLOWED)
    assert response.status_code == 200
    assert response.json() == {"id": "JOB:waiting", "verdict": Verdict.CANCELLED.value}
    assert queue.outcome("JOB:waiting").state == "cancelled"
    said = [record.getMessage() for record in caplog.records]
    assert any(line.startswith('dashboard cancel queue="mail" id="JOB:waiting" '
                               'verdict=CANCELLED client=') for line in said), said
    again = client.post("/api/queues/mail/jobs/JOB:nothere/cancel", json={}, headers=ALLOWED)
    assert again.json()["verdict"] == Verdict.UNKNOWN.value


def test_a_bad_id_or_queue_is_refused_before_anything_is_sent(client: TestClient,
                                                              queue: Queue) -> None:
    assert cancel(client, ALLOWED, "not-a-job-id") == 400
    response = client.post("/api/queues/a%7Bb/jobs/JOB:waiting/cancel", json={},
                           headers=ALLOWED)
    assert response.status_code == 400
    assert queue.outcome("JOB:waiting").state == "pending"


def test_the_job_view_has_the_cancel_button(client: TestClient) -> None:
    assert 'id="job-cancel"' in client.get("/").text
    script = client.get("/static/dashboard.js").text
    assert "/cancel`" in script and "cancelJob(queue, id)" in script
