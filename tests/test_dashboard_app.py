"""The dashboard app's refusals and API, through Starlette's TestClient against a real server:
a foreign Host, a cross-origin or token-less state change, missing credentials are refused and
change nothing; allowed requeues and purges are logged with who did them."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import given, settings, strategies as st
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from echomq import Queue, Verdict
from echomq.ops import admin
from echomq.ops.dashboard import History, create_app
from echomq.ops.dashboard.guard import host_allowed

NOW = 1_700_000_000_000
SITE = "http://127.0.0.1:8042"
CSRF = "page-token"


def kill(queue: Queue, job_id: str, error: str = "ValueError: bad") -> None:
    queue.enqueue(job_id, b"payload", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None and job.id == job_id
    assert queue.retry(job, error=error, max_attempts=1, now=NOW) is Verdict.DEAD


@pytest.fixture
def conn(library_conn: Any) -> Any:
    """Every test here runs on a redis-py client and on a valkey-py one."""
    return library_conn


@pytest.fixture
def queue(conn: redis.Redis) -> Queue:
    queue = Queue(conn, "mail")
    kill(queue, "JOB:dead1")
    kill(queue, "JOB:dead2", error="KeyError: 'x'\nTraceback (most recent call last):\n  ...")
    return queue


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn, csrf_token=CSRF), base_url=SITE) as client:
        yield client


def requeue(client: TestClient, headers: dict[str, str], ids: list[str] | None = None,
            **kwargs: object) -> int:
    response = client.post("/api/queues/mail/dead/requeue", json={"ids": ids or ["JOB:dead1"]},
                           headers=headers, **kwargs)  # type: ignore[arg-type]
    return response.status_code


def dead_ids(conn: redis.Redis) -> list[str]:
    return [job.id for job in admin.dead_jobs(conn, "mail")]


def test_a_cross_origin_post_is_refused_and_changes_nothing(
        client: TestClient, conn: redis.Redis, queue: Queue) -> None:
    # The right token cannot be known cross-site, but even with it a foreign origin is refused.
    for origin in ("http://evil.example", "http://127.0.0.1:9999", "null"):
        assert requeue(client, {"Origin": origin, "X-EchoMQ-CSRF": CSRF}) == 403
    assert requeue(client, {"X-EchoMQ-CSRF": CSRF}) == 403  # no Origin at all
    response = client.post("/api/queues/mail/dead/purge", json={"limit": 10},
                           headers={"Origin": "http://evil.example", "X-EchoMQ-CSRF": CSRF})
    assert response.status_code == 403
    assert dead_ids(conn) == ["JOB:dead1", "JOB:dead2"]


def test_a_post_without_the_csrf_token_is_refused(client: TestClient, conn: redis.Redis,
                                                  queue: Queue) -> None:
    # What a no-cors fetch or a form can send: simple content types, no custom header.
    form = client.post("/api/queues/mail/dead/requeue", data={"ids": "JOB:dead1"},
                       headers={"Origin": SITE})
    text = client.post("/api/queues/mail/dead/requeue", content=b'{"ids": ["JOB:dead1"]}',
                       headers={"Origin": SITE, "Content-Type": "text/plain"})
    assert (form.status_code, text.status_code) == (403, 403)
    assert requeue(client, {"Origin": SITE, "X-EchoMQ-CSRF": "guessed"}) == 403
    assert dead_ids(conn) == ["JOB:dead1", "JOB:dead2"]


def test_a_foreign_host_is_refused(client: TestClient, queue: Queue) -> None:
    for host in ("evil.example", "evil.example:8042", "127.0.0.1.evil.example", ""):
        assert client.get("/api/queues", headers={"Host": host}).status_code == 400
    assert client.get("/", headers={"Host": "evil.example"}).status_code == 400
    for host in ("localhost:8042", "127.0.0.1", "[::1]:8042"):
        assert client.get("/api/queues", headers={"Host": host}).status_code == 200


def test_allowed_hosts_with_a_port_allow_that_port_only() -> None:
    allowed = ["localhost:8042", "[::1]:8042", "ops.example.com"]
    assert host_allowed("LOCALHOST:8042", allowed) and host_allowed("[::1]:8042", allowed)
    assert not host_allowed("localhost:9999", allowed) and not host_allowed("localhost", allowed)
    assert host_allowed("ops.example.com:443", allowed) and host_allowed("ops.example.com", allowed)
    assert not host_allowed("[::1]", allowed) and not host_allowed("ops.example.com.evil", allowed)


def test_requeue_and_purge_from_the_page_are_logged_with_who(
        client: TestClient, conn: redis.Redis, queue: Queue,
        caplog: pytest.LogCaptureFixture) -> None:
    page = client.get("/")
    assert page.status_code == 200 and f'content="{CSRF}"' in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    headers = {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}
    with caplog.at_level(logging.INFO, logger="echomq.ops.dashboard"):
        answer = client.post("/api/queues/mail/dead/requeue", headers=headers,
                             json={"ids": ["JOB:dead1", "JOB:nope"]}).json()
        assert answer == {"requeued": ["JOB:dead1"], "not_dead": ["JOB:nope"]}
        assert client.post("/api/queues/mail/dead/purge", headers=headers,
                           json={"limit": 5}).json() == {"purged": 1}
    logged = [r.getMessage() for r in caplog.records if r.name == "echomq.ops.dashboard"]
    assert any('requeue queue="mail"' in m and "JOB:dead1" in m and "client=testclient" in m
               for m in logged), logged
    assert any('purge queue="mail" limit=5 purged=1' in m for m in logged), logged
    assert conn.zscore(queue.key("pending"), "JOB:dead1") is not None
    assert dead_ids(conn) == []


def test_bad_requests_are_refused_and_change_nothing(client: TestClient, conn: redis.Redis,
                                                     queue: Queue) -> None:
    headers = {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}
    for body in ({"ids": "JOB:dead1"}, {"ids": []}, {"ids": [1]}, {"ids": ["not an id"]}, [],
                 {"limit": 0}):
        response = client.post("/api/queues/mail/dead/requeue", json=body, headers=headers)
        assert response.status_code == 400, body
    for body in ({"limit": 0}, {"limit": "5"}, {"limit": True}, {}):
        response = client.post("/api/queues/mail/dead/purge", json=body, headers=headers)
        assert response.status_code == 400, body
    assert dead_ids(conn) == ["JOB:dead1", "JOB:dead2"]


def test_a_token_is_required_when_set(conn: redis.Redis, queue: Queue,
                                      caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(conn, token="s3cret", csrf_token=CSRF)
    with TestClient(app, base_url=SITE) as client:
        refused = client.get("/")
        assert refused.status_code == 401 and "Basic" in refused.headers["www-authenticate"]
        assert client.get("/api/queues", headers={"Authorization": "Bearer nope"}).status_code \
            == 401
        assert client.get("/api/queues", headers={"Authorization": "Bearer s3cret"}).status_code \
            == 200
        basic = "Basic " + base64.b64encode(b"alice:s3cret").decode()
        assert requeue(client, {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}) == 401
        with caplog.at_level(logging.INFO, logger="echomq.ops.dashboard"):
            assert requeue(client, {"Origin": SITE, "X-EchoMQ-CSRF": CSRF,
                                    "Authorization": basic}) == 200
    assert any('user="alice"' in r.getMessage() for r in caplog.records)
    assert dead_ids(conn) == ["JOB:dead2"]


def test_job_detail_splits_error_and_traceback(client: TestClient, queue: Queue) -> None:
    detail = client.get("/api/queues/mail/jobs/JOB:dead2").json()
    assert detail["state"] == "dead" and detail["error"] == "KeyError: 'x'"
    assert detail["traceback"].startswith("Traceback (most recent call last):")
    assert detail["payload_preview"] == "payload" and not detail["payload_truncated"]
    assert client.get("/api/queues/mail/jobs/JOB:404").status_code == 404


def test_mounted_in_another_app(conn: redis.Redis, queue: Queue) -> None:
    dashboard = create_app(conn, csrf_token=CSRF)
    outer = Starlette(routes=[Mount("/ops/queues", app=dashboard)])
    with TestClient(outer, base_url=SITE) as client:
        assert "static/dashboard.js" in client.get("/ops/queues/").text
        assert client.get("/ops/queues/static/dashboard.js").status_code == 200
        (stats,) = client.get("/ops/queues/api/queues").json()
        assert stats["name"] == "mail" and stats["dead"] == 2
        assert requeue(client, {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}) == 404  # not mounted
        response = client.post("/ops/queues/api/queues/mail/dead/requeue",
                               json={"ids": ["JOB:dead1"]},
                               headers={"Origin": SITE, "X-EchoMQ-CSRF": CSRF})
        assert response.json()["requeued"] == ["JOB:dead1"]
    # The outer app ran no lifespan of the dashboard: the first request started its sampler.
    assert wait_for(lambda: "mail" in dashboard.state.history.series())
    dashboard.state.history.stop()


def wait_for(condition: object, timeout: float = 10.0) -> bool:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if condition():  # type: ignore[operator]
            return True
        done.wait(0.05)
    return False


def stats_at(at_ms: int, pending: int, dead: int, name: str = "mail") -> admin.QueueStats:
    return admin.QueueStats(name, pending, 0, 0, dead, server_time_ms=at_ms)


def test_history_keeps_the_last_hour_and_tells_rates(conn: redis.Redis) -> None:
    history = History(conn, interval_s=5, keep_s=3600)
    for n in range(2000):  # far more than an hour of samples
        history.sample([stats_at(NOW + n * 5000, pending=n, dead=n // 2)])
    rows = history.series()["mail"]
    assert len(rows) == 721 and rows[0][0] == NOW + (2000 - 721) * 5000
    rates = history.rates("mail")
    assert rates["backlog_per_min"] == 12.0  # one more pending every 5 s
    assert rates["dead_per_min"] == 6.0  # one more dead every 10 s
    history.sample([stats_at(NOW + 2000 * 5000, pending=0, dead=0)])  # drained and purged
    assert history.rates("mail")["dead_per_min"] >= 0
    assert History(conn).rates("mail") == {"backlog_per_min": None, "dead_per_min": None}


def test_the_history_is_there_when_the_page_opens(conn: redis.Redis, queue: Queue) -> None:
    with TestClient(create_app(conn, sample_interval_s=60), base_url=SITE) as client:
        assert wait_for(lambda: "mail" in client.get("/api/history").json()["series"])
        (row,) = client.get("/api/history").json()["series"]["mail"]
        assert row[1:] == [0, 0, 0, 2, 0, 0, 0]  # no worker has done or failed anything


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20_000), st.integers(0, 50), st.integers(0, 50)),
                min_size=1, max_size=60),
       st.integers(2, 20))
def test_history_bounds_and_rates_hold_for_any_samples(
        steps: list[tuple[int, int, int]], keep: int) -> None:
    history = History(None, interval_s=1, keep_s=keep)
    at = NOW
    for gap, pending, dead in steps:
        at += gap
        history.sample([stats_at(at, pending=pending, dead=dead)])
    rows = history.series()["mail"]
    assert len(rows) == min(len(steps), keep + 1)
    assert [row[0] for row in rows] == sorted(row[0] for row in rows)
    rates = history.rates("mail")
    if len(rows) < 2:
        assert rates == {"backlog_per_min": None, "dead_per_min": None}
    else:
        assert rates["dead_per_min"] is not None and rates["dead_per_min"] >= 0
        assert rates["backlog_per_min"] is not None


def test_the_audit_log_cannot_be_forged_through_names(
        client: TestClient, queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    # A queue name or a job id with a line break is refused before anything is done or logged;
    # what is logged names the queue as JSON, on the one line of its action.
    headers = {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}
    with caplog.at_level(logging.INFO, logger="echomq.ops.dashboard"):
        forged_name = client.post("/api/queues/mail%0Adashboard%20purge/dead/requeue",
                                  json={"ids": ["JOB:x"]}, headers=headers)
        forged_id = client.post("/api/queues/mail/dead/requeue",
                                json={"ids": ["JOB:x\ndashboard purge"]}, headers=headers)
        assert [r.getMessage() for r in caplog.records if "requeue" in r.getMessage()] == []
        response = client.post("/api/queues/mail/dead/requeue", json={"ids": ["JOB:x"]},
                               headers=headers)
    assert (forged_name.status_code, forged_id.status_code, response.status_code) == (
        400, 400, 200)
    (line,) = [r.getMessage() for r in caplog.records if "requeue" in r.getMessage()]
    assert "\n" not in line and '"mail"' in line
