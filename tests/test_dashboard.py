"""The dashboard in a real headless Chromium: it renders queues, lanes and dead jobs with their
errors, and its requeue button moves a dead job back to pending."""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from echomq import Queue, Verdict
from echomq.dashboard import DashboardServer

NOW = 1_700_000_000_000
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


@pytest.fixture
def dashboard(conn: redis.Redis) -> Iterator[DashboardServer]:
    server = DashboardServer(conn)
    server.start_background()
    yield server
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


def test_dashboard_renders_and_requeues(conn: redis.Redis, dashboard: DashboardServer,
                                        tmp_path: Path) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue_many([("JOB:ok", b""), ("JOB:t1", b"", "tenant-a"), ("JOB:t2", b"", "tenant-b")],
                       now=NOW)
    queue.enqueue("JOB:poison", b"", now=NOW + 1)
    job = queue.claim(now=NOW + 2)
    assert job is not None and job.id == "JOB:ok"
    queue.ack(job)
    poison = queue.claim(now=NOW + 3)
    assert poison is not None
    assert queue.retry(poison, error="ValueError: bad input", max_attempts=1) is Verdict.DEAD

    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 900, "height": 800})
        page.goto(dashboard.url)
        page.wait_for_selector('tr[data-job="JOB:poison"]', timeout=15_000)
        assert page.inner_text('tr[data-queue="mail"]').split("\t")[:6] == [
            "mail", "0", "0", "0", "1", "2"]
        assert "ValueError: bad input" in page.inner_text("#dead")
        assert "tenant-a 1" in page.inner_text("#lanes")
        assert page.locator('#chart polyline[data-queue="mail"]').count() == 1
        shot = Path(os.environ.get("ECHOMQ_SCREENSHOT_DIR", tmp_path)) / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        data = shot.read_bytes()
        assert png_size(data)[0] == 900
        assert distinct_rows(data) > 50  # text, tables and the chart, not a blank page

        page.click('button[data-requeue="JOB:poison"]')
        page.wait_for_selector('tr[data-job="JOB:poison"]', state="detached", timeout=15_000)
        browser.close()
    assert conn.zscore(queue.key("pending"), "JOB:poison") is not None
    assert conn.zcard(queue.key("dead")) == 0
