"""The queue and job pages as an operator reads them, in a real headless Chromium (one for the
module, a fresh page a test): a queue's jobs by state with their counts, paged by links that
back and forward go through, filtered by task, searched by arguments and by id; a sharded
queue's jobs in one list; a job's page with its call, why it waits, its timeline and its
workflow as links to other jobs' pages; and each at a desktop's width (1400 px) and a phone's
(390 px), in screenshots kept in pytest's tmp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from echomq import Queue, Verdict
from echomq.ops.dashboard import History, create_app
from echomq.tasks.envelope import Envelope, encode
from tests.test_dashboard import CHROMIUM, chromium_fixture, serve  # noqa: F401

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

NOW = 1_700_000_000_000
DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}


def call(task: str, *args: Any, **kwargs: Any) -> bytes:
    return encode(Envelope(task=task, args=list(args), kwargs=kwargs), "json")


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    opened = chromium.new_page(viewport=DESKTOP)
    opened.on("dialog", lambda dialog: dialog.accept())
    yield opened
    opened.context.close()


@pytest.fixture
def url(conn: redis.Redis) -> Iterator[str]:
    with serve(create_app(conn, history=History(conn, interval_s=3600))) as found:
        yield found


def go(page: Any, address: str) -> None:
    page.goto(address)
    loaded(page)


def loaded(page: Any) -> None:
    page.wait_for_selector('#status[data-updated="1"]', state="attached", timeout=15_000)


def shown_ids(page: Any) -> list[str]:
    rows = page.locator("#jobs tbody tr[data-job]").all()
    return [str(row.get_attribute("data-job")) for row in rows]


def screenshots(page: Any, tmp_path: Path, name: str, *on_phone: str) -> tuple[Path, Path]:
    """The page at a desktop's width, then at a phone's (full length), as PNG files; at the
    phone's, each cell of ``on_phone`` (selectors) lies whole within its width, its title
    beside it (a list's rows read as cards there)."""
    wide, narrow = tmp_path / f"{name}-1400.png", tmp_path / f"{name}-390.png"
    page.set_viewport_size(DESKTOP)
    page.screenshot(path=str(wide), full_page=True)
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(narrow), full_page=True)
    for selector in on_phone:
        box = page.locator(selector).bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (selector, box)
        assert page.locator(selector).evaluate(
            "cell => getComputedStyle(cell, '::before').content") == (
            f'"{page.locator(selector).get_attribute("data-label")}"')
    page.set_viewport_size(DESKTOP)
    return wide, narrow


def test_a_queue_s_jobs_page_by_page_filtered_and_searched(
        conn: redis.Redis, page: Any, url: str, tmp_path: Path) -> None:
    queue = Queue(conn, "mail")
    for n in range(120):
        task = "app.report" if n % 10 == 3 else "app.send"
        queue.enqueue(f"JOB:{n:03}", call(task, f"user{n}@example.org"), now=NOW + n)
    queue.enqueue("JOB:tenant", call("app.send", "t@example.org"), lane="acme", now=NOW)
    go(page, f"{url}queues/mail")
    assert page.inner_text('#states a[aria-current="page"]') == "pending (121)"
    assert page.inner_text('#lanes-nav a[data-lane="acme"]') == "acme (1)"
    assert shown_ids(page) == [f"JOB:{n:03}" for n in range(50)]
    first_row = page.inner_text('#jobs tr[data-job="JOB:000"]').split("\t")
    assert first_row[:6] == ["JOB:000", "app.send", '{"args": ["user0@example.org"], "kwargs": {}}',
                             "0", "0", "—"]
    page.click("#next")
    loaded(page)
    assert "cursor=" in page.url and shown_ids(page)[0] == "JOB:050"
    page.click("#next")
    loaded(page)
    assert shown_ids(page) == [f"JOB:{n:03}" for n in range(100, 120)]
    assert page.locator("#next").is_hidden()
    page.go_back()
    loaded(page)
    assert shown_ids(page)[0] == "JOB:050"
    page.go_forward()
    loaded(page)
    assert shown_ids(page)[0] == "JOB:100"
    page.fill('#filters input[name="task"]', "app.report")
    page.click('#filters button[type="submit"]')
    loaded(page)
    assert "task=app.report" in page.url and "cursor" not in page.url
    assert shown_ids(page) == [f"JOB:{n:03}" for n in range(3, 120, 10)]
    assert page.inner_text("#summary") == "12 job(s) shown, 120 looked at: all of them"
    page.fill('#filters input[name="args"]', "user11")
    page.check('#filters input[name="newest"]')
    page.click('#filters button[type="submit"]')
    loaded(page)
    assert shown_ids(page) == ["JOB:113"]  # report's jobs whose arguments hold "user11"
    wide, narrow = screenshots(page, tmp_path, "queue-search",
                               '#jobs tr[data-job="JOB:113"] td[data-label="task"]',
                               '#jobs tr[data-job="JOB:113"] td[data-label="arguments"]')
    page.click('a.job >> text=JOB:113')
    loaded(page)
    assert page.url.endswith("/queues/mail/jobs/JOB:113")
    assert page.inner_text("#job-id") == "JOB:113"
    page.go_back()
    loaded(page)
    assert shown_ids(page) == ["JOB:113"] and page.input_value(
        '#filters input[name="args"]') == "user11"
    go(page, f"{url}queues/mail?state=pending&lane=acme")
    assert shown_ids(page) == ["JOB:tenant"]
    assert wide.stat().st_size > 0 and narrow.stat().st_size > 0


