"""The echomq command line against a real server: the operator's commands, serve, dashboard."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from echomq import Queue, Verdict
from echomq.cli.main import main
from echomq.cli.views import human_age
from echomq.embedded import EmbeddedValkey, free_port
from tests.command_line import cli
from tests.conftest import start_server

NOW = 1_700_000_000_000


def test_enqueue_stats_inspect(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    assert cli(valkey, "enqueue", "mail", "hello", "--id", "JOB:1") == "ENQUEUED JOB:1\n"
    again = json.loads(cli(valkey, "enqueue", "mail", "hello", "--id", "JOB:1", "--json",
                           "--wire", "6"))
    assert again == {"id": "JOB:1", "verdict": "DUPLICATE"}
    made = json.loads(cli(valkey, "enqueue", "mail", "x", "--lane", "t1", "--json"))
    assert made["id"].startswith("JOB:") and made["verdict"] == "ENQUEUED"
    (stats,) = json.loads(cli(valkey, "stats", "--json"))
    assert (stats["name"], stats["pending"], stats["lanes"]) == ("mail", 1, {"t1": 1})
    table = cli(valkey, "stats", "mail")
    assert "oldest pending" in table and "lanes of mail" in table and "t1" in table
    found = json.loads(cli(valkey, "inspect", "mail", "JOB:1", "--json"))
    assert found["state"] == "pending" and found["fields"]["payload"] == "hello"
    assert "hello" in cli(valkey, "inspect", "mail", "JOB:1")
    result = CliRunner().invoke(main, ["inspect", "mail", "JOB:404"],
                                env={"ECHOMQ_URL": valkey.url})
    assert result.exit_code == 1 and "no job JOB:404" in result.output


def test_dead_jobs_and_recover(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:bad", b"", now=NOW)
    job = queue.claim(now=NOW)
    assert job is not None
    assert queue.retry(job, error="KeyError: 'x'", max_attempts=1, now=NOW) is Verdict.DEAD
    listed = cli(valkey, "dead", "list", "mail")
    assert "JOB:bad" in listed and "KeyError: 'x'" in listed
    assert cli(valkey, "dead", "requeue", "mail", "JOB:bad") == "REQUEUED JOB:bad\n"
    leased = queue.claim(lease_ms=1, now=NOW)
    assert leased is not None
    assert json.loads(cli(valkey, "recover", "mail", "--json")) == {"recovered": 1,
                                                                     "promoted": 0,
                                                                     "abandoned": 0}
    leased = queue.claim(now=NOW)
    assert leased is not None
    queue.retry(leased, max_attempts=1, now=NOW)
    assert json.loads(cli(valkey, "dead", "purge", "mail", "--json")) == {"purged": 1}


def test_recover_returns_every_expired_lease_in_short_steps(
        valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "backlog")
    queue.enqueue_many([(f"JOB:{n}", b"") for n in range(2_500)], now=NOW)
    assert len(queue.claim_many(2_500, lease_ms=1, now=NOW)) == 2_500
    assert json.loads(cli(valkey, "recover", "backlog", "--json")) == {"recovered": 2_500,
                                                                        "promoted": 0,
                                                                        "abandoned": 0}
    assert queue.counts()["active"] == 0 and queue.counts()["pending"] == 2_500
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


def get(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_dashboard_command_on_another_address_warns_and_takes_a_token(
        valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    env = {**os.environ, "ECHOMQ_URL": valkey.url, "ECHOMQ_DASHBOARD_TOKEN": "s3cret"}
    server = subprocess.Popen([sys.executable, "-m", "echomq", "dashboard", "--port", "0",
                               "--host", "0.0.0.0", "--allow-host", "queues.example"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None and server.stderr is not None
        url = server.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0]
        assert "WARNING" in server.stderr.readline()
        port = url.rsplit(":", 1)[1].strip("/")
        local = f"http://127.0.0.1:{port}/api/queues"
        bearer = {"Authorization": "Bearer s3cret"}
        assert get(local) == 401
        assert get(local, bearer) == 200
        assert get(local, {**bearer, "Host": "queues.example"}) == 200
        assert get(local, {**bearer, "Host": "rebound.example"}) == 400
    finally:
        assert stop(server, signal.SIGTERM) == 0


def test_help_lists_every_command() -> None:
    output = CliRunner().invoke(main, ["--help"]).output
    for command in ("enqueue", "worker", "stats", "inspect", "dead", "recover", "serve", "demo",
                    "bench", "dashboard", "forget", "workers"):
        assert f"  {command}" in output


# The real command, in its own process, against a real server -------------------------------

def echomq(*args: str, url: str | None = None, cwd: Path | None = None,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full.pop("ECHOMQ_DEBUG", None)
    if url is not None:
        full["ECHOMQ_URL"] = url
    return subprocess.run([sys.executable, "-m", "echomq", *args], capture_output=True,
                          text=True, timeout=60, env=full, cwd=cwd)


def assert_one_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """Exit ``code``, an ``error:`` line and a ``hint:`` line, no traceback."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), (
        done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    for word in words:
        assert word in done.stderr


def test_a_wrong_url_is_one_line_and_exit_2() -> None:
    for command in (["stats"], ["workers"], ["dead", "list", "mail"], ["dashboard"],
                    ["worker", "tests.worker_handlers:serve", "-q", "mail"]):
        assert_one_error(echomq(*command, "--url", "http://127.0.0.1:6379"), 2,
                         "not a Valkey URL", "redis://")


