"""The dashboard's lists stay bounded on a queue of 1,000,000 pending jobs: a first page, a page
a million deep (its cursor's job gone, so the page finds its place among 1,000 jobs of one
moment), newest first, a priority band, a filter that matches nothing and a completed list (a
scan of the rows) each run no command that takes the server over ``COMMAND_BOUND_MS`` (its
SLOWLOG stays empty) and spend at most ``REQUEST_BOUND_MS`` of the server's time in all
(INFO commandstats). The jobs are written by the server in steps of 10,000, not sent as a
million commands.

The bounds and their margins: a page of 100 is about a dozen commands of O(log N + 100) and 100
HMGETs, and a filtered page reads at most 1,000 rows (``lists.READ_PER_REQUEST``); measured
here each well under 1 ms a command and a few ms a request on an idle core. The bounds are 10
and 100 times that, for a loaded 2-core machine: a command that walked the zset (a million
entries, hundreds of ms) or a request that read every row would still miss them by far."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from echomq import Queue, Verdict
from echomq.ops.dashboard import History, create_app
from echomq.ops.jobs import lists
from echomq.tasks.envelope import Envelope, encode
from tests.conftest import start_server

JOBS = 1_000_000
STEP = 10_000  # jobs one EVAL writes: well under a second of script on a loaded machine
PER_MS = 1000  # jobs admitted in one millisecond: pages must find their place among ties
NOW = 1_700_000_000_000
COMMAND_BOUND_MS = 10
REQUEST_BOUND_MS = 100
SITE = "http://127.0.0.1:8042"
SCAN_STEP_MAX = 200  # the keys one SCAN step of COUNT 100 may give (a bucket's chain more)

FILL = """
local base, payload, now, per_ms = KEYS[1], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
for n = tonumber(ARGV[1]), tonumber(ARGV[2]) do
    local id = string.format('JOB:m%07d', n)
    local t = now + math.floor(n / per_ms)
    redis.call('HSET', base .. 'job:' .. id, 'p', payload, 't', t)
    redis.call('ZADD', base .. 'pending', t, id)
end
"""


@pytest.fixture(scope="module")
def big() -> Iterator[redis.Redis]:
    """A server of its own holding queue ``big``'s million pending jobs (and a few others)."""
    server = start_server()
    conn = server.client()
    payload = encode(Envelope(task="send", args=[{"to": "ana@example.org"}]), "msgpack")
    queue = Queue(conn, "big")
    queue.enqueue("JOB:first", payload, now=NOW - 1)  # registers the queue, as producers do
    for start in range(0, JOBS, STEP):
        conn.eval(FILL, 1, "emq:{big}:", start, start + STEP - 1, payload, NOW, PER_MS)
    queue.enqueue("JOB:urgent", payload, now=NOW + 5, priority=50)
    job = queue.claim(now=NOW + 10)
    assert job is not None and job.id == "JOB:urgent" and queue.ack(job) is Verdict.ACKED
    assert conn.zcard("emq:{big}:pending") == JOBS + 1
    yield conn
    conn.close()
    server.stop()


@pytest.fixture(scope="module")
def client(big: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(big, history=History(big, interval_s=3600)),
                    base_url=SITE) as found:
        found.get("/api/queues")  # the sampler's first reads, before any is measured
        yield found


def server_usec(conn: redis.Redis) -> int:
    """The server's time in commands so far (INFO commandstats), INFO and CONFIG left out."""
    return sum(int(stat["usec"]) for name, stat in conn.info("commandstats").items()
               if not name.startswith(("cmdstat_info", "cmdstat_config", "cmdstat_slowlog")))


def measured(big: redis.Redis, client: TestClient, **query: Any) -> dict[str, Any]:
    """A page of ``big``'s list, its request checked within both bounds: no command of it in
    the SLOWLOG, at most REQUEST_BOUND_MS of the server's time in all."""
    big.config_set("slowlog-log-slower-than", COMMAND_BOUND_MS * 1000)
    big.slowlog_reset()
    before = server_usec(big)
    answer = client.get("/api/queues/big/jobs", params=query)
    spent = server_usec(big) - before
    assert answer.status_code == 200, answer.text
    slow = [(entry["duration"], entry["command"]) for entry in big.slowlog_get(128)]
    assert slow == [], f"commands over {COMMAND_BOUND_MS} ms: {slow}"
    assert spent <= REQUEST_BOUND_MS * 1000, f"{spent} µs of the server's time for {query}"
    found: dict[str, Any] = answer.json()
    print(f"{query}: {spent} µs of the server's time")  # the figures, with -s
    return found


def ids(answer: dict[str, Any]) -> list[str]:
    return [job["id"] for job in answer["jobs"]]


def test_the_first_page_and_one_a_million_deep(big: redis.Redis, client: TestClient) -> None:
    first = measured(big, client, state="pending", limit=100)
    assert ids(first)[:3] == ["JOB:first", "JOB:m0000000", "JOB:m0000001"]
    assert len(first["jobs"]) == 100
    # A cursor at job 900,000, whose job has since gone: the page starts right after it.
    gone = "JOB:m0900000"
    big.zrem("emq:{big}:pending", gone)
    deep = measured(big, client, state="pending", limit=100,
                       cursor=f"0/{NOW + 900}{lists.SEP}{gone}")
    assert ids(deep)[0] == "JOB:m0900001" and ids(deep)[-1] == "JOB:m0900100"
    following = measured(big, client, state="pending", limit=100, cursor=deep["next"])
    assert ids(following)[0] == "JOB:m0900101"


def test_newest_first_a_band_and_a_filter_that_matches_nothing(big: redis.Redis,
                                                               client: TestClient) -> None:
    newest = measured(big, client, state="pending", limit=100, newest="1")
    assert ids(newest)[:2] == ["JOB:m0999999", "JOB:m0999998"]
    band = measured(big, client, state="pending", priority="0", limit=5)
    assert ids(band) == ["JOB:first", "JOB:m0000000", "JOB:m0000001", "JOB:m0000002",
                         "JOB:m0000003"]
    missing = measured(big, client, state="pending", task="report")
    assert (missing["jobs"], missing["looked"]) == ([], lists.READ_PER_REQUEST)
    assert missing["next"] is not None  # the page asks on, up to the bound
    searched = measured(big, client, state="pending", task="send", args="ana@",
                           newest="1", limit=100)
    assert ids(searched)[0] == "JOB:m0999999" and len(searched["jobs"]) == 100


def test_completed_jobs_are_found_by_a_bounded_scan(big: redis.Redis,
                                                    client: TestClient) -> None:
    cursor = None
    for pages in range(1, 6):  # a few pages of a scan of a million rows: each bounded
        answer = measured(big, client, state="completed",
                             **({"cursor": cursor} if cursor else {}))
        assert set(ids(answer)) <= {"JOB:urgent"}  # the one tombstone, if met so far
        assert answer["looked"] <= pages * (lists.READ_PER_REQUEST + 2 * SCAN_STEP_MAX)
        cursor = answer["next"]
        assert cursor is not None