def test_a_sharded_queue_lists_its_jobs_in_one_list(conn: redis.Redis, page: Any,
                                                    url: str) -> None:
    queue = Queue(conn, "big", shards=3)
    for n in range(6):
        queue.enqueue(f"JOB:s{n}", call("app.send", n), now=NOW + n)
    job = queue.claim(now=NOW + 10)
    assert job is not None and queue.retry(job, error="OSError: down", max_attempts=1,
                                           now=NOW + 11) is Verdict.DEAD
    go(page, f"{url}queues/big?state=pending&newest=1")
    assert shown_ids(page) == [f"JOB:s{n}" for n in range(5, -1, -1) if f"JOB:s{n}" != job.id]
    page.click('#states a[data-state="dead"]')
    loaded(page)
    assert shown_ids(page) == [job.id]
    assert page.inner_text(f'#jobs tr[data-job="{job.id}"]').split("\t")[-1] == "OSError: down"


def test_a_job_s_page_tells_its_story(conn: redis.Redis, page: Any, url: str,
                                      tmp_path: Path) -> None:
    queue = Queue(conn, "mail", events=True)
    assert queue.enqueue("JOB:invoice", call("app.bill", 42, currency="EUR"),
                         priority=5) is Verdict.ENQUEUED
    queue.enqueue_after("JOB:receipt", call("app.receipt"), after=["JOB:invoice"])
    job = queue.claim()
    assert job is not None
    assert queue.retry(job, delay_ms=3_600_000, error="TimeoutError: bank") is Verdict.RETRYING
    go(page, f"{url}queues/mail/jobs/JOB:invoice")
    assert page.inner_text("#state") == "delayed"
    [why] = page.locator("#why li").all_inner_texts()
    assert why.startswith("delayed until ") and why.endswith("(a retry after a failed attempt)")
    facts = dict(zip(page.locator("#facts dt").all_inner_texts(),
                     page.locator("#facts dd").all_inner_texts(), strict=True))
    assert (facts["task"], facts["attempts"], facts["priority"]) == ("app.bill", "1", "5")
    assert page.inner_text("#arguments") == 'args: [42]\nkwargs: {"currency":"EUR"}'
    assert page.inner_text("#error") == "TimeoutError: bank"
    assert page.locator("#timeline tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.event)") == ["enqueued", "claimed", "retried"]
    page.wait_for_selector('#job-workflow .dependents li[data-job="JOB:receipt"]')
    wide, narrow = screenshots(page, tmp_path, "job",
                               '#timeline tr[data-event="retried"] td[data-label="what happened"]')
    page.click('#job-workflow a.job >> text=JOB:receipt')
    loaded(page)
    assert page.url.endswith("/queues/mail/jobs/JOB:receipt")
    assert page.locator("#why li").all_inner_texts() == [
        "waiting for its parents: 1 not done yet"]
    page.go_back()
    loaded(page)
    assert page.inner_text("#job-id") == "JOB:invoice"
    page.click("#cancel")  # through the guard: the page's Origin and CSRF token
    page.wait_for_selector("#state.completed", timeout=15_000)  # the page reloaded
    assert queue.outcome("JOB:invoice").state == "cancelled"
    assert wide.stat().st_size > 0 and narrow.stat().st_size > 0