def test_a_refused_connection_is_one_line_and_exit_3() -> None:
    closed = f"redis://127.0.0.1:{free_port()}"
    assert_one_error(echomq("stats", url=closed), 3, "cannot reach Valkey at " + closed,
                     "echomq serve")
    assert_one_error(echomq("dead", "list", "mail", url=closed), 3)
    assert_one_error(echomq("workers", url=closed), 3)


@pytest.mark.parametrize("command", [["stats"], ["dead", "list", "mail"], ["events", "mail"]])
def test_an_error_naming_the_server_never_shows_its_password(valkey: EmbeddedValkey,
                                                            command: list[str]) -> None:
    port = free_port()
    unreachable = echomq(*command, url=f"redis://:s3cret@127.0.0.1:{port}")
    assert_one_error(unreachable, 3, f"cannot reach Valkey at redis://127.0.0.1:{port}:")
    not_a_url = echomq(*command, url="redis://:s3cret@127.0.0.1:port")
    assert_one_error(not_a_url, 2, "not a Valkey URL: 'redis://127.0.0.1:port'")
    refused = echomq(*command, url=f"redis://nobody:s3cret@127.0.0.1:{valkey.port}")
    assert_one_error(refused, 4, f"redis://127.0.0.1:{valkey.port} refused the credentials")
    for done in (unreachable, not_a_url, refused):
        assert "s3cret" not in done.stdout + done.stderr


def test_debug_shows_the_traceback() -> None:
    done = echomq("--debug", "stats", url=f"redis://127.0.0.1:{free_port()}")
    assert done.returncode == 1 and "Traceback" in done.stderr


def test_a_bad_job_id_is_exit_2(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    assert_one_error(echomq("enqueue", "mail", "x", "--id", "no spaces", url=valkey.url), 2,
                     "JOB:")
    assert_one_error(echomq("dead", "requeue", "mail", "bad id", url=valkey.url), 2)


def test_a_missing_trafikey_is_exit_4() -> None:
    bare = start_server(module=False)
    try:
        done = echomq("enqueue", "mail", "x", "--wire", "6", url=bare.url)
    finally:
        bare.stop()
    assert_one_error(done, 4, "trafikey", "--loadmodule")


def test_requeue_of_a_job_that_is_not_dead_exits_1(valkey: EmbeddedValkey,
                                                   conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:live", b"", now=NOW)
    done = echomq("dead", "requeue", "mail", "JOB:live", url=valkey.url)
    assert done.returncode == 1 and done.stdout == "NOT_DEAD JOB:live\n"
    assert "not dead" in done.stderr
    assert conn.zscore(queue.key("pending"), "JOB:live") == NOW  # untouched


def test_read_commands_speak_json_and_show_human_ages(valkey: EmbeddedValkey,
                                                      conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    now = int(conn.time()[0]) * 1000
    queue.enqueue("JOB:old", b"{}", now=now - 3 * 3600 * 1000 - 5 * 60 * 1000)
    table = echomq("stats", url=valkey.url)
    assert table.returncode == 0 and "3 h 5 min" in table.stdout, table.stdout
    for args in (["stats"], ["stats", "mail"], ["inspect", "mail", "JOB:old"],
                 ["dead", "list", "mail"], ["workers"]):
        done = echomq(*args, "--json", url=valkey.url)
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout)


@pytest.mark.parametrize(("ms", "shown"), [
    (None, "-"), (0, "0 ms"), (999, "999 ms"), (1000, "1.0 s"), (59_999, "59.9 s"),
    (60_000, "1 min 0 s"), (3_599_999, "59 min 59 s"), (3_600_000, "1 h 0 min"),
    (86_399_999, "23 h 59 min"), (90_061_000, "1 d 1 h")])
def test_human_ages(ms: int | None, shown: str) -> None:
    assert human_age(ms) == shown


def test_version_and_short_help() -> None:
    assert echomq("--version").stdout.startswith("echomq ")
    assert "Exit codes" in echomq("-h").stdout
    assert "--json" in echomq("stats", "-h").stdout


def test_serve_keeps_a_relative_dir(tmp_path: Path) -> None:
    env = {"ECHOMQ_VALKEY_SERVER": EmbeddedValkey(prefer="path").server}
    serve = subprocess.Popen([sys.executable, "-m", "echomq", "serve", "--dir", "./data"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=tmp_path, env={**os.environ, **env})
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert " at " in line, serve.stderr.read() if serve.stderr else line
        url = line.split(" at ", 1)[1].split(" ", 1)[0]
        assert redis.Redis.from_url(url).ping()
    finally:
        assert stop(serve, signal.SIGTERM) == 0
    assert (tmp_path / "data" / "appendonlydir").is_dir()


def test_queues_are_listed_from_the_registry(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    def listed() -> list[str]:
        return [s["name"] for s in json.loads(cli(valkey, "stats", "--json"))]

    assert listed() == []  # the keyspace was searched once: nothing yet
    cli(valkey, "enqueue", "mail", "x")
    # A producer that does not register its queue (a raw client): only --rescan finds it.
    conn.execute_command("EMQ.ENQUEUE", 3, "emq:{quiet}:job:JOB:1", "emq:{quiet}:pending",
                         "emq:{quiet}:wake", "JOB:1", "", "*")
    assert listed() == ["mail"]
    assert [s["name"] for s in json.loads(cli(valkey, "stats", "--rescan", "--json"))] == [
        "mail", "quiet"]
    assert cli(valkey, "forget", "quiet") == "forgot quiet\n"
    assert listed() == ["mail"]
    result = CliRunner().invoke(main, ["forget", "quiet"], env={"ECHOMQ_URL": valkey.url})
    assert result.exit_code == 1 and "not a listed queue" in result.output
