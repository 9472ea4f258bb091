"""The dashboard's lane controls: pause and resume a queue or a lane from the page (guarded and
logged like the other state changes), and each group's knobs and state."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue
from echomq.ops.dashboard import create_app

NOW = 1_700_000_000_000
SITE = "http://127.0.0.1:8042"
CSRF = "page-token"
HEADERS = {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn, csrf_token=CSRF), base_url=SITE) as client:
        yield client


@pytest.fixture
def queue(conn: redis.Redis) -> Queue:
    queue = Queue(conn, "mail")
    queue.enqueue_many([("JOB:1", b"", "acme"), ("JOB:2", b"", "acme"), ("JOB:3", b"", "zed"),
                        ("JOB:4", b"")], now=NOW)
    return queue


def test_pause_and_resume_a_lane_and_the_queue_from_the_page(
        client: TestClient, queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="echomq.ops.dashboard"):
        answer = client.post("/api/queues/mail/pause", json={"lane": "acme"}, headers=HEADERS)
        assert answer.json() == {"paused": False, "paused_lanes": ["acme"]}
        shown = next(s for s in client.get("/api/queues").json() if s["name"] == "mail")
        assert shown["paused"] is False and shown["paused_lanes"] == {"acme": 2}
        assert queue.claim_lane(now=NOW).lane == "zed"  # type: ignore[union-attr]
        client.post("/api/queues/mail/pause", json={}, headers=HEADERS)
        assert queue.claim(now=NOW) is None
        client.post("/api/queues/mail/resume", json={}, headers=HEADERS)
        answer = client.post("/api/queues/mail/resume", json={"lane": "acme"}, headers=HEADERS)
        assert answer.json() == {"paused": False, "paused_lanes": []}
    assert queue.claim(now=NOW) is not None
    assert queue.claim_lane(now=NOW).lane == "acme"  # type: ignore[union-attr]
    logged = [r.getMessage() for r in caplog.records if r.name == "echomq.ops.dashboard"]
    assert any('pause queue="mail" lane="acme"' in m for m in logged), logged
    assert any('resume queue="mail" lane=null' in m for m in logged), logged


def test_a_pause_without_the_csrf_token_or_with_a_bad_lane_changes_nothing(
        client: TestClient, queue: Queue) -> None:
    refused = client.post("/api/queues/mail/pause", json={}, headers={"Origin": SITE})
    assert refused.status_code == 403
    for body in ({"lane": "a b"}, {"lane": 5}, []):
        answer = client.post("/api/queues/mail/pause", json=body, headers=HEADERS)
        assert answer.status_code == 400, body
    assert queue.paused() == (False, [])


def test_the_lanes_view_lists_knobs_and_state(client: TestClient, queue: Queue) -> None:
    queue.set_lane("acme", concurrency=1)
    assert queue.claim_lane(now=NOW) is not None
    answer = client.get("/api/queues/mail/lanes").json()
    assert answer["paused"] is False
    assert [(r["group"], r["concurrency"], r["waiting"], r["leased"], r["state"])
            for r in answer["lanes"]] == [("acme", 1, 1, 1, "parked: limit"),
                                          ("zed", None, 1, 0, "ready")]


def test_the_page_has_the_pause_buttons(client: TestClient) -> None:
    script = client.get("/static/dashboard.js").text
    assert "function pauseButton" in script and "api/queues/${q(queue)}/${what}" in script
