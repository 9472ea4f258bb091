"""The dashboard's job view reads a pending job's score as its priority and its admission time,
as ``echomq inspect`` does (never the banded score as a moment)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from echomq import Queue
from echomq.engine.priority import pending_score
from echomq.ops.dashboard import create_app
from tests.test_dashboard import CHROMIUM, FLAGS, serve

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser.new_page(viewport={"width": 1400, "height": 900})
        browser.close()


def test_a_pending_jobs_view_shows_its_priority_and_enqueue_time(conn: redis.Redis,
                                                                 page: Any) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:plain", b"")
    at = conn.zscore(queue.key("pending"), "JOB:plain")
    assert at is not None
    conn.hset(queue.key("job", "JOB:urgent"), mapping={"p": "", "a": 0,
                                                        "t": int(at), "priority": 7})
    conn.zadd(queue.key("pending"), {"JOB:urgent": pending_score(7, int(at))})
    with serve(create_app(conn)) as url:
        page.goto(url)
        page.wait_for_selector('#status[data-updated="1"]', timeout=15_000)
        shown = {}
        for job_id in ("JOB:urgent", "JOB:plain"):
            page.fill("#find-queue", "mail")
            page.fill("#find-id", job_id)
            page.click("#find-job")
            page.wait_for_selector(f'#job-id:text("{job_id} (mail)")')
            shown[job_id] = page.inner_text("#job-fields")
        assert "enqueued (priority 7)" in shown["JOB:urgent"]
        assert "enqueued (priority" not in shown["JOB:plain"]
        assert utc_of(shown["JOB:urgent"], "enqueued (priority 7)") == \
            utc_of(shown["JOB:urgent"], "enqueued_at") == utc_of(shown["JOB:plain"], "enqueued")


def utc_of(text: str, label: str) -> str:
    """The UTC moment the view shows under ``label`` (its relative age dropped)."""
    lines = text.splitlines()
    return lines[lines.index(label) + 1].split(" UTC", 1)[0]
