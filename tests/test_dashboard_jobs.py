"""The dashboard's lists of a queue's jobs by state (``GET api/queues/{name}/jobs``), through
Starlette's TestClient against a real server: each state's jobs in their order, paged by cursor
with none missed or shown twice while jobs leave between pages, filtered and searched within the
stated bound, on a plain and a sharded queue; bad parameters are refused with a clear error
(400) before the list is read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from echomq import App, Queue, Verdict
from echomq.ops.dashboard import History, create_app
from echomq.ops.jobs import lists
from echomq.tasks.envelope import Envelope, encode

NOW = 1_700_000_000_000
SITE = "http://127.0.0.1:8042"


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    app = create_app(conn, history=History(conn, interval_s=3600))
    with TestClient(app, base_url=SITE) as found:
        yield found


def listed(client: TestClient, queue: str, **query: Any) -> dict[str, Any]:
    answer = client.get(f"/api/queues/{queue}/jobs", params=query)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def every_page(client: TestClient, queue: str, **query: Any) -> list[list[str]]:
    """The ids of each page of a list, following its cursors to the end."""
    pages, cursor = [], None
    while True:
        answer = listed(client, queue, **query, **({"cursor": cursor} if cursor else {}))
        pages.append([job["id"] for job in answer["jobs"]])
        cursor = answer["next"]
        if cursor is None:
            return pages


def task_payload(task: str, *args: Any, earlier: bool = False) -> bytes:
    """A task job's payload: this release's envelope (MessagePack), or the earlier release's
    map form (JSON)."""
    if earlier:
        return json.dumps({"task": task, "args": list(args), "kwargs": {}, "headers": {},
                           "enqueued_ms": NOW}).encode()
    return encode(Envelope(task=task, args=list(args)), "msgpack")


def test_pending_is_in_claim_order_priority_bands_first(conn: redis.Redis,
                                                        client: TestClient) -> None:
    queue = Queue(conn, "mail")
    for n in range(7):
        queue.enqueue(f"JOB:p{n}", task_payload("send", n), now=NOW + n)
    queue.enqueue("JOB:urgent", task_payload("send", 99), now=NOW + 50, priority=10)
    queue.enqueue("JOB:low", task_payload("send", -1), now=NOW - 50, priority=-5)
    claimed = []
    order = every_page(client, "mail", state="pending", limit=3)
    assert order == [["JOB:urgent", "JOB:p0", "JOB:p1"], ["JOB:p2", "JOB:p3", "JOB:p4"],
                     ["JOB:p5", "JOB:p6", "JOB:low"]]
    while (job := queue.claim(now=NOW + 100)) is not None:
        claimed.append(job.id)
    assert claimed == [job for page in order for job in page]  # the order claims take


def test_a_page_resumes_after_its_cursor_when_jobs_left_meanwhile(
        conn: redis.Redis, client: TestClient) -> None:
    queue = Queue(conn, "mail")
    for n in range(10):  # one moment: the ten sort by id alone
        queue.enqueue(f"JOB:t{n}", b"", now=NOW)
    first = listed(client, "mail", state="pending", limit=4)
    assert [job["id"] for job in first["jobs"]] == [f"JOB:t{n}" for n in range(4)]
    for n in (2, 3, 4):  # the cursor's own job among those gone
        assert queue.cancel(f"JOB:t{n}") is Verdict.CANCELLED
    second = listed(client, "mail", state="pending", limit=4, cursor=first["next"])
    assert [job["id"] for job in second["jobs"]] == ["JOB:t5", "JOB:t6", "JOB:t7", "JOB:t8"]
    newest = every_page(client, "mail", state="pending", limit=3, newest="1")
    assert newest == [["JOB:t9", "JOB:t8", "JOB:t7"], ["JOB:t6", "JOB:t5", "JOB:t1"],
                      ["JOB:t0"]]


@pytest.mark.parametrize("wire", [5, 6])
def test_each_state_lists_its_jobs(conn: redis.Redis, client: TestClient, wire: int) -> None:
    """On either executor's rows and sets (each transition here has both)."""
    queue = Queue(conn, "mail", wire=wire)
    for job_id in ("JOB:run", "JOB:retry", "JOB:dead", "JOB:done", "JOB:wait"):
        queue.enqueue(job_id, task_payload("send", job_id), now=NOW)
    queue.enqueue_after("JOB:child", task_payload("sum"), after=["JOB:wait"], now=NOW)
    queue.enqueue("JOB:later", task_payload("send"), now=NOW, delay_ms=60_000)
    leased = {job.id: job for job in iter(lambda: queue.claim(now=NOW + 1), None)}
    assert queue.retry(leased["JOB:retry"], delay_ms=5_000, error="OSError: down",
                       now=NOW + 2) is Verdict.RETRYING
    assert queue.retry(leased["JOB:dead"], error="ValueError: bad", max_attempts=1,
                       now=NOW + 3) is Verdict.DEAD
    assert queue.ack(leased["JOB:done"]) is Verdict.ACKED
    shown = {state: every_page(client, "mail", state=state)[0] for state in lists.STATES}
    assert shown == {"pending": [], "delayed": ["JOB:retry", "JOB:later"],
                     "running": ["JOB:run", "JOB:wait"], "waiting": ["JOB:child"],
                     "completed": ["JOB:done"], "dead": ["JOB:dead"]}
    dead = listed(client, "mail", state="dead")["jobs"][0]
    assert (dead["task"], dead["arguments"], dead["attempts"], dead["error"]) == (
        "send", '{"args": ["JOB:dead"], "kwargs": {}}', 1, "ValueError: bad")
    assert every_page(client, "mail", state="dead", error="valueerror") == [["JOB:dead"]]
    assert every_page(client, "mail", state="delayed", error="OSError") == [["JOB:retry"]]
    assert every_page(client, "mail", state="delayed", error="KeyError") == [[]]


