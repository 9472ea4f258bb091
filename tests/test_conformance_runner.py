"""``echomq conformance`` against servers it did not start: the report, the exit status, and that
it leaves every key it did not make alone and no scratch key behind (done, failed or stopped)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from echomq import Queue
from echomq.conformance import harness, runner
from echomq.conformance.harness import Pair, ScratchNotEmpty, snapshot
from echomq.conformance.resp import Arg, RawConnection
from echomq.conformance.walk import Walk
from echomq.embedded import EmbeddedValkey
from echomq.engine.transitions import TRANSITIONS, Transition
from tests.conformance_sample import good_cases
from tests.conftest import start_server

NOW = 1_700_000_000_000
ROOT = Path(__file__).resolve().parent.parent
SCRATCH = "{emqconf-*"


@pytest.fixture
def lived_in() -> Iterator[EmbeddedValkey]:
    """A server holding keys of its own (of every type, some expiring, in two dbs) and another
    queue's jobs (pending, leased, dead), and a user that may touch only scratch keys and may not
    flush or list the keyspace: the runner runs as that user."""
    server = start_server()
    conn = server.client()
    conn.set("config:flag", "on")
    conn.hset("user:1", mapping={"name": "ada", "plan": "pro"})
    conn.zadd("scores", {"a": 1, "b": 2})
    conn.rpush("inbox", "m1", "m2")
    conn.set("session:9", "x", px=600_000)
    conn.set("emq:{q}:pending", "not a queue's key, but a queue-looking one")
    queue = Queue(conn, "billing")
    for n in range(3):
        queue.enqueue(f"JOB:{n}", b"p", now=NOW)
    leased = queue.claim(now=NOW)
    assert leased is not None
    queue.retry(leased, error="x", max_attempts=1, now=NOW)
    queue.claim(now=NOW)
    db1 = server.client(db=1)
    db1.set("other-db", "1")
    conn.execute_command("ACL", "SETUSER", "checker", "on", ">pw", "~{emqconf-*", "+@all",
                         "-flushall", "-flushdb", "-keys", "-swapdb", "-select")
    yield server
    server.stop()


def every_key(server: EmbeddedValkey) -> dict[int, harness.Snapshot]:
    found = {}
    for db in (0, 1):
        with RawConnection(server.port, db=db) as conn:
            found[db] = snapshot(conn)
    return found


def conformance(url: str, *args: str, good_cases_only: bool = False
                ) -> subprocess.CompletedProcess[str]:
    """``echomq conformance --url URL ARGS`` in a process of its own; with ``good_cases_only``,
    over each transition's good case in place of the whole table (``tests/conformance_sample``:
    the report's form, not the table, is what such a test checks; this one runs the whole
    table)."""
    start = ["-m", "tests.conformance_sample" if good_cases_only else "echomq"]
    return subprocess.run([sys.executable, *start, "conformance", "--url", url, *args],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)


def test_report_on_a_server_in_use(lived_in: EmbeddedValkey) -> None:
    before = every_key(lived_in)
    url = f"redis://checker:pw@127.0.0.1:{lived_in.port}"
    done = conformance(url, "--seed", "11", "--random-steps", "200")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"echomq conformance: 127.0.0.1:{lived_in.port} db 0 (valkey ")
    assert "random sequence: seed 11, 200 steps" in lines[1]
    for transition in TRANSITIONS:
        (row,) = [line.split() for line in lines if line.startswith(transition.name + " ")]
        assert int(row[1]) > 0 and row[3] == "0", row
    assert lines[-1].startswith("identical: ")
    assert every_key(lived_in) == before
    assert not lived_in.client().keys(SCRATCH)


def test_json_report(lived_in: EmbeddedValkey) -> None:
    done = conformance(f"redis://checker:pw@127.0.0.1:{lived_in.port}", "--json",
                       "--random-steps", "50", "--seed", "4", good_cases_only=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["identical"] is True and report["differences"] == []
    assert (report["seed"], report["random_steps"]) == (4, 50)
    assert report["cases"] == {t.name: 2 for t in TRANSITIONS}  # its good case, RESP2 and 3
    assert sum(report["steps"].values()) == 100  # 50 on RESP2, 50 on RESP3


def test_server_without_trafikey_gets_one_line() -> None:
    server = start_server(module=False)
    try:
        done = conformance(server.url)
        assert done.returncode == 2
        assert done.stdout == ""
        (line,) = done.stderr.splitlines()
        assert line.startswith("echomq conformance: error: the server does not know EMQ.")
        assert "trafikey is not loaded" in line and "--loadmodule" in line
        assert server.client().dbsize() == 0
    finally:
        server.stop()


def test_refused_connection_gets_one_line() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = conformance(f"redis://127.0.0.1:{port}")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line == (f"echomq conformance: error: cannot connect to 127.0.0.1:{port}: connection "
                    "refused (hint: check --url, and that valkey-server runs there)")


def test_a_url_it_cannot_use_is_refused_without_showing_its_password() -> None:
    done = conformance("http://u:s3cret@127.0.0.1:1")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line == ("echomq conformance: error: only redis:// URLs are supported (this one's "
                    "scheme: 'http') (hint: give --url as redis://[user:password@]host:port[/db])")


def test_a_user_without_script_load_gets_one_line(lived_in: EmbeddedValkey) -> None:
    lived_in.client().execute_command("ACL", "SETUSER", "checker", "-script")
    done = conformance(f"redis://checker:pw@127.0.0.1:{lived_in.port}")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"echomq conformance: error: 127.0.0.1:{lived_in.port}: SCRIPT LOAD "
                           "refused: -NOPERM"), line
    assert "(hint: the user needs the EMQ.* commands, EVALSHA, SCRIPT LOAD" in line
    assert not lived_in.client().keys(SCRATCH)


def default_sigint() -> None:
    """In the child, before exec: SIGINT back to its default, so Python raises
    KeyboardInterrupt for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["sigterm", "ctrl-c"])
