"""Servers for the reliability scenarios: restartable single nodes and a loopback cluster.

Every server honours ``ECHOMQ_VALKEY_SERVER`` and ``ECHOMQ_ASAN`` as ``tests.conftest`` does; the
callers stop what they start in ``finally`` blocks (or through the context managers here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from echomq.embedded import EmbeddedValkey, bus_free_port, find_valkey_server, start_on_a_free_port
from tests.conftest import server_options

T = TypeVar("T")

# Errors a client sees while a server is down, restarting, loading its data or failing over.
TRANSIENT: tuple[type[BaseException], ...] = (
    redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, ConnectionError,
    redis.exceptions.ReadOnlyError, redis.exceptions.TryAgainError, redis.exceptions.ClusterError,
)


def node(**options: Any) -> EmbeddedValkey:
    """An EmbeddedValkey not yet started (the PATH server unless ECHOMQ_VALKEY_SERVER says)."""
    return EmbeddedValkey(prefer="path", **server_options(**options))


def server_version() -> str:
    out = subprocess.run([find_valkey_server("path"), "--version"], check=True,
                         capture_output=True, text=True).stdout
    return next((part[2:] for part in out.split() if part.startswith("v=")), out.strip())


def persist(call: Callable[[], T], *, timeout: float = 60.0, pause: float = 0.05) -> T:
    """Runs ``call`` until it returns without a transient error (bounded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except TRANSIENT:
            if time.monotonic() > deadline:
                raise
            time.sleep(pause)


def node_id(server: EmbeddedValkey) -> str:
    """``server``'s cluster node id."""
    client = server.client()
    try:
        reply = client.execute_command("CLUSTER", "MYID")
    finally:
        client.close()
    return reply.decode() if isinstance(reply, bytes) else str(reply)


def owner(nodes: list[EmbeddedValkey], slot: int) -> EmbeddedValkey:
    """The node of ``nodes`` serving ``slot``, as the first node's slot map says."""
    client = nodes[0].client()
    try:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return next(n for n in nodes if n.port == int(primary[1]))
    finally:
        client.close()
    raise LookupError(slot)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def low_port(avoid: set[int]) -> int:
    """A free loopback port below 45000 whose cluster bus port (+10000) is free too."""
    return bus_free_port(avoid)


def cli(*args: str, timeout: float = 120.0) -> str:
    """Runs valkey-cli (next to the server binary when it has one, else PATH's)."""
    server = find_valkey_server("path")
    sibling = os.path.join(os.path.dirname(server), "valkey-cli")
    binary = sibling if os.path.isfile(sibling) else (shutil.which("valkey-cli") or "valkey-cli")
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"valkey-cli {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


class Cluster:
    """``size`` primaries on loopback, trafikey loaded on each, slots spread by valkey-cli."""

    def __init__(self, size: int = 3) -> None:
        self.size = size
        self.nodes: list[EmbeddedValkey] = []

    def start(self) -> Cluster:
        used: set[int] = set()
        for _ in range(self.size):
            server = start_on_a_free_port(lambda port: node(port=port, config={
                "cluster-enabled": "yes", "cluster-config-file": "nodes.conf",
                "cluster-node-timeout": "5000", "appendonly": "no"}), used)
            used |= {server.port, server.port + 10000}
            self.nodes.append(server)
        cli("--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
            "--cluster-replicas", "0", "--cluster-yes")
        for server in self.nodes:
            wait_until(lambda s=server: self.info(s)["cluster_state"] == "ok",  # type: ignore
                       f"cluster_state:ok on {server.port}")
        return self

    @staticmethod
    def info(server: EmbeddedValkey) -> dict[str, str]:
        client = server.client()
        try:
            text = client.execute_command("CLUSTER", "INFO")
        finally:
            client.close()
        text = text.decode() if isinstance(text, bytes) else text
        return dict(line.split(":", 1) for line in text.split() if ":" in line)

    def node_id(self, server: EmbeddedValkey) -> str:
        return node_id(server)

    def owner(self, slot: int) -> EmbeddedValkey:
        """The node serving ``slot`` (asked of the first node; stable outside a reshard)."""
        return owner(self.nodes, slot)

    def client(self, **options: Any) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, **options)

    def stop(self) -> None:
        for server in self.nodes:
            server.stop()
        self.nodes = []


@contextmanager
def cluster(size: int = 3) -> Iterator[Cluster]:
    made = Cluster(size)
    try:
        yield made.start()
    finally:
        made.stop()


@contextmanager
def own_directory(prefix: str) -> Iterator[str]:
    """A temporary directory kept across restarts of the servers using it, removed after."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# An AOF written through to the file before each reply.
FSYNCED_AOF = {"appendonly": "yes", "appendfsync": "always"}


@contextmanager
def durable_node(prefix: str) -> Iterator[EmbeddedValkey]:
    """A server with the module, writing an fsynced AOF into a directory that outlives it, so a
    restart on the same port loads what it wrote."""
    with own_directory(prefix) as directory:
        server = node(directory=directory, config=FSYNCED_AOF)
        try:
            server.start()
            yield server
        finally:
            server.stop()
