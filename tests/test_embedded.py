"""The embedded server: unix sockets, persistence, and no orphan process in any way of ending."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from echomq import Queue, Verdict
from echomq.embedded import (
    EPHEMERAL_RANGE,
    EmbeddedValkey,
    ServerExited,
    bus_free_port,
    node_port_range,
    start_on_a_free_port,
)

# The child takes SIGINT as Ctrl-C even when its parent runs with SIGINT ignored (a background
# test run), which it would otherwise inherit.
CHILD = """
import sys, signal
from echomq.embedded import EmbeddedValkey
signal.signal(signal.SIGINT, signal.default_int_handler)
with EmbeddedValkey(prefer="path") as server:
    print(server.process.pid, flush=True)
    signal.pause() if sys.argv[1] == "wait" else None
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purpose once its state says so.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def start_child() -> tuple[subprocess.Popen[str], int]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, "wait"], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None
    server_pid = int(child.stdout.readline())
    assert alive(server_pid)
    return child, server_pid


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_no_orphan_when_the_parent_ends(how: signal.Signals) -> None:
    child, server_pid = start_child()
    try:
        child.send_signal(how)
        child.wait(timeout=20)
        assert gone_within(server_pid, 10), f"valkey-server outlived its parent ({how.name})"
    finally:
        for pid in (child.pid, server_pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        child.wait()


def test_unix_socket_and_persistence(tmp_path: Path) -> None:
    with EmbeddedValkey(prefer="path", directory=str(tmp_path), unix_socket=True,
                        persist=True) as server:
        assert server.url == f"unix://{tmp_path}/valkey.sock"
        conn = server.client()
        assert Queue(conn, "q", wire=6).enqueue("JOB:1", b"kept") is Verdict.ENQUEUED
        conn.close()
    assert tmp_path.exists()
    with EmbeddedValkey(prefer="path", directory=str(tmp_path), unix_socket=True,
                        persist=True) as server:
        queue = Queue(server.client(), "q", wire=6)
        job = queue.claim()
        assert job is not None and job.payload == b"kept"
        queue.conn.close()


def test_start_returns_once_the_data_is_loaded(tmp_path: Path) -> None:
    """A server reloading its data answers INFO at once but every command with LOADING until it
    is done: start waits for that, so the first command finds the data."""
    with EmbeddedValkey(prefer="path", directory=str(tmp_path), module=False) as server:
        conn = server.client()
        with conn.pipeline(transaction=False) as pipe:
            for n in range(2_000):
                pipe.set(f"k{n}", n)
            pipe.execute()
        conn.save()  # dump.rdb, in the directory named, which outlives the server
        conn.close()
    # 500 us a key: a second of loading, answering clients between every KB of it (as a large
    # AOF or RDB does), which the start must wait out.
    with EmbeddedValkey(prefer="path", directory=str(tmp_path), module=False,
                        config={"key-load-delay": "500",
                                "loading-process-events-interval-bytes": "1024"}) as server:
        conn = server.client()
        assert conn.info("persistence")["loading"] == 0  # INFO answers while it loads
        assert conn.dbsize() == 2_000
        conn.close()


def test_stop_removes_its_own_directory() -> None:
    server = EmbeddedValkey(prefer="path").start()
    directory, pid = server.directory, server.process.pid  # type: ignore[union-attr]
    server.stop()
    assert not os.path.exists(directory)
    assert gone_within(pid, 5)


@pytest.mark.parametrize("made_before", [True, False], ids=["existing", "missing"])
def test_a_relative_directory_persists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       made_before: bool) -> None:
    monkeypatch.chdir(tmp_path)
    if made_before:
        os.mkdir("data")
    with EmbeddedValkey(prefer="path", directory="./data", persist=True) as server:
        conn = server.client()
        assert Queue(conn, "q", wire=6).enqueue("JOB:1", b"kept") is Verdict.ENQUEUED
        conn.close()
    assert (tmp_path / "data" / "valkey.log").exists()
    with EmbeddedValkey(prefer="path", directory="./data", persist=True) as server:
        queue = Queue(server.client(), "q", wire=6)
        job = queue.claim()
        assert job is not None and job.payload == b"kept"
        queue.conn.close()


def held_port() -> tuple[socket.socket, int]:
    """A loopback port another process's socket listens on (it never answers)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, int(holder.getsockname()[1])


def test_a_server_whose_port_is_taken_says_so_rather_than_wait_on_the_other() -> None:
    holder, port = held_port()
    outcome: list[BaseException] = []

    def start() -> None:
        try:
            EmbeddedValkey(prefer="path", port=port).start(timeout=10)
        except BaseException as exc:
            outcome.append(exc)

    try:
        starting = threading.Thread(target=start, daemon=True)
        starting.start()
        # One probe's timeout (2 s) and the server's exit on its refused bind, with 13 s for a
        # loaded machine: a probe retried by its client (three times, with backoff) took 26 s.
        starting.join(15)
        assert not starting.is_alive(), "the start waited on the port's other process"
    finally:
        holder.close()
    assert len(outcome) == 1 and isinstance(outcome[0], ServerExited), outcome
    assert outcome[0].port_taken


def test_a_node_whose_port_was_taken_is_started_on_another() -> None:
    holder, port = held_port()
    chosen: list[int] = []

    def make(free: int) -> EmbeddedValkey:
        chosen.append(port if not chosen else free)  # the first choice taken meanwhile
        return EmbeddedValkey(prefer="path", port=chosen[-1])

    try:
        server = start_on_a_free_port(make)
    finally:
        holder.close()
    try:
        assert chosen[0] == port and server.port == chosen[-1] != port
        assert server.client().ping()
    finally:
        server.stop()


def test_a_cluster_nodes_port_and_its_bus_port_lie_below_the_ephemeral_ports(
        tmp_path: Path) -> None:
    """A node restarted on its port (a failover test) must find it free: no client connection's
    own port, drawn from the ephemeral range, may be holding it meanwhile."""
    ephemeral = tmp_path / "ip_local_port_range"
    ephemeral.write_text("32768\t60999\n")
    assert node_port_range(ephemeral) == range(10000, 22768)
    ephemeral.write_text("1024\t65535\n")  # no room below: the old range
    assert node_port_range(ephemeral) == range(20000, 45000)
    assert node_port_range(tmp_path / "absent") == range(10000, 22768)
    lowest_ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])  # this machine's
    for _ in range(20):
        port = bus_free_port()
        assert port in node_port_range() and (port + 10000 < lowest_ephemeral
                                              or lowest_ephemeral < 22000)
