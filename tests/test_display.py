"""What the operator is shown of errors and payloads that are not clean text: bytes that are not
UTF-8, newlines, terminal escapes. Every view shows them (odd bytes escaped) instead of failing."""

from __future__ import annotations

import json

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue, Verdict
from echomq.embedded import EmbeddedValkey
from echomq.ops import admin
from echomq.ops.dashboard import create_app
from tests.command_line import cli

NOW = 1_700_000_000_000
ERROR = b"\xff\xfeboom\n\x1b[31mred"
PAYLOAD = b"\x00\x9f{raw}\xc3"


@pytest.fixture
def dead_binary(conn: redis.Redis) -> Queue:
    """A queue whose only job died with a binary, multi-line error and has a binary payload."""
    queue = Queue(conn, "odd")
    queue.enqueue("JOB:odd", PAYLOAD, now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    assert queue.retry(job, error=ERROR, max_attempts=1, now=NOW) is Verdict.DEAD
    return queue


def test_admin_reads_binary_errors_with_their_odd_bytes_escaped(
        conn: redis.Redis, dead_binary: Queue) -> None:
    (dead,) = admin.dead_jobs(conn, "odd")
    assert dead.error == "\\xff\\xfeboom\n\x1b[31mred"
    found = admin.inspect(conn, "odd", "JOB:odd")
    assert found is not None
    assert found["fields"]["error"] == dead.error
    assert found["fields"]["payload"] == PAYLOAD


def test_dead_list_shows_one_line_per_job_whatever_the_error(
        valkey: EmbeddedValkey, dead_binary: Queue) -> None:
    output = cli(valkey, "dead", "list", "odd")
    (row,) = [line for line in output.splitlines() if "JOB:odd" in line]
    assert row.split("│")[-2].strip() == "\\xff\\xfeboom"  # the error's first line, escaped
    assert "\x1b" not in output and "red" not in output
    (listed,) = json.loads(cli(valkey, "dead", "list", "odd", "--json"))
    assert listed["error"] == "\\xff\\xfeboom\n\x1b[31mred"


def test_inspect_shows_binary_fields(valkey: EmbeddedValkey, dead_binary: Queue) -> None:
    output = cli(valkey, "inspect", "odd", "JOB:odd")
    (state,) = [line for line in output.splitlines() if " state " in line]
    assert "dead" in state and "\x1b" not in output and "\\xff\\xfeboom" in output
    found = json.loads(cli(valkey, "inspect", "odd", "JOB:odd", "--json"))
    assert found["fields"]["payload"] == "\x00\\x9f{raw}\\xc3"
    assert found["fields"]["error"] == "\\xff\\xfeboom\n\x1b[31mred"


def test_the_dashboard_api_serves_binary_errors(conn: redis.Redis, dead_binary: Queue) -> None:
    with TestClient(create_app(conn), base_url="http://127.0.0.1:8042") as client:
        (dead,) = client.get("/api/queues/odd/dead").json()
        assert dead["id"] == "JOB:odd" and dead["error"] == "\\xff\\xfeboom\n\x1b[31mred"
        (stats,) = client.get("/api/queues").json()
        assert stats["name"] == "odd" and stats["dead"] == 1
        detail = client.get("/api/queues/odd/jobs/JOB:odd").json()
    assert detail["error"] == "\\xff\\xfeboom" and detail["traceback"] == "\x1b[31mred"
    assert detail["payload_preview"] == "\x00\\x9f{raw}\\xc3"
    assert detail["payload_size"] == len(PAYLOAD)
