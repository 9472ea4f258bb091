"""A job's story (``GET api/queues/{name}/jobs/{id}/story``), through Starlette's TestClient
against a real server, on both executors (each writes the rows and the events the story reads):
its call decoded by the task layer's decoder (either envelope form), attempts, result, priority,
lane, dedupe key; why it waits, in words (delayed until, a retry, its parents not done, its lane
or the queue paused); its timeline from the events stream, oldest first, each event in words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue, Verdict
from echomq.ops.dashboard import History, create_app
from echomq.ops.jobs import story
from echomq.tasks.envelope import Envelope, Result, encode

NOW = 1_700_000_000_000
SITE = "http://127.0.0.1:8042"


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn, history=History(conn, interval_s=3600)),
                    base_url=SITE) as found:
        yield found


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def told(client: TestClient, queue: str, job_id: str) -> dict[str, Any]:
    answer = client.get(f"/api/queues/{queue}/jobs/{job_id}/story")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def kinds(found: dict[str, Any]) -> list[tuple[str, str]]:
    return [(event["kind"], event["said"]) for event in found["timeline"]["events"]]


def test_a_retried_job_then_done_tells_its_story(conn: redis.Redis, client: TestClient,
                                                 wire: int) -> None:
    queue = Queue(conn, "mail", wire=wire, events=True)
    payload = encode(Envelope(task="app.send", args=["ana@example.org"],
                              kwargs={"subject": "hi"}), "msgpack")
    assert queue.enqueue("JOB:a", payload, now=NOW, priority=3) is Verdict.ENQUEUED
    job = queue.claim(now=NOW + 1)
    assert job is not None
    assert queue.retry(job, delay_ms=60_000, error="OSError: smtp down",
                       now=NOW + 2) is Verdict.RETRYING
    delayed = told(client, "mail", "JOB:a")
    assert (delayed["state"], delayed["task"], delayed["args"], delayed["kwargs"],
            delayed["attempts"], delayed["priority"]) == (
        "delayed", "app.send", ["ana@example.org"], {"subject": "hi"}, 1, 3)
    assert delayed["why"] == ["delayed until 2023-11-14 22:14:20.002 UTC (a retry after a "
                              "failed attempt); due now: the next promote takes it"]
    assert kinds(delayed) == [
        ("enqueued", "enqueued"), ("claimed", "claimed: attempt 1 started"),
        ("retried", "attempt 1 failed: to run again, delayed until 2023-11-14 22:14:20.002 UTC")]
    assert queue.promote(now=NOW + 60_002) == 1
    job = queue.claim(now=NOW + 60_003)
    assert job is not None
    kept = encode(Result({"sent": True}), "json")
    assert queue.ack(job, result=kept) is Verdict.ACKED
    done = told(client, "mail", "JOB:a")
    assert (done["state"], done["result"], done["why"]) == ("completed", {"value": {
        "sent": True}}, [])
    assert [kind for kind, _ in kinds(done)] == ["enqueued", "claimed", "retried", "promoted",
                                                 "claimed", "done"]
    assert kinds(done)[-1] == ("done", "done after 2 attempt(s)")


def test_waits_are_told_in_words(conn: redis.Redis, client: TestClient, wire: int) -> None:
    queue = Queue(conn, "mail", wire=wire, events=True)
    queue.enqueue("JOB:parent", b"raw", now=NOW, dedupe="doc-7")
    queue.enqueue_after("JOB:child", json.dumps({"task": "app.total", "args": [1, 2],
                                                 "kwargs": {}, "headers": {},
                                                 "enqueued_ms": NOW}).encode(),
                        after=["JOB:parent"], now=NOW)
    child = told(client, "mail", "JOB:child")
    assert (child["state"], child["task"], child["args"]) == ("waiting", "app.total", [1, 2])
    assert child["why"] == ["waiting for its parents: 1 not done yet"]
    assert kinds(child) == [("waiting", "waiting for its parents")]
    lanes = Queue(conn, "mail", events=True)  # lanes are the scripts' on either wire
    lanes.enqueue("JOB:l1", b"", lane="acme", now=NOW)
    lanes.pause("acme")
    lane_job = told(client, "mail", "JOB:l1")
    assert (lane_job["state"], lane_job["lane"]) == ("pending", "acme")
    assert lane_job["why"] == [
        "waiting in lane acme, served in turn with the other lanes",
        "lane acme is paused: none of its jobs is claimed until it is resumed"]
    queue.pause()
    parent = told(client, "mail", "JOB:parent")
    assert parent["why"] == [
        "the queue is paused: no claim leases a job until it is resumed",
        "pending: 0 job(s) of this part of the queue are ahead of it in claim order"]
    assert (parent["task"], parent["args"], parent["dedupe"]) == (None, None, "doc-7")


def test_the_timeline_looks_at_no_more_than_its_bound(conn: redis.Redis, client: TestClient,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(story, "TIMELINE_STEP", 10)
    monkeypatch.setattr(story, "TIMELINE_LOOK", 30)
    queue = Queue(conn, "mail", events=True)
    queue.enqueue("JOB:early", b"", now=NOW)
    for n in range(40):
        queue.enqueue(f"JOB:n{n}", b"", now=NOW + 1)
    found = told(client, "mail", "JOB:early")["timeline"]
    assert (found["events"], found["looked"], found["complete"]) == ([], 30, False)
    assert told(client, "mail", "JOB:n39")["timeline"]["events"][0]["kind"] == "enqueued"


def test_no_such_job_and_a_queue_without_events(conn: redis.Redis, client: TestClient) -> None:
    assert client.get("/api/queues/mail/jobs/JOB:none/story").status_code == 404
    Queue(conn, "mail").enqueue("JOB:1", b"", now=NOW)
    assert told(client, "mail", "JOB:1")["timeline"] == {
        "enabled": False, "events": [], "looked": 0, "complete": True}
