"""The echomq command line against a real server: the operator's commands, serve, dashboard."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from echomq import Queue, Verdict
from echomq.cli import main
from echomq.embedded import EmbeddedValkey

NOW = 1_700_000_000_000


def cli(valkey: EmbeddedValkey, *args: str) -> str:
    result = CliRunner().invoke(main, list(args), env={"ECHOMQ_URL": valkey.url},
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_enqueue_stats_inspect(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    assert cli(valkey, "enqueue", "mail", "hello", "--id", "JOB:1") == "ENQUEUED JOB:1\n"
    again = json.loads(cli(valkey, "enqueue", "mail", "hello", "--id", "JOB:1", "--json",
                           "--wire", "6"))
    assert again == {"id": "JOB:1", "verdict": "DUPLICATE"}
    made = json.loads(cli(valkey, "enqueue", "mail", "x", "--lane", "t1", "--json"))
    assert made["id"].startswith("JOB:") and made["verdict"] == "ENQUEUED"
    (stats,) = json.loads(cli(valkey, "stats", "--json"))
    assert (stats["name"], stats["pending"], stats["lanes"]) == ("mail", 1, {"t1": 1})
    assert "mail: pending 1, active 0" in cli(valkey, "stats", "mail")
    found = json.loads(cli(valkey, "inspect", "mail", "JOB:1", "--json"))
    assert found["state"] == "pending" and found["fields"]["payload"] == "hello"
    result = CliRunner().invoke(main, ["inspect", "mail", "JOB:404"],
                                env={"ECHOMQ_URL": valkey.url})
    assert result.exit_code == 1 and "no job JOB:404" in result.output


def test_dead_jobs_and_recover(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:bad", b"", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    assert queue.retry(job, error="KeyError: 'x'", max_attempts=1, now=NOW) is Verdict.DEAD
    assert "JOB:bad attempts=1 lane=- error=KeyError: 'x'" in cli(valkey, "dead", "list", "mail")
    assert cli(valkey, "dead", "requeue", "mail", "JOB:bad", "JOB:nope") == (
        "REQUEUED JOB:bad\nNOT_DEAD JOB:nope\n")
    leased = queue.claim(lease_ms=1, now=NOW)
    assert leased is not None
    assert json.loads(cli(valkey, "recover", "mail", "--json")) == {"recovered": 1,
                                                                     "promoted": 0}
    leased = queue.claim(now=NOW)
    assert leased is not None
    queue.retry(leased, max_attempts=1, now=NOW)
    assert json.loads(cli(valkey, "dead", "purge", "mail", "--json")) == {"purged": 1}
    assert json.loads(cli(valkey, "dead", "list", "mail", "--json")) == []


def stop(process: subprocess.Popen[str], how: signal.Signals) -> int:
    """Send ``how``; the exit code, which must come within 20 s (else the process is killed and
    the test fails)."""
    process.send_signal(how)
    try:
        return process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_serve_runs_until_stopped_and_leaves_nothing(tmp_path: Path,
                                                     how: signal.Signals) -> None:
    env = {**os.environ, "ECHOMQ_VALKEY_SERVER": EmbeddedValkey(prefer="path").server}
    serve = subprocess.Popen([sys.executable, "-m", "echomq", "serve", "--dir", str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert serve.stdout is not None
        url = serve.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0]
        conn = redis.Redis.from_url(url)
        assert Queue(conn, "q", wire=6).enqueue("JOB:1", b"") is Verdict.ENQUEUED
        conn.close()
    finally:
        assert stop(serve, how) == 0
    assert (tmp_path / "appendonlydir").is_dir()


def test_dashboard_command_stops_on_sigterm(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    Queue(conn, "mail").enqueue("JOB:1", b"")
    env = {**os.environ, "ECHOMQ_URL": valkey.url}
    server = subprocess.Popen([sys.executable, "-m", "echomq", "dashboard", "--port", "0"],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0]
        with urllib.request.urlopen(url + "api/queues", timeout=10) as response:
            (queue,) = json.load(response)
        assert queue["name"] == "mail" and queue["pending"] == 1
    finally:
        assert stop(server, signal.SIGTERM) == 0


def test_help_lists_every_command() -> None:
    output = CliRunner().invoke(main, ["--help"]).output
    for command in ("enqueue", "worker", "stats", "inspect", "dead", "recover", "serve", "demo",
                    "bench", "dashboard"):
        assert f"  {command}" in output