def test_a_stopped_run_removes_its_scratch_keys(lived_in: EmbeddedValkey, signum: int,
                                               status: int) -> None:
    before = every_key(lived_in)
    command = [sys.executable, "-m", "echomq", "conformance", "--url",
               f"redis://127.0.0.1:{lived_in.port}", "--random-steps", "100000"]
    # SIGINT as a terminal delivers it: a test run in the background of a shell has SIGINT
    # ignored, which the child would otherwise inherit and keep (Ctrl-C never reaches it there).
    # A native crash prints its stack (Python's and the C frames' names) instead of nothing.
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=default_sigint, env=env)
    conn = lived_in.client()
    deadline = time.monotonic() + 120  # a bound for a loaded machine, not a speed
    while not conn.keys(SCRATCH):  # the run is under way once its scratch keys exist
        assert time.monotonic() < deadline and process.poll() is None, "no scratch keys seen"
        time.sleep(0.01)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == status, err
    assert "interrupted; its scratch keys were removed" in err
    assert not conn.keys(SCRATCH)
    assert every_key(lived_in) == before


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["sigterm", "ctrl-c"])
def test_a_stop_arriving_inside_a_call_ends_the_run_after_it(
        valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch, signum: int,
        status: int) -> None:
    """The signal is taken between two calls: the call it arrives in completes (a reply is never
    abandoned half-read), the next one is not made, and the scratch keys are removed."""
    monkeypatch.setattr(signal, "getsignal", lambda signum: signal.default_int_handler)
    real_run = Pair.run
    calls: list[str] = []

    def signalled_inside(self: Pair, transition: Transition, argv: list[Arg],
                         scripts_only: bool = False) -> dict[str, harness.Outcome]:
        calls.append("started")
        if len(calls) == 3:
            os.kill(os.getpid(), signum)  # delivered here, in the middle of the call
        outcomes = real_run(self, transition, argv, scripts_only)
        calls.append("completed")
        return outcomes

    monkeypatch.setattr(Pair, "run", signalled_inside)
    assert runner.run(valkey.url, seed=1, random_steps=50, say=lambda line: None) == status
    assert calls == ["started", "completed"] * 2
    assert not valkey.client().keys(SCRATCH)


