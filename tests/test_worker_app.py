"""``echomq worker MODULE:APP`` serves the App's own connection and wire: real supervisors run
``tests.served_app:app`` with no ``ECHOMQ_URL`` in their environment, against a server on a port
of its own (never the default one), on either client library.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from echomq.consumer.roster import live_workers
from echomq.embedded import EmbeddedValkey
from tests.conftest import client_of, start_server
from tests.process_groups import group
from tests.served_app import make_app
from tests.test_worker import wait_until

ROOT = Path(__file__).resolve().parent.parent


class Supervisor:
    """An ``echomq worker tests.served_app:app`` process, its stderr in a file."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log_path = log

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def supervisor(server: EmbeddedValkey, log: Path, library: str, wire: int, *options: str,
               periodic: bool = False) -> Iterator[Supervisor]:
    """``echomq worker tests.served_app:app`` for an App on ``server``; stopped after."""
    env = {key: value for key, value in os.environ.items() if key != "ECHOMQ_URL"}
    env.update(SERVED_APP_PORT=str(server.port), SERVED_APP_LIBRARY=library,
               SERVED_APP_WIRE=str(wire), SERVED_APP_PERIODIC="1" if periodic else "0")
    with log.open("wb") as sink, group(
            [sys.executable, "-m", "echomq", "worker", "tests.served_app:app", *options],
            30.0, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=sink,
            stderr=sink) as process:
        yield Supervisor(process, log)


@pytest.fixture
def app_server() -> Iterator[EmbeddedValkey]:
    """A server of the App's own on a free port (the default 6379 is never it)."""
    server = start_server()
    assert server.port != 6379
    yield server
    server.stop()


@pytest.mark.parametrize(("library", "wire"), [("redis", 5), ("valkey", 6)])
def test_a_worker_without_url_serves_its_app_s_server_client_library_and_wire(
        app_server: EmbeddedValkey, tmp_path: Path, library: str, wire: int) -> None:
    conn = client_of(app_server, library)
    handle = make_app(conn, wire).tasks["where"].enqueue()
    with supervisor(app_server, tmp_path / "log", library, wire) as running:
        assert handle.result(timeout=30) == [library, wire], running.log()
        workers = live_workers(conn)
        assert [(worker.queue, worker.wire) for worker in workers] == [("served", wire)]
    conn.close()


def test_a_url_that_is_not_the_app_s_server_is_refused_in_one_line(
        app_server: EmbeddedValkey, valkey: EmbeddedValkey, tmp_path: Path) -> None:
    with supervisor(app_server, tmp_path / "log", "valkey", 5, "--url", valkey.url) as running:
        code = running.process.wait(timeout=60)
        err = running.log()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: --url ") and "is not the server of" in lines[0]
    assert str(valkey.port) in lines[0] and str(app_server.port) in lines[0]
    assert len(lines) == 2 and lines[1].startswith("hint: ")
    assert "Traceback" not in err


def test_the_app_s_own_url_is_accepted(app_server: EmbeddedValkey, tmp_path: Path) -> None:
    conn = client_of(app_server, "redis")
    handle = make_app(conn, 6).tasks["where"].enqueue()
    own_url = app_server.url.replace("127.0.0.1", "localhost")
    with supervisor(app_server, tmp_path / "log", "valkey", 6, "--url", own_url) as running:
        assert handle.result(timeout=30) == ["valkey", 6], running.log()
        assert [worker.wire for worker in live_workers(conn)] == [6]  # the App's, not 5
    conn.close()


def test_periodic_ticks_are_admitted_where_the_worker_runs_them(
        app_server: EmbeddedValkey, tmp_path: Path) -> None:
    conn: Any = client_of(app_server, "valkey")
    with supervisor(app_server, tmp_path / "log", "valkey", 5, periodic=True) as running:
        ran = wait_until(lambda: int(conn.get("served:ticks") or 0) >= 2, 30)
        assert ran, running.log()
    conn.close()
