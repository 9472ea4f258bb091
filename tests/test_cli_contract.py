"""The command line's contract for bad input, each case the real command in its own process:
one ``error:`` line, one ``hint:`` line, no traceback, exit 2 (1 for what is not there)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from echomq import Queue
from echomq.embedded import EmbeddedValkey, free_port
from tests.test_cli import assert_one_error, echomq

HANDLER = "tests.worker_handlers:serve"


@pytest.mark.parametrize(("args", "said"), [
    (["worker", HANDLER, "--queue", "a{b"], "braces"),
    (["worker", HANDLER, "--queue", "q", "--queue", "q"], "listed twice: q"),
    (["stats", "a{b"], "braces"),
    (["enqueue", "a}b", "x"], "braces"),
    (["dead", "list", "a{b"], "braces"),
    (["enqueue", "a\x01b", "x"], "free of braces, slashes and control characters"),
    (["stats", "a/b"], "free of braces, slashes and control characters"),
    (["enqueue", "q", "x", "--dedupe", "a b"], "key must be 1 to 200 bytes"),
    (["enqueue", "q", "x", "--throttle", "k", "--window-ms", str(10**16)],
     "--window-ms must be an integer from 0 to 999999999999999"),
    (["enqueue", "q", "x", "--dedupe", "k", "--window-ms", str(10**16)],
     "--window-ms must be an integer from 0 to 999999999999999"),
    (["dead", "purge", "q", "--limit", "99999999999999999999"], "--limit"),
    (["dead", "list", "q", "--limit", "0"], "--limit"),
    (["stats", "--no-such-option"], "--no-such-option"),
    (["enqueue", "q", "x", "--priority", "101"], "--priority '101'"),
    (["enqueue", "q", "x", "--priority", "high"], "--priority 'high'"),
])
def test_bad_input_is_one_line_and_exit_2(valkey: EmbeddedValkey, args: list[str],
                                          said: str) -> None:
    done = echomq(*args, url=valkey.url)
    assert_one_error(done, 2, said)
    assert done.stdout == ""


def test_a_worker_refused_before_it_starts_logs_nothing(valkey: EmbeddedValkey) -> None:
    done = echomq("worker", HANDLER, "--queue", "a{b", url=valkey.url)
    assert_one_error(done, 2, "a{b", "hint: a queue name")
    assert "started" not in done.stderr and "File " not in done.stderr


def test_stats_of_a_queue_that_is_not_there_exits_1(valkey: EmbeddedValkey,
                                                    conn: redis.Redis) -> None:
    assert_one_error(echomq("stats", "nosuchqueue", url=valkey.url), 1, "no queue nosuchqueue",
                     "echomq stats")
    queue = Queue(conn, "drained")
    queue.enqueue("JOB:1", b"")
    job = queue.claim()
    assert job is not None
    queue.ack(job)  # listed, and empty: its zeros are the answer
    done = echomq("stats", "drained", url=valkey.url)
    assert done.returncode == 0 and "drained" in done.stdout, done.stderr


def write_module(tmp_path: Path, source: str) -> None:
    (tmp_path / "brokenapp.py").write_text(source)


def test_a_target_that_fails_to_import_names_its_file_and_line(valkey: EmbeddedValkey,
                                                               tmp_path: Path) -> None:
    write_module(tmp_path, "import os\nimport no_such_module_anywhere\n")
    done = echomq("worker", "brokenapp:app", "-q", "q", url=valkey.url, cwd=tmp_path)
    assert_one_error(done, 2, "cannot load brokenapp:app", "no_such_module_anywhere",
                     f"{tmp_path / 'brokenapp.py'}, line 2", "--debug")
    assert "Usage:" not in done.stderr
    debug = echomq("--debug", "worker", "brokenapp:app", "-q", "q", url=valkey.url,
                   cwd=tmp_path)
    assert debug.returncode != 0
    assert "Traceback (most recent call last)" in debug.stderr
    assert 'brokenapp.py", line 2' in debug.stderr


def test_a_target_with_a_syntax_error_or_a_failing_body(valkey: EmbeddedValkey,
                                                        tmp_path: Path) -> None:
    write_module(tmp_path, "def app(:\n")
    done = echomq("worker", "brokenapp:app", "-q", "q", url=valkey.url, cwd=tmp_path)
    assert_one_error(done, 2, "SyntaxError", "brokenapp.py, line 1")
    write_module(tmp_path, "import os\n\nraise RuntimeError('no settings')\n")
    done = echomq("worker", "brokenapp:app", "-q", "q", url=valkey.url, cwd=tmp_path)
    assert_one_error(done, 2, "RuntimeError: no settings", "brokenapp.py, line 3")
    done = echomq("worker", "nowhere_at_all:app", "-q", "q", url=valkey.url, cwd=tmp_path)
    assert_one_error(done, 2, "No module named 'nowhere_at_all'", "PYTHONPATH")


def test_a_worker_that_cannot_reach_its_server_gives_a_hint() -> None:
    closed = f"redis://127.0.0.1:{free_port()}"
    done = echomq("worker", HANDLER, "-q", "q", url=closed)
    assert_one_error(done, 1, f"cannot serve queue q from {closed}", "echomq serve")