def test_a_difference_is_reported_with_its_bytes(valkey: EmbeddedValkey,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A native reply one byte off: the case, the offset and both windows, exit 1."""
    real_run = Pair.run

    def one_byte_off(self: Pair, transition: Transition, argv: list[Arg],
                     scripts_only: bool = False) -> dict[str, harness.Outcome]:
        outcomes = real_run(self, transition, argv, scripts_only)
        if outcomes["native"].reply == b"+ACKED\r\n":
            outcomes["native"].reply = b"+ACKEd\r\n"
        return outcomes

    monkeypatch.setattr(Pair, "run", one_byte_off)
    monkeypatch.setattr(runner, "all_cases", good_cases)  # ack:good among them
    said: list[str] = []
    status = runner.run(valkey.url, seed=1, random_steps=0, say=said.append)
    report = said[0].splitlines()
    assert status == 1
    assert "DIFFERENT ack:good (RESP2)" in report
    assert "    replies differ at byte 5: lua b'+ACKED\\r\\n' native b'+ACKEd\\r\\n'" in report
    assert " differences in " in report[-1]
    assert not valkey.client().keys(SCRATCH)


def test_a_key_it_did_not_make_under_its_prefix_is_left_alone(valkey: EmbeddedValkey) -> None:
    pair = Pair(valkey.port, 2)
    conn: redis.Redis = valkey.client()
    stranger = pair.scratch.prefix("native") + b"emq:{q}:pending"
    try:
        pair.reset()
        conn.set(stranger, "someone else's")
        with pytest.raises(ScratchNotEmpty):
            pair.reset()
        assert conn.get(stranger) == b"someone else's"
    finally:
        conn.delete(stranger)
        pair.close()


def walked(port: int, seed: int, steps: int, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The calls of the random sequence of ``seed``; it must find no difference."""
    calls: list[object] = []
    real_step = Walk.step

    def recorded(self: Walk, transition: Transition, argv: list[Arg]) -> list[str]:
        calls.append((transition.name, argv))
        return real_step(self, transition, argv)

    pair = Pair(port, 3)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(Walk, "step", recorded)
            assert Walk(pair, seed).run(steps).differences == []
        pair.reset()
    finally:
        pair.close()
    return calls


def test_the_random_sequence_is_the_seeds(valkey: EmbeddedValkey,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    first = walked(valkey.port, 9, 150, monkeypatch)
    assert walked(valkey.port, 9, 150, monkeypatch) == first
    assert walked(valkey.port, 10, 150, monkeypatch) != first
    assert {call[0] for call in first} == {t.name for t in TRANSITIONS}  # type: ignore[index]


def test_the_random_sequence_stops_at_a_difference(valkey: EmbeddedValkey,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = Pair.run

    def extended_wrongly(self: Pair, transition: Transition, argv: list[Arg],
                         scripts_only: bool = False) -> dict[str, harness.Outcome]:
        outcomes = real_run(self, transition, argv, scripts_only)
        if outcomes["native"].reply == b"+EXTENDED\r\n":
            outcomes["native"].reply = b"+STALE\r\n"
        return outcomes

    monkeypatch.setattr(Pair, "run", extended_wrongly)
    pair = Pair(valkey.port, 2)
    try:
        found = Walk(pair, 9).run(1_000).differences
        pair.reset()
    finally:
        pair.close()
    assert found[0].startswith("step ") and " extend " in found[0]
    assert found[1] == "replies differ at byte 1: lua b'+EXTENDED\\r\\n' native b'+STALE\\r\\n'"
