"""The dashboard in a real headless Chromium, served by uvicorn: it renders queues, lanes, charts
with axes and legends, dead jobs with their errors; its requeue buttons work; and a page served on
another port cannot requeue or purge through it (fetch in any mode, or a form)."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import socket
import struct
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
import uvicorn

from echomq import Job, Queue, Verdict
from echomq.consumer.presence import Announcer
from echomq.ops import admin
from echomq.ops.dashboard import History, create_app

NOW = 1_700_000_000_000
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage"]


@pytest.fixture(scope="module", name="chromium")
def chromium_fixture() -> Iterator[Any]:
    """One Chromium for a module's tests (each launch costs seconds of CPU); a test opens its
    pages in a context of its own (``chromium.new_page``, closed with ``page.context``)."""
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port while the block runs; its shutdown (and
    the lifespan's, which stops the sampler) runs however the block ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        started = threading.Event()
        for _ in range(400):
            if server.started:
                break
            started.wait(0.025)
        assert server.started
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


def past_hour(conn: redis.Redis) -> History:
    """A history with 40 minutes of samples behind the server's clock, as a sampler that has
    been running would have."""
    history = History(conn, interval_s=5)
    now = admin.server_time_ms(conn)
    for n in range(480, 0, -1):
        at = now - n * 5000
        history.sample([
            admin.QueueStats("mail", int(300 + 250 * math.sin(n / 40)), 4, 1, (480 - n) // 200,
                             server_time_ms=at),
            admin.QueueStats("reports", max(0, 120 - (480 - n)), 1, 0, 0, server_time_ms=at)])
    return history


@pytest.fixture
def dashboard(conn: redis.Redis) -> Iterator[str]:
    with serve(create_app(conn, history=past_hour(conn))) as url:
        yield url


class Hostile(BaseHTTPRequestHandler):
    """Serves a blank page from another origin, for the attacks to run on."""

    def do_GET(self) -> None:
        body = b"<!doctype html><title>elsewhere</title><body>elsewhere</body>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def elsewhere() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def distinct_rows(data: bytes) -> int:
    """How many different scanlines the PNG's compressed image data holds (a blank page has 1)."""
    chunks, offset = [], 8
    while offset < len(data):
        length = struct.unpack(">I", data[offset:offset + 4])[0]
        kind = data[offset + 4:offset + 8]
        if kind == b"IDAT":
            chunks.append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    raw = zlib.decompress(b"".join(chunks))
    height = png_size(data)[1]
    stride = len(raw) // height
    return len({raw[row * stride + 1:(row + 1) * stride] for row in range(height)})


def fill(conn: redis.Redis) -> Queue:
    """Queue ``mail``: three jobs in two lanes and two dead jobs (one with a traceback); queue
    ``reports``: drained, still listed."""
    queue = Queue(conn, "mail")
    for n, error in enumerate(["ValueError: bad input",
                               "KeyError: 'x'\nTraceback (most recent call last):\n  File x"]):
        queue.enqueue(f"JOB:poison{n}", b'{"to": "a@example.com"}', now=NOW + n)
        job = queue.claim(now=NOW + n)
        assert job is not None and job.id == f"JOB:poison{n}"
        assert queue.retry(job, error=error, max_attempts=1) is Verdict.DEAD
    queue.enqueue_many([("JOB:t1", b"", "tenant-a"), ("JOB:t2", b"", "tenant-b"),
                        ("JOB:t3", b"", "tenant-a")], now=NOW)
    admin.register_queue(conn, "mail")
    admin.register_queue(conn, "reports")
    return queue


@pytest.fixture
def worker(conn: redis.Redis) -> Iterator[Announcer]:
    """A worker of queue "mail" with JOB:t9 in hand, beating, so its record outlives a slow
    page load; stopped however the test ends, so it beats into no later test's server."""
    announcer = Announcer(conn, "mail", 6)
    announcer.began(Job("JOB:t9", b"", 1))
    announcer.start()
    yield announcer
    announcer.stop()