def test_lanes_list_in_the_order_their_group_serves_them(conn: redis.Redis,
                                                        client: TestClient) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:flat", b"", now=NOW)
    for n in range(3):
        queue.enqueue(f"JOB:a{n}", b"", lane="acme", now=NOW + n)
    queue.enqueue("JOB:hi", b"", lane="acme", now=NOW + 9, priority=5)
    queue.enqueue("JOB:lo", b"", lane="acme", now=NOW - 9, priority=-5)
    pages = every_page(client, "mail", state="pending", lane="acme", limit=2)
    assert pages == [["JOB:hi", "JOB:a0"], ["JOB:a1", "JOB:a2"], ["JOB:lo"]]
    assert listed(client, "mail", state="pending", lane="acme")["bound"] is None  # no filter
    served = [job.id for job in iter(lambda: queue.claim_lane(now=NOW + 20), None)]
    assert served == [job for page in pages for job in page]


def test_filters_and_search_within_their_bound(conn: redis.Redis, client: TestClient) -> None:
    queue = Queue(conn, "mail")
    for n in range(30):
        task = "send" if n % 3 else "report"
        queue.enqueue(f"JOB:f{n:02}", task_payload(task, {"to": f"user{n}@example.org"}),
                      now=NOW + n, priority=1 if n == 7 else 0)
    queue.enqueue("JOB:old-form", task_payload("report", "march", earlier=True), now=NOW + 40)
    assert every_page(client, "mail", state="pending", task="report", args="USER2") == [
        ["JOB:f21", "JOB:f24", "JOB:f27"]]  # report's ids holding "user2", in claim order
    assert every_page(client, "mail", state="pending", task="report", args="march") == [
        ["JOB:old-form"]]
    assert every_page(client, "mail", state="pending", priority=1) == [["JOB:f07"]]
    assert every_page(client, "mail", state="pending", id="JOB:f1", newest="1",
                      limit=4) == [["JOB:f19", "JOB:f18", "JOB:f17", "JOB:f16"],
                                   ["JOB:f15", "JOB:f14", "JOB:f13", "JOB:f12"],
                                   ["JOB:f11", "JOB:f10"]]
    assert len(every_page(client, "mail", state="pending", older_than_ms="1000")[0]) == 31
    aged = listed(client, "mail", state="pending", older_than_ms=str(10 ** 12))
    assert aged["jobs"] == [] and aged["next"] is None and aged["bound"] == lists.SEARCH_BOUND


def test_a_filter_looks_at_no_more_than_its_bound(conn: redis.Redis, client: TestClient,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lists, "SEARCH_BOUND", 25)
    monkeypatch.setattr(lists, "READ_PER_REQUEST", 10)
    queue = Queue(conn, "mail")
    for n in range(40):
        queue.enqueue(f"JOB:b{n:02}", task_payload("send" if n != 30 else "report"),
                      now=NOW + n)
    looked = []
    cursor = None
    while True:
        answer = listed(client, "mail", state="pending", task="report",
                        **({"cursor": cursor} if cursor else {}))
        looked.append((answer["looked"], [job["id"] for job in answer["jobs"]]))
        if (cursor := answer["next"]) is None:
            break
    assert looked == [(10, []), (20, []), (25, [])]  # JOB:b30 is past the bound of 25


def test_a_sharded_queue_lists_its_shards_merged(conn: redis.Redis, client: TestClient) -> None:
    queue = Queue(conn, "mail", shards=4)
    for n in range(12):
        queue.enqueue(f"JOB:s{n:02}", b"", now=NOW + n)
    queue.enqueue("JOB:lane0", b"", lane="acme", now=NOW)
    assert every_page(client, "mail", state="pending", limit=5) == [
        [f"JOB:s{n:02}" for n in range(5)], [f"JOB:s{n:02}" for n in range(5, 10)],
        ["JOB:s10", "JOB:s11"]]
    assert every_page(client, "mail", state="pending", lane="acme") == [["JOB:lane0"]]
    done = queue.claim(now=NOW + 20)
    assert done is not None and queue.ack(done) is Verdict.ACKED
    assert every_page(client, "mail", state="completed") == [[done.id]]


@pytest.mark.parametrize("query", [
    {"state": "lost"}, {"limit": "101"}, {"limit": "0"}, {"priority": "101"},
    {"priority": "x"}, {"older_than_ms": "-1"}, {"cursor": "garbage"},
    {"cursor": "0/12"}, {"state": "completed", "cursor": "0/1,2"},
    {"state": "pending", "lane": "acme", "cursor": "0/x"}, {"task": "t" * 201}])
def test_bad_parameters_are_refused_with_a_clear_error(
        conn: redis.Redis, client: TestClient, query: dict[str, str]) -> None:
    Queue(conn, "mail").enqueue("JOB:1", b"", now=NOW)
    answer = client.get("/api/queues/mail/jobs", params=query)
    assert answer.status_code == 400 and answer.json()["error"], answer.text
    assert client.get("/api/queues/a{b/jobs").status_code == 400


def test_an_app_s_jobs_show_their_task_and_arguments(conn: redis.Redis,
                                                     client: TestClient) -> None:
    app = App(conn, queue="mail")

    @app.task
    def send(to: str, retries: int = 0) -> None: ...

    handle = send.enqueue("ana@example.org", retries=2)
    [job] = listed(client, "mail", state="pending")["jobs"]
    assert (job["id"], job["task"], job["arguments"]) == (
        handle.id, send.name, '{"args": ["ana@example.org"], "kwargs": {"retries": 2}}')
