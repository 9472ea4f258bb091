"""The dashboard's API refuses bad requests with a clear 4xx, never a 500: a queue name with
braces on every route that takes one, a JSON body nested deeper than the cap (400) or 100,000
deep (over the size cap: 413), a body over the cap (refused as it arrives: a 50 MB one is not
read)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue
from echomq.embedded import EmbeddedValkey
from echomq.ops.dashboard import create_app
from echomq.ops.dashboard.requests import MAX_BODY

SITE = "http://127.0.0.1:8042"
CSRF = "page-token"
HEADERS = {"Origin": SITE, "X-EchoMQ-CSRF": CSRF}


@pytest.fixture
def client(conn: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(conn, csrf_token=CSRF), base_url=SITE,
                    raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "dead", None), ("GET", "jobs/JOB:1", None), ("GET", "lanes", None),
    ("POST", "dead/requeue", {"ids": ["JOB:1"]}), ("POST", "dead/purge", {"limit": 1}),
    ("POST", "pause", {}), ("POST", "resume", {})])
@pytest.mark.parametrize("name", ["a{b", "a}b", "{x}", "a%00b", "a%7Fb", "a%0Ab", "%C2%85"])
def test_a_queue_name_with_braces_is_a_400(client: TestClient, method: str, path: str,
                                           body: object, name: str) -> None:
    response = client.request(method, f"/api/queues/{name}/{path}", json=body,
                              headers=HEADERS if method == "POST" else {})
    assert response.status_code == 400, response.text
    assert "braces" in response.json()["error"]


def test_a_deeply_nested_body_is_a_400_and_changes_nothing(client: TestClient,
                                                           conn: redis.Redis) -> None:
    Queue(conn, "mail").enqueue("JOB:1", b"")
    for depth, status in ((100_000, 413), (30_000, 400), (33, 400)):  # over the size cap, under
        deep = "[" * depth + "]" * depth
        for path in ("dead/requeue", "dead/purge", "pause"):
            response = client.post(f"/api/queues/mail/{path}", content=deep,
                                   headers={**HEADERS, "Content-Type": "application/json"})
            assert response.status_code == status, (path, depth, response.text)
            assert "nested" in response.json()["error"] or status == 413
    assert not conn.exists(Queue(conn, "mail").key("paused"))


def test_a_body_over_the_cap_is_a_413(client: TestClient) -> None:
    big = json.dumps({"ids": ["JOB:1"] * (MAX_BODY // 8)})
    assert len(big) > MAX_BODY
    response = client.post("/api/queues/mail/dead/requeue", content=big,
                           headers={**HEADERS, "Content-Type": "application/json"})
    assert response.status_code == 413, response.text


def test_a_50_mb_body_is_refused_before_it_is_sent(valkey: EmbeddedValkey) -> None:
    """The real server, on a socket: the answer comes after the headers and a first chunk,
    while 50 MB are still to come."""
    server = subprocess.Popen([sys.executable, "-m", "echomq", "dashboard", "--port", "0",
                               "--url", valkey.url], stdout=subprocess.PIPE, text=True,
                              env={k: v for k, v in os.environ.items() if k != "ECHOMQ_URL"})
    try:
        assert server.stdout is not None
        port = int(re.search(r":(\d+)/", server.stdout.readline())[1])  # type: ignore[index]
        site = f"http://127.0.0.1:{port}"
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(("POST /api/queues/mail/dead/requeue HTTP/1.1\r\n"
                          f"Host: 127.0.0.1:{port}\r\nOrigin: {site}\r\n"
                          f"X-EchoMQ-CSRF: {_csrf(site)}\r\n"
                          "Content-Type: application/json\r\n"
                          f"Content-Length: {50 * 1024 * 1024}\r\n\r\n").encode()
                         + b'{"ids": [' + b" " * 4096)
            answer = sock.recv(4096).decode(errors="replace")
        assert answer.startswith("HTTP/1.1 413"), answer
    finally:
        server.terminate()
        server.wait(timeout=20)


def _csrf(site: str) -> str:
    import urllib.request

    with urllib.request.urlopen(site + "/", timeout=10) as page:
        found = re.search(r'name="echomq-csrf" content="([^"]+)"', page.read().decode())
    assert found is not None
    return found[1]
