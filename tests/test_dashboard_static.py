"""The page's own files: the page loads pages.js (the calls, links and times every page shares),
dashboard.js, then live.js (the live list) and workflow.js (a job's workflow, here and on the job
page), and no script defines a function another defines; the queue and job pages name their
scripts from the app's root; the static route serves each file on its list, behind
the same guard and with the same headers, and nothing else; and the package data ships every
file of echomq/ops/web, in the wheel and the sdist."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from echomq.ops.dashboard import STATIC_FILES, create_app
from echomq.ops.dashboard.guard import SECURITY_HEADERS
from tests.package_data import shipped

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "echomq" / "ops" / "web"
SITE = "http://127.0.0.1:8042"
TOKEN = "s3cret"


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn), base_url=SITE) as client:
        yield client


def headers(response: httpx.Response) -> dict[str, str]:
    """The answer's headers but its length."""
    return {key: value for key, value in response.headers.items() if key != "content-length"}


def guarded(response: httpx.Response) -> bool:
    """Whether the answer carries every header the guard adds (no framing, no caching, CSP)."""
    return all(response.headers.get(key) == value for key, value in SECURITY_HEADERS.items())


def page_files() -> set[str]:
    return {path.name for path in WEB.iterdir() if path.is_file() and path.suffix != ".py"}


def test_the_page_loads_pages_js_then_dashboard_js_live_js_and_workflow_js(
        client: TestClient) -> None:
    page = client.get("/").text
    assert re.findall(r'<script src="static/([^"]+)" defer></script>', page) == [
        "pages.js", "dashboard.js", "live.js", "workflow.js"]


def test_the_queue_and_job_pages_load_their_scripts_from_the_app_s_root(conn: redis.Redis) -> None:
    """Below the root, a relative path would name another file: the pages name each from the
    root where the app is mounted (here /ops)."""
    dashboard = create_app(conn)
    app = Starlette(routes=[Mount("/ops", dashboard)])
    try:
        with TestClient(app, base_url=SITE) as client:
            queue = client.get("/ops/queues/mail").text
            job = client.get("/ops/queues/mail/jobs/JOB:1").text
    finally:  # a mounted app gets no lifespan: its first request started the sampler
        dashboard.state.history.stop()
    assert re.findall(r'<script src="([^"]+)" defer></script>', queue) == [
        "/ops/static/pages.js", "/ops/static/queue.js"]
    assert re.findall(r'<script src="([^"]+)" defer></script>', job) == [
        "/ops/static/pages.js", "/ops/static/workflow.js", "/ops/static/job.js"]
    assert '<meta name="echomq-root" content="/ops">' in queue


@pytest.mark.parametrize("name", ["live.js", "workflow.js", "pages.js", "queue.js", "job.js"])
def test_each_later_script_is_served_as_dashboard_js_is(client: TestClient, name: str) -> None:
    reference = client.get("/static/dashboard.js")
    response = client.get(f"/static/{name}")
    assert reference.status_code == response.status_code == 200
    assert response.text == (WEB / name).read_text(encoding="utf-8")
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert headers(response) == headers(reference)
    assert guarded(response)


@pytest.mark.parametrize("name", ["dashboard.js", "live.js", "workflow.js", "pages.js",
                                  "queue.js", "job.js"])
def test_each_script_sits_behind_the_guard(conn: redis.Redis, name: str) -> None:
    with TestClient(create_app(conn, token=TOKEN), base_url=SITE) as client:
        assert client.get(f"/static/{name}").status_code == 401
        allowed = client.get(f"/static/{name}", headers={"Authorization": f"Bearer {TOKEN}"})
        assert allowed.status_code == 200
    with TestClient(create_app(conn), base_url="http://evil.example") as foreign:
        assert foreign.get(f"/static/{name}").status_code == 400


@pytest.mark.parametrize("name", ["dashboard.html", "__init__.py", "live.py", "nothere.js"])
def test_a_file_off_the_list_is_not_served(client: TestClient, name: str) -> None:
    response = client.get(f"/static/{name}")
    assert response.status_code == 404
    assert guarded(response)


def test_every_file_of_the_page_is_served_or_is_the_page() -> None:
    assert page_files() == set(STATIC_FILES) | {"dashboard.html", "queue.html", "job.html"}


def test_no_function_is_defined_in_two_scripts() -> None:
    scripts = [name for name in STATIC_FILES if name.endswith(".js")]
    defined = {name: set(re.findall(r"\bfunction\s+(\w+)", (WEB / name).read_text()))
               for name in scripts}
    assert all(defined.values())
    twice = {(a, b): defined[a] & defined[b] for a in scripts for b in scripts if a < b}
    assert not any(twice.values()), twice


def test_the_package_ships_every_file_of_the_page() -> None:
    """Each file is package data of a listed package (tests/package_data.py): the wheel carries it,
    and so does the sdist (which takes the package data, MANIFEST.in excluding nothing)."""
    assert [name for name in sorted(page_files()) if not shipped(WEB / name)] == []
    commands = [line.split()[0] for line in (ROOT / "MANIFEST.in").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert not [c for c in commands if "exclude" in c or c == "prune"], commands
