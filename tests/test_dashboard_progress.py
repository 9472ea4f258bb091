"""The dashboard's job view shows the last progress a job reported: a task's report decoded
(JSON or MessagePack), any other bytes as text, nothing as a dash; through the API and on the
page in headless chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue, Verdict
from echomq.ops import admin
from echomq.ops.dashboard import create_app
from echomq.tasks.envelope import Result, encode
from tests.test_dashboard import CHROMIUM, FLAGS

SITE = "http://127.0.0.1:8042"


@pytest.fixture
def conn(library_conn: Any) -> Any:
    return library_conn


def died_reporting(queue: Queue, job_id: str, progress: bytes | None) -> None:
    queue.enqueue(job_id, b'{"task": "build", "args": [], "kwargs": {}, "headers": {}, '
                          b'"enqueued_ms": 0}')
    job = queue.claim()
    assert job is not None and job.id == job_id
    if progress is not None:
        queue.set_progress(job, progress)
    assert queue.retry(job, error="ValueError: bad", max_attempts=1) is Verdict.DEAD


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn), base_url=SITE) as client:
        yield client


def detail(client: TestClient, job_id: str) -> Any:
    return client.get(f"/api/queues/mail/jobs/{job_id}").json()


def test_the_job_detail_carries_the_last_progress(client: TestClient, conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    died_reporting(queue, "JOB:json", encode(Result({"done": 3, "of": 10}), "json"))
    died_reporting(queue, "JOB:pack", encode(Result([7, "rows"]), "msgpack"))
    died_reporting(queue, "JOB:raw", b"half \xff")
    died_reporting(queue, "JOB:none", None)
    assert detail(client, "JOB:json")["progress"] == '{"done": 3, "of": 10}'
    assert detail(client, "JOB:pack")["progress"] == '[7, "rows"]'
    assert detail(client, "JOB:raw")["progress"] == "half \\xff"
    assert detail(client, "JOB:none")["progress"] is None
    assert "progress" not in detail(client, "JOB:json")["fields"]  # shown once, apart
    found = admin.inspect(conn, "mail", "JOB:pack")  # echomq inspect reads the same
    assert found is not None and found["fields"]["progress"] == '[7, "rows"]'


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_the_job_view_shows_the_progress(conn: redis.Redis) -> None:
    from tests.test_dashboard import serve
    from tests.test_dashboard_operator import Browser, recent
    playwright = pytest.importorskip("playwright.sync_api")

    queue = Queue(conn, "mail")
    died_reporting(queue, "JOB:told", encode(Result({"done": 3, "of": 10}), "json"))
    died_reporting(queue, "JOB:quiet", None)
    with playwright.sync_playwright() as p:
        browser = Browser(p.chromium.launch(executable_path=CHROMIUM, args=FLAGS))
        try:
            with serve(create_app(conn, history=recent(conn, ["mail"]))) as url:
                page = browser.open(url)
                page.click("a.job >> text=JOB:told")
                page.wait_for_selector("#job:not([hidden])")
                assert page.inner_text("#job-progress") == '{"done": 3, "of": 10}'
                page.click("#job-close")
                page.click("a.job >> text=JOB:quiet")
                page.wait_for_selector("#job:not([hidden])")
                assert page.inner_text("#job-progress") == "—"
        finally:
            browser.page.context.browser.close()