def test_dashboard_renders_and_requeues(conn: redis.Redis, dashboard: str, worker: Announcer,
                                        tmp_path: Path) -> None:
    queue = fill(conn)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("dialog", lambda dialog: dialog.accept())
        complaints: list[str] = []  # a script or style the policy blocked would show here
        page.on("console", lambda message: complaints.append(message.text)
                if message.type in ("error", "warning") else None)
        page.goto(dashboard)
        page.wait_for_selector('tr[data-job="JOB:poison1"]', timeout=15_000)
        assert page.inner_text('tr[data-queue="mail"]').split("\t")[:7] == [
            "mail", "0", "0", "1", "0", "2", "3"]  # running: the worker's job in hand
        assert page.inner_text('tr[data-queue="reports"]').split("\t")[:6] == [
            "reports", "0", "0", "0", "0", "0"]
        assert "ValueError: bad input" in page.inner_text("#dead")
        assert page.inner_text('#lanes tr[data-lane="tenant-a"]').split("\t") == [
            "tenant-a", "2", "pause"]
        shown = page.inner_text(f'#workers tr[data-worker="{worker.key}"]').split("\t")
        assert shown[1:4] == [str(os.getpid()), "mail", "6"] and shown[5:7] == ["1", "JOB:t9"]
        for chart in ("backlog", "active", "dead"):
            svg = f"#chart-{chart}"
            assert page.locator(f'{svg} polyline[data-queue="mail"]').count() == 1
            labels = page.locator(f"{svg} text").all_text_contents()
            assert "mail" in labels and "reports" in labels  # the legend
            assert "jobs" in labels and "0" in labels  # the y axis
            assert sum(":" in label for label in labels) == 5  # times along the x axis
        page.click("a.job >> text=JOB:poison1")
        page.wait_for_selector("#job:not([hidden])")
        assert page.inner_text("#job-error") == "KeyError: 'x'"
        assert page.inner_text("#job-traceback").startswith("Traceback")
        assert "a@example.com" in page.inner_text("#job-payload")
        shot = Path(os.environ.get("ECHOMQ_SCREENSHOT_DIR", tmp_path)) / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        data = shot.read_bytes()
        assert png_size(data)[0] == 1400
        assert distinct_rows(data) > 100  # text, tables and the charts, not a blank page
        page.click("#job-close")  # the detail lies over the page until closed

        page.click('button[data-requeue="JOB:poison0"]')
        page.wait_for_selector('tr[data-job="JOB:poison0"]', state="detached", timeout=15_000)
        page.click('button[data-requeue-all="mail"]')  # confirmed in the dialog
        page.wait_for_selector('tr[data-job="JOB:poison1"]', state="detached", timeout=15_000)
        page.click('button[data-pause="mail/tenant-a"]')
        page.wait_for_selector('button[data-resume="mail/tenant-a"]', timeout=15_000)
        assert queue.paused() == (False, ["tenant-a"])
        page.click('button[data-pause="mail"]')
        page.wait_for_selector('button[data-resume="mail"]', timeout=15_000)
        assert queue.paused() == (True, ["tenant-a"])
        page.click('button[data-resume="mail"]')
        page.wait_for_selector('button[data-pause="mail"]', timeout=15_000)
        browser.close()
    assert complaints == []
    assert conn.zscore(queue.key("pending"), "JOB:poison0") is not None
    assert conn.zscore(queue.key("pending"), "JOB:poison1") is not None
    assert conn.zcard(queue.key("dead")) == 0


ATTACKS = """async (target) => {
  const body = JSON.stringify({ids: ["JOB:poison0", "JOB:poison1"]});
  const outcomes = [];
  for (const init of [
      {method: "POST", mode: "no-cors", credentials: "include", body,
       headers: {"Content-Type": "text/plain"}},
      {method: "POST", mode: "cors", body,
       headers: {"Content-Type": "application/json", "X-EchoMQ-CSRF": "guess"}}]) {
    try { const r = await fetch(target + "api/queues/mail/dead/requeue", init);
          outcomes.push(r.type + ":" + r.status); }
    catch (e) { outcomes.push("blocked"); }
  }
  try { await fetch(target + "api/queues/mail/dead/purge", {method: "POST", mode: "no-cors",
          body: JSON.stringify({limit: 100})}); outcomes.push("sent"); }
  catch (e) { outcomes.push("blocked"); }
  return outcomes;
}"""


def test_a_page_on_another_port_cannot_change_anything(conn: redis.Redis, dashboard: str,
                                                       elsewhere: str, worker: Announcer) -> None:
    queue = fill(conn)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.goto(dashboard)  # the operator has the dashboard open in the same browser
        page.wait_for_selector('tr[data-job="JOB:poison1"]', timeout=15_000)
        page.goto(elsewhere)
        outcomes = page.evaluate(ATTACKS, dashboard)
        assert outcomes == ["opaque:0", "blocked", "sent"]
        page.evaluate("""(target) => {
          const form = document.createElement("form");
          form.method = "POST"; form.enctype = "text/plain";
          form.action = target + "api/queues/mail/dead/requeue";
          const field = document.createElement("input");
          field.name = '{"ids": ["JOB:poison0"], "x": "'; field.value = '"}';
          form.appendChild(field); document.body.appendChild(form); form.submit();
        }""", dashboard)
        page.wait_for_url(dashboard + "api/queues/mail/dead/requeue")
        assert "cross-origin request refused" in page.inner_text("body")
        browser.close()
    assert [job.id for job in admin.dead_jobs(conn, "mail")] == ["JOB:poison0", "JOB:poison1"]
    assert conn.zcard(queue.key("pending")) == 0
