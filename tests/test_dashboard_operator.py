"""The dashboard as an operator reads it, in a real headless Chromium: opened with ``user:token@``
in its URL it loads and acts; a queue keeps its colour from load to load; a fresh history fills
the chart; a queue whose jobs wait for no worker stands out; workers show what they had run at
their last beat; dead jobs show their task and filter; a job's detail opens where the reader
is, its times in UTC."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from echomq import Queue, Verdict
from echomq.consumer.presence import WORKER_PREFIX, WORKERS_KEY
from echomq.consumer.roster import WorkerInfo
from echomq.ops import admin
from echomq.ops.dashboard import History, create_app
from tests.test_dashboard import CHROMIUM, chromium_fixture, serve  # noqa: F401

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


def envelope(task: str) -> bytes:
    return json.dumps({"task": task, "args": [], "kwargs": {}, "headers": {},
                       "enqueued_ms": 0}).encode()


def kill(queue: Queue, job_id: str, payload: bytes, error: str) -> None:
    queue.enqueue(job_id, payload)
    job = queue.claim()
    assert job is not None and job.id == job_id
    assert queue.retry(job, error=error, max_attempts=1) is Verdict.DEAD


def recent(conn: redis.Redis, names: list[str], minutes: int = 2) -> History:
    """A history of the last ``minutes`` only, as a dashboard started just now has."""
    history = History(conn, interval_s=5)
    now = admin.server_time_ms(conn)
    for n in range(minutes * 12, -1, -1):
        history.sample([admin.QueueStats(name, 10 + n, 0, 0, 0, server_time_ms=now - n * 5000)
                        for name in names])
    return history


class Browser:
    """A page of its own (a fresh context: no cookie or storage of another test's) in the
    module's one Chromium."""

    def __init__(self, chromium: Any) -> None:
        self.page = chromium.new_page(viewport={"width": 1400, "height": 900})
        self.page.on("dialog", lambda dialog: dialog.accept())

    def open(self, url: str) -> Any:
        self.page.goto(url)
        self.page.wait_for_selector('#status[data-updated="1"]', timeout=15_000)
        return self.page


@pytest.fixture
def browser(chromium: Any) -> Iterator[Browser]:
    found = Browser(chromium)
    yield found
    found.page.context.close()


def test_a_url_with_user_and_token_loads_and_requeues(conn: redis.Redis,
                                                      browser: Browser) -> None:
    queue = Queue(conn, "mail")
    kill(queue, "JOB:bad", b"{}", "ValueError: bad")
    with serve(create_app(conn, token="s3cret", history=recent(conn, ["mail"]))) as url:
        page = browser.open(url.replace("http://", "http://ops:s3cret@"))
        assert "cannot load" not in page.inner_text("#status")
        page.click('button[data-requeue="JOB:bad"]')
        page.wait_for_selector('tr[data-job="JOB:bad"]', state="detached", timeout=15_000)
    assert conn.zscore(queue.key("pending"), "JOB:bad") is not None


def stroke(page: Any, name: str) -> str:
    return str(page.get_attribute(f'#chart-backlog polyline[data-queue="{name}"]', "stroke"))


def test_a_queue_keeps_its_colour_and_a_fresh_history_fills_the_chart(
        conn: redis.Redis, browser: Browser) -> None:
    for name in ("mail", "reports"):
        admin.register_queue(conn, name)
    with serve(create_app(conn, history=recent(conn, ["mail", "reports"]))) as url:
        page = browser.open(url)
        first = stroke(page, "mail")
        xs = [float(point.split(",")[0]) for point in str(page.get_attribute(
            '#chart-backlog polyline[data-queue="mail"]', "points")).split()]
        assert min(xs) < 60 and max(xs) > 400, xs  # two minutes across the whole axis
    admin.register_queue(conn, "aaa")  # a queue listed before it on the next load
    with serve(create_app(conn, history=recent(conn, ["aaa", "mail", "reports"]))) as url:
        page = browser.open(url)
        assert stroke(page, "mail") == first


def test_workers_and_queues_as_at_the_last_beat(conn: redis.Redis, browser: Browser) -> None:
    Queue(conn, "orphaned").enqueue("JOB:1", b"")
    Queue(conn, "served").enqueue("JOB:2", b"")
    now = admin.server_time_ms(conn)
    key = f"{WORKER_PREFIX}box:7:1"
    conn.hset(key, mapping={"host": "box", "pid": 7, "queue": "served", "wire": 5,
                            "queues": json.dumps(["served"]), "started_ms": now - 60_000,
                            "job": "JOB:quick", "job_since_ms": now - 5_001,
                            "beat_ms": now - 5_000, "done": 3, "failed": 0, "running": 1})
    conn.pexpire(key, 60_000)
    conn.sadd(WORKERS_KEY, key)
    with serve(create_app(conn, history=recent(conn, ["orphaned", "served"]))) as url:
        page = browser.open(url)
        alarm = page.locator('td[data-workers="orphaned"]')
        assert alarm.inner_text() == "none" and alarm.get_attribute("class") == "alarm"
        assert page.inner_text('td[data-workers="served"]') == "1"
        shown = page.inner_text(f'#workers tr[data-worker="{key}"]').split("\t")
        assert shown[5:8] == ["1", "JOB:quick", "1 ms"], shown  # not "running for 5 s"


def test_dead_jobs_show_their_task_filter_and_open_in_view(conn: redis.Redis,
                                                           browser: Browser) -> None:
    queue = Queue(conn, "mail")
    for n in range(60):
        kill(queue, f"JOB:m{n}", envelope("send_mail"), "TimeoutError: smtp")
    kill(queue, "JOB:r1", envelope("build_report"), "KeyError: 'month'")
    with serve(create_app(conn, history=recent(conn, ["mail"]))) as url:
        page = browser.open(url)
        assert page.inner_text('tr[data-job="JOB:r1"]').split("\t")[2] == "build_report"
        page.fill('input[data-filter="mail"]', "report")
        visible = page.locator('#dead tr[data-job]:visible')
        assert visible.count() == 1 and visible.first.get_attribute("data-job") == "JOB:r1"
        page.fill('input[data-filter="mail"]', "")
        assert page.locator('#dead tr[data-job]:visible').count() == 61
        link = page.locator('a.job >> text=JOB:m59')
        link.scroll_into_view_if_needed()
        before = page.evaluate("window.scrollY")
        link.click()
        page.wait_for_selector("#job:not([hidden])")
        assert page.evaluate("window.scrollY") == before  # the list stays where it was
        box = page.locator("#job").bounding_box()
        assert box is not None and 0 <= box["y"] < 900 and box["y"] + box["height"] <= 900
        fields = page.inner_text("#job-fields")
        assert "UTC (" in fields and "died" in fields and "enqueued_at" in fields
        died = conn.zscore(queue.key("dead"), "JOB:m59")
        assert died is not None and str(int(died)) not in fields  # no raw epoch ms
        page.click("#job-close")
        assert page.locator("#job").is_hidden()


def test_throughput_and_failures_per_minute_are_charted(conn: redis.Redis,
                                                        browser: Browser) -> None:
    admin.register_queue(conn, "mail")
    history = History(conn, interval_s=5)
    now = admin.server_time_ms(conn)
    for n in range(24, -1, -1):  # two minutes: 10 jobs done and 1 attempt failed every 5 s
        beat = now - n * 5000
        worker = WorkerInfo(key="w", host="box", pid=1, queue="mail", wire=5, started_ms=0,
                            job=None, job_since_ms=None, done=(24 - n) * 10, failed=24 - n,
                            beat_ms=beat, queues=["mail"])
        history.sample([admin.QueueStats("mail", 0, 0, 0, 0, server_time_ms=beat)], [worker])
    with serve(create_app(conn, history=history)) as url:
        page = browser.open(url)
        for chart, peak in (("done", "200"), ("failed", "20")):  # 120 and 12 per minute
            svg = f"#chart-{chart}"
            assert page.locator(f'{svg} polyline[data-queue="mail"]').count() == 1
            labels = page.locator(f"{svg} text").all_text_contents()
            assert "per min" in labels and peak in labels, labels
            points = str(page.get_attribute(f'{svg} polyline[data-queue="mail"]', "points"))
            ys = {point.split(",")[1] for point in points.split()[:20]}
            assert len(ys) == 1, ys  # a steady rate: one flat line (then the app's own samples)
