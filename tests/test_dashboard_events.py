"""The dashboard's live view: ``GET api/queues/{name}/events`` answers the newest events, then
what follows an id (a long poll that returns as soon as one is appended), says whether the
queue has a stream at all, bounds what it is asked for, refuses a bad id and sits behind the
same guard as every other view."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue
from echomq.embedded import EmbeddedValkey
from echomq.ops.dashboard import create_app
from echomq.ops.dashboard.live import BLOCK_CAP_MS, MAX_COUNT, query_of
from tests.test_dashboard import CHROMIUM, FLAGS
from tests.test_queue_events import NOW, append_once_blocked, fill

SITE = "http://127.0.0.1:8042"
CSRF = "page-token"


@pytest.fixture
def queue(conn: redis.Redis) -> Queue:
    return Queue(conn, "mail", check_policy=False)


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn, csrf_token=CSRF), base_url=SITE) as client:
        yield client


def events(client: TestClient, query: str = "") -> Any:
    response = client.get(f"/api/queues/mail/events{query}")
    assert response.status_code == 200, response.text
    return response.json()


def test_an_appended_event_is_shown_at_once(client: TestClient, queue: Queue) -> None:
    ids = fill(queue, 1)
    answer = events(client, "?block_ms=0")
    assert answer["enabled"] is True
    assert answer["last"] == ids[0]
    assert answer["events"] == [{"id": ids[0], "kind": "enqueued", "job_id": "J0", "attempt": 0,
                                 "at_ms": NOW, "fence": None, "lane": None, "due_ms": None,
                                 "priority": 0}]


@pytest.mark.parametrize("wire", [5, 6])
def test_an_evented_enqueue_and_cancel_are_shown(client: TestClient, conn: redis.Redis,
                                                 wire: int) -> None:
    evented = Queue(conn, "mail", wire=wire, events=True, check_policy=False)
    evented.enqueue("JOB:shown", b"p", now=NOW)
    answer = events(client, "?since=0-0&block_ms=0")
    assert [(e["kind"], e["job_id"], e["at_ms"]) for e in answer["events"]] == [
        ("enqueued", "JOB:shown", NOW)]
    cancelled = client.post("/api/queues/mail/jobs/JOB:shown/cancel", json={},
                            headers={"Origin": SITE, "X-EchoMQ-CSRF": CSRF})
    assert cancelled.status_code == 200  # the operator's cancel is told too
    assert events(client, f"?since={answer['last']}")["events"][0]["kind"] == "cancelled"


def test_without_since_the_newest_come_then_since_resumes(client: TestClient,
                                                          queue: Queue) -> None:
    ids = fill(queue, 5)
    newest = events(client, "?count=2")
    assert [event["id"] for event in newest["events"]] == ids[3:]
    assert events(client, f"?since={ids[1]}&count=2")["events"][0]["id"] == ids[2]
    caught_up = events(client, f"?since={newest['last']}")
    assert caught_up["events"] == [] and caught_up["last"] == ids[-1]


def test_a_queue_without_a_stream_is_not_enabled(client: TestClient) -> None:
    assert events(client) == {"enabled": False, "events": [], "last": "0-0"}
    assert events(client, "?since=0-0&block_ms=10") == {"enabled": False, "events": [],
                                                         "last": "0-0"}


def test_a_long_poll_returns_what_is_appended_while_it_waits(
        client: TestClient, queue: Queue, valkey: EmbeddedValkey) -> None:
    ids = fill(queue, 2)
    writer = append_once_blocked(valkey, queue, "LIVE")
    answer = events(client, f"?since={ids[-1]}&block_ms=999999999")  # capped, not refused
    writer.join()
    assert [event["job_id"] for event in answer["events"]] == ["LIVE"]
    assert answer["last"] == answer["events"][0]["id"]


def test_what_it_is_asked_for_is_bounded() -> None:
    assert query_of({}) == (None, 100, 0)
    assert query_of({"count": "0", "block_ms": "-5"}) == (None, 1, 0)
    assert query_of({"count": "10**9", "block_ms": "x"}) == (None, 100, 0)
    assert query_of({"since": "5-1", "count": "99999999", "block_ms": "99999999"}) == (
        "5-1", MAX_COUNT, BLOCK_CAP_MS)


def test_many_events_are_answered_at_most_max_count(client: TestClient, queue: Queue) -> None:
    fill(queue, MAX_COUNT + 5)
    assert len(events(client, "?count=5000")["events"]) == MAX_COUNT
    assert len(events(client, "?since=0-0&count=5000")["events"]) == MAX_COUNT


def test_a_bad_since_or_queue_name_is_refused(client: TestClient) -> None:
    for query in ("?since=abc", "?since=(1-0", "?since=1-"):
        response = client.get(f"/api/queues/mail/events{query}")
        assert response.status_code == 400 and "since must be" in response.json()["error"]
    assert client.get("/api/queues/a{b}/events").status_code == 400


def test_it_sits_behind_the_guard(conn: redis.Redis, queue: Queue) -> None:
    fill(queue, 1)
    with TestClient(create_app(conn, token="s3cret"), base_url=SITE) as client:
        assert client.get("/api/queues/mail/events").status_code == 401
        allowed = client.get("/api/queues/mail/events",
                             headers={"Authorization": "Bearer s3cret"})
        assert allowed.status_code == 200 and len(allowed.json()["events"]) == 1
    with TestClient(create_app(conn), base_url="http://evil.example") as foreign:
        assert foreign.get("/api/queues/mail/events").status_code in (400, 403)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_the_page_lists_the_events_and_one_appended_while_it_is_open(conn: redis.Redis) -> None:
    from tests.test_dashboard import serve
    from tests.test_dashboard_operator import Browser, recent
    playwright = pytest.importorskip("playwright.sync_api")

    queue = Queue(conn, "mail", check_policy=False)
    queue.enqueue("JOB:listed", b"p")  # the queue is registered, so the page lists it
    fill(queue, 2)
    with playwright.sync_playwright() as p:
        browser = Browser(p.chromium.launch(executable_path=CHROMIUM, args=FLAGS))
        try:
            with serve(create_app(conn, history=recent(conn, ["mail"]))) as url:
                page = browser.open(url)
                page.wait_for_selector(f'#events tr[data-event="{NOW + 1}-0"]')
                assert page.inner_text(f'#events tr[data-event="{NOW}-0"] a.job') == "J0"
                added = conn.xadd(queue.key("events"), {"kind": "dead", "job": "JOB:late",
                                                        "attempt": "3"})
                row = f'#events tr[data-event="{added.decode()}"]'
                page.wait_for_selector(row)  # the long poll brings it, no reload
                assert page.inner_text(f"{row} [data-kind]") == "dead"
                first = page.query_selector("#events tbody tr")
                assert first is not None and first.get_attribute("data-event") == added.decode()
        finally:
            browser.page.context.browser.close()
