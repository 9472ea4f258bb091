"""The dashboard's workflow view: for a job of a workflow, the parents it waits on by state
(with a sample) and the jobs waiting on it, as a tree; through the API and on the page in
headless chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from echomq import App, chord
from echomq.ops.dashboard import create_app
from echomq.ops.workflows import PARENTS_SHOWN
from tests.test_dashboard import CHROMIUM, FLAGS

SITE = "http://127.0.0.1:8042"


@pytest.fixture
def flow(conn: redis.Redis) -> tuple[App, Any]:
    """A chord of 3 children and a body, then a chain step after the body; the first child
    done."""
    app = App(conn, "flows")

    @app.task(name="child")
    def child(n: int) -> int:
        return n

    @app.task(name="body")
    def body(values: list[int]) -> int:
        return sum(values)

    handle = chord([child.s(n).set(job_id=f"JOB:child-{n}") for n in range(3)],
                   body.s().set(job_id="JOB:body")).enqueue()
    body.with_options(job_id="JOB:after-body", after=[handle]).enqueue([0])
    job = app.queue.claim(lease_ms=30_000)
    assert job is not None and job.id == "JOB:child-0"
    app.queue.ack(job, result=app.handler(job).result)  # type: ignore[union-attr]
    return app, handle


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn), base_url=SITE) as client:
        yield client


def test_the_body_shows_its_parents_by_state(client: TestClient, flow: Any) -> None:
    shown = client.get("/api/queues/flows/jobs/JOB:body/workflow").json()
    assert (shown["state"], shown["task"], shown["waits"], shown["policy"]) == (
        "waiting", "body", 2, "fail")
    assert shown["parents"]["count"] == 3
    assert shown["parents"]["states"] == {"done": 1, "pending": 2}
    assert [p["id"] for p in shown["parents"]["shown"]] == [f"JOB:child-{n}" for n in range(3)]
    assert shown["dependents"] == [{"id": "JOB:after-body", "state": "waiting",
                                    "dependents": []}]


def test_a_child_shows_the_tree_waiting_on_it(client: TestClient, flow: Any) -> None:
    shown = client.get("/api/queues/flows/jobs/JOB:child-1/workflow").json()
    assert shown["parents"]["count"] == 0
    assert shown["dependents"] == [{"id": "JOB:body", "state": "waiting", "dependents": [
        {"id": "JOB:after-body", "state": "waiting", "dependents": []}]}]
    assert client.get("/api/queues/flows/jobs/JOB:none/workflow").status_code == 404


def test_a_large_fan_in_is_counted_and_sampled(conn: redis.Redis, client: TestClient) -> None:
    app = App(conn, "wide")

    @app.task(name="leaf")
    def leaf() -> None: ...

    @app.task(name="join")
    def join(values: list[None]) -> None: ...

    handle = chord([leaf.si() for _ in range(1500)], join.s()).enqueue()
    shown = client.get(f"/api/queues/wide/jobs/{handle.id}/workflow").json()
    assert shown["parents"]["count"] == 1500
    assert shown["parents"]["states"] == {"pending": 1500}
    assert len(shown["parents"]["shown"]) == PARENTS_SHOWN


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_the_job_view_shows_the_workflow(conn: redis.Redis, flow: Any) -> None:
    from tests.test_dashboard import serve
    from tests.test_dashboard_operator import Browser, recent
    playwright = pytest.importorskip("playwright.sync_api")

    with playwright.sync_playwright() as p:
        browser = Browser(p.chromium.launch(executable_path=CHROMIUM, args=FLAGS))
        try:
            with serve(create_app(conn, history=recent(conn, ["flows"]))) as url:
                page = browser.open(url)
                page.fill("#find-queue", "flows")
                page.fill("#find-id", "JOB:body")
                page.click("#find-job")
                page.wait_for_selector("#job-workflow li")
                text = page.inner_text("#job-workflow")
                assert "waits on 3 jobs: 1 done, 2 pending; waiting for 2" in text
                assert page.locator('#job-workflow .dependents li[data-job="JOB:after-body"]') \
                    .count() == 1
                page.click('#job-workflow .parents a.job >> text=JOB:child-0')
                page.wait_for_selector('#job-workflow .dependents li[data-job="JOB:body"]')
                assert page.inner_text("#job-id").startswith("JOB:child-0")
        finally:
            browser.page.context.browser.close()
