"""``echomq pause``, ``resume`` and ``lanes``: the lane controls from the command line."""

from __future__ import annotations

import json

import redis
from click.testing import CliRunner

from echomq import Queue
from echomq.cli.main import main
from echomq.embedded import EmbeddedValkey
from tests.command_line import cli

NOW = 1_700_000_000_000


def test_pause_and_resume_a_queue_and_a_lane(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:1", b"", now=NOW)
    queue.enqueue("JOB:2", b"", lane="acme", now=NOW)
    assert cli(valkey, "pause", "mail") == "paused mail\n"
    assert queue.claim(now=NOW) is None
    assert cli(valkey, "resume", "mail") == "resumed mail\n"
    assert cli(valkey, "pause", "mail", "--lane", "acme") == "paused mail lane acme\n"
    assert queue.paused() == (False, ["acme"])
    assert queue.claim_lane(now=NOW) is None
    assert cli(valkey, "resume", "mail", "--lane", "acme") == "resumed mail lane acme\n"
    assert queue.claim_lane(now=NOW) is not None


def test_a_bad_lane_name_is_refused_in_one_line(valkey: EmbeddedValkey) -> None:
    result = CliRunner().invoke(main, ["pause", "mail", "--lane", "a b"],
                                env={"ECHOMQ_URL": valkey.url})
    assert result.exit_code != 0
    assert "lane must be" in result.output and "Traceback" not in result.output


def test_lanes_lists_knobs_depth_leases_and_state(valkey: EmbeddedValkey,
                                                  conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.set_lane_defaults(concurrency=5)
    queue.set_lane("acme", concurrency=1, weight=2)
    queue.enqueue_many([("JOB:1", b"", "acme"), ("JOB:2", b"", "acme"), ("JOB:3", b"", "zed")],
                       now=NOW)
    assert queue.claim_lane(now=NOW) is not None
    found = json.loads(cli(valkey, "lanes", "mail", "--json"))
    assert found["paused"] is False
    assert found["defaults"] == {"concurrency": 5, "rate": None, "window_ms": 1000, "weight": 1}
    assert found["lanes"] == [
        {"group": "acme", "concurrency": 1, "rate": None, "window_ms": 1000, "weight": 2,
         "waiting": 1, "leased": 1, "state": "parked: limit"},
        {"group": "zed", "concurrency": 5, "rate": None, "window_ms": 1000, "weight": 1,
         "waiting": 1, "leased": 0, "state": "ready"},
    ]
    rows = [[cell.strip() for cell in line.strip("│┃").split(line[0])]
            for line in cli(valkey, "lanes", "mail").splitlines() if line[:1] in "│┃"]
    assert rows[0] == ["group", "concurrency", "rate", "window_ms", "weight", "waiting", "leased",
                       "state"]
    assert rows[1] == ["acme", "1", "-", "1000", "2", "1", "1", "parked: limit"]
