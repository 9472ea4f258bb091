"""``echomq events QUEUE``: the newest events, those after ``--since``, one JSON object a line
with ``--json``; ``--follow`` shows what is appended while it runs and ends quietly on SIGTERM;
a bad ``--since`` is one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import redis

from echomq import Queue
from echomq.embedded import EmbeddedValkey
from tests.test_cli import assert_one_error, echomq
from tests.test_queue_events import NOW, fill


def test_the_newest_events_then_those_after_an_id(valkey: EmbeddedValkey,
                                                  conn: redis.Redis) -> None:
    ids = fill(Queue(conn, "mail", check_policy=False), 5)
    done = echomq("events", "mail", "--count", "2", url=valkey.url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ids[3:]
    assert lines[0].split()[1:5] == ["enqueued", "J3", "attempt", "0"]
    assert "2023-11-14 22:13:20.003 UTC" in lines[0]
    after = echomq("events", "mail", "--since", ids[0], "--json", url=valkey.url)
    shown = [json.loads(line) for line in after.stdout.splitlines()]
    assert [event["id"] for event in shown] == ids[1:]
    assert shown[0]["at_ms"] == NOW + 1 and shown[0]["job_id"] == "J1"


def test_a_queue_that_is_not_there_is_one_line_and_exit_1(valkey: EmbeddedValkey,
                                                         conn: redis.Redis) -> None:
    for follow in ((), ("--follow",)):
        done = echomq("events", "nosuch", *follow, url=valkey.url)
        assert_one_error(done, 1, "error: no queue nosuch: it has no events stream, is not "
                         "listed and holds nothing", "hint: `echomq stats` lists the queues")
        assert done.stdout == ""
    Queue(conn, "quiet", check_policy=False).enqueue("JOB:1", b"x")  # there, without events
    quiet = echomq("events", "quiet", url=valkey.url)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


def test_a_bad_since_is_one_line_and_exit_2(valkey: EmbeddedValkey) -> None:
    assert_one_error(echomq("events", "mail", "--since", "yesterday", url=valkey.url), 2,
                     "since must be")


def test_follow_shows_what_is_appended_and_ends_on_sigterm(valkey: EmbeddedValkey,
                                                           conn: redis.Redis) -> None:
    queue = Queue(conn, "mail", check_policy=False)
    ids = fill(queue, 1)
    env = {**os.environ, "ECHOMQ_URL": valkey.url}
    env.pop("ECHOMQ_DEBUG", None)
    process = subprocess.Popen([sys.executable, "-m", "echomq", "events", "mail", "--follow"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().split()[0] == ids[0]  # the newest, first
        conn.xadd(queue.key("events"), {"kind": "claimed", "job": "J0", "attempt": "1",
                                        "fence": "4"})
        line = process.stdout.readline()
        assert line.split()[1:3] == ["claimed", "J0"] and "fence=4" in line
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert process.stderr is not None and process.stderr.read() == ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
