"""Every shell block of README.md and docs/ runs as written, as a user would run it in a
terminal, against a server this test starts; every other block is classified, and a block no
test runs fails here (the conventions and the rules: ``tests/shell_blocks.py``)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from echomq import Queue, Verdict
from echomq.consumer.roster import live_workers
from echomq.embedded import EmbeddedValkey, free_port
from tests.conftest import start_server
from tests.doc_blocks import ROOT, every_block, modules_before
from tests.reliability.servers import low_port, node
from tests.shell_blocks import (
    RECIPES,
    Fenced,
    argv_of,
    classify,
    commands_of,
    every_fenced,
    fenced_of,
    long_running,
    make_target,
    output_shape,
)

VENV_BIN = Path(sys.executable).parent
READY_S = 120.0  # a loaded 2-core machine: bounds on waiting, never a speed
COMMAND_S = 900.0  # `echomq conformance` and `make demo` run for a minute or more there
BLOCK_S = 1800  # a block of several such commands
SERVER_PORT, DASHBOARD_PORT, CLUSTER_PORTS = 6379, 8042, (7000, 7001, 7002)  # as written


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_S
    while not condition():
        assert time.monotonic() < deadline, f"not in {READY_S} s: {what}"
        time.sleep(0.1)


def pointed(text: str, ports: dict[int, int]) -> str:
    for written, actual in ports.items():
        text = re.sub(rf"\b{written}\b", str(actual), text)
    return text


def shell_blocks(*, django: bool) -> list[Fenced]:
    return [block for block in every_fenced() if classify(block) == "shell"
            and (block.need("django") is not None) == django]


@dataclass
class Running:
    """A command that runs until stopped, in a process group of its own."""

    command: str
    process: subprocess.Popen[bytes]
    log: Path

    def printed(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=READY_S)
        finally:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class Session:
    """A terminal of the user's: a directory, an environment, the test's server."""

    cwd: Path
    server: EmbeddedValkey
    ports: dict[int, int]
    env: dict[str, str] = field(default_factory=dict)
    running: list[Running] = field(default_factory=list)

    def run(self, command: str, shown: list[str]) -> None:
        command = pointed(command, self.ports)
        target = make_target(command)
        if target in RECIPES:
            check_recipe(target)  # type: ignore[arg-type]
        elif command.startswith("export "):
            name, _, value = shlex.split(command, comments=True)[1].partition("=")
            self.env[name] = value
        elif long_running(command):
            self.start(command)
        else:
            printed = self.foreground(sampled(command), ROOT if target else self.cwd)
            if shown:
                assert output_shape(shown).fullmatch(printed), (command, printed)

    def foreground(self, command: str, cwd: Path) -> str:
        if make_target(command):
            up_to_date = subprocess.run(["make", "-q", "install"], cwd=ROOT, env=self.env)
            assert up_to_date.returncode == 0, "run `make install` first: this test builds nothing"
        process = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=self.env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            printed = process.communicate(timeout=COMMAND_S)[0]
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        assert process.returncode == 0, f"{command}: exit {process.returncode}\n{printed}"
        return printed

    def start(self, command: str) -> None:
        log = self.cwd / f"running-{len(self.running)}.log"
        words, argv = shlex.split(command, comments=True), argv_of(command)
        assignments = dict(word.split("=", 1) for word in words[:len(words) - len(argv)])
        with log.open("wb") as output:  # as bash would exec it, the signals its own
            process = subprocess.Popen(argv, cwd=self.cwd, env={**self.env, **assignments},
                                       stdout=output, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        running = Running(command, process, log)
        self.running.append(running)
        ready = {"worker": self.worker_ready, "dashboard": self.dashboard_ready,
                 "serve": self.server_ready}[argv[1]](running, argv)
        until(lambda: process.poll() is not None or ready(), f"{command} serving")
        assert process.poll() is None, f"{command}: exit {process.returncode}\n{running.printed()}"

    def worker_ready(self, _: Running, __: list[str]) -> Callable[[], bool]:
        conn = self.server.client()
        before = len(live_workers(conn))
        return lambda: len(live_workers(conn)) > before

    @staticmethod
    def dashboard_ready(_: Running, argv: list[str]) -> Callable[[], bool]:
        port = int(argv[argv.index("--port") + 1]) if "--port" in argv else DASHBOARD_PORT

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    return bool(page.status == 200)
            except OSError:
                return False
        return answers

    def server_ready(self, running: Running, argv: list[str]) -> Callable[[], bool]:
        def answers() -> bool:
            found = re.search(r"^export ECHOMQ_URL=(\S+)$", running.printed(), re.MULTILINE)
            if found is None:
                return False
            with redis.Redis.from_url(found[1]) as client:
                assert client.ping()
            if "--dir" in argv:  # the data is kept where the user said, from where they ran it
                assert (self.cwd / argv[argv.index("--dir") + 1] / "appendonlydir").is_dir()
            return True
        return answers

    def stop(self) -> None:
        """Every command still running gets SIGTERM and must exit 0."""
        failed = []
        for running in reversed(self.running):
            status = running.stop()
            if status != 0:
                failed.append(f"{running.command}: exit {status}\n{running.printed()}")
        self.running.clear()
        assert not failed, "\n".join(failed)


def sampled(command: str) -> str:
    """``echomq conformance`` as written, over each transition's good case
    (``tests/conformance_sample.py``): the block's command line, options and report are what
    this test checks; the whole table through the command is
    ``test_conformance_runner.py::test_report_on_a_server_in_use``'s, and the table's own."""
    if not command.startswith("echomq conformance"):
        return command
    return (f"PYTHONPATH={shlex.quote(str(ROOT))} {shlex.quote(sys.executable)} "
            f"-m tests.conformance_sample{command.removeprefix('echomq')}")


def check_recipe(target: str) -> None:
    """``make -n TARGET``: the target exists and its recipe runs what the README says."""
    dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True,
                         timeout=READY_S)
    assert dry.returncode == 0, f"make -n {target}: {dry.stderr}"
    missing = [command for command in RECIPES[target] if command not in dry.stdout]
    assert not missing, f"make {target} does not run {missing}:\n{dry.stdout}"
    if target == "test-wheel":  # "that wheel in a fresh venv with no C compiler ..., then demo"
        check = (ROOT / ".ci" / "wheel-check").read_text()
        assert 'CC="$work/no-such-cc"' in check and check.rstrip().endswith("echomq demo")


def session_env(server: EmbeddedValkey) -> dict[str, str]:
    """The user's environment: the venv's bin and the server's valkey-cli first, no URL set."""
    env = {name: value for name, value in os.environ.items() if name != "ECHOMQ_URL"}
    path = [str(VENV_BIN)]
    cli = Path(server.server).with_name("valkey-cli")
    if cli.is_file():
        path.append(str(cli.parent))
    env["PATH"] = os.pathsep.join([*path, env.get("PATH", "")])
    return env


@contextmanager
def cluster_nodes(ports: dict[int, int]) -> Iterator[None]:
    """Three cluster-enabled nodes with trafikey, not joined, in place of 7000, 7001, 7002."""
    nodes: list[EmbeddedValkey] = []
    try:
        for written in CLUSTER_PORTS:
            used = set(ports.values()) | {p + 10000 for p in ports.values()}
            ports[written] = low_port(used)
            nodes.append(node(port=ports[written], config={
                "cluster-enabled": "yes", "cluster-config-file": "nodes.conf",
                "appendonly": "no"}))
            nodes[-1].start()
        yield
    finally:
        for started in nodes:
            started.stop()


def make_dead(server: EmbeddedValkey, argument: str) -> None:
    """Job ID of QUEUE dead, as the block presumes."""
    queue_name, job_id = argument.split()
    conn = server.client()
    try:
        queue = Queue(conn, queue_name)
        assert queue.enqueue(job_id, b"{}") is Verdict.ENQUEUED
        job = queue.claim(lease_ms=30_000)
        assert job is not None
        assert queue.retry(job, delay_ms=0, error="ValueError: no such address",
                           max_attempts=1) is Verdict.DEAD
    finally:
        conn.close()


def run_block(block: Fenced, cwd: Path) -> None:
    server = start_server()
    with ExitStack() as stack:
        stack.callback(server.stop)
        ports = {SERVER_PORT: server.port, DASHBOARD_PORT: free_port()}
        if block.need("cluster-nodes") is not None:
            stack.enter_context(cluster_nodes(ports))
        for name, code in modules_before(block.as_python_block()).items():
            (cwd / name).write_text(pointed(code, ports))
        dead = block.need("dead")
        if dead is not None:
            make_dead(server, dead)
        session = Session(cwd, server, ports, session_env(server))
        try:
            for command, shown in commands_of(block):
                session.run(command, shown)
        except BaseException:
            for running in session.running:
                print(f"--- {running.command}\n{running.printed()}")
            raise
        finally:
            session.stop()


@pytest.mark.parametrize("block", shell_blocks(django=False), ids=lambda block: block.name)
@pytest.mark.timeout(BLOCK_S)
def test_the_shell_block_runs_as_written(block: Fenced, tmp_path: Path) -> None:
    run_block(block, tmp_path)


@pytest.mark.parametrize("block", shell_blocks(django=True), ids=lambda block: block.name)
@pytest.mark.timeout(BLOCK_S)
def test_the_django_block_runs_as_written(block: Fenced, tmp_path: Path) -> None:
    pytest.importorskip("django.tasks", reason="Django 6 (Python 3.12+): make test-django runs it")
    run_block(block, tmp_path)


def test_every_block_of_the_docs_is_classified() -> None:
    unclassified = []
    for block in every_fenced():
        try:
            classify(block)
        except AssertionError as error:
            unclassified.append(str(error))
    assert not unclassified, "\n".join(unclassified)
    kinds = {classify(block) for block in every_fenced()}
    assert kinds == {"python", "shell", "session", "illustration", "queries", "file"}


def test_the_python_blocks_are_those_test_doc_blocks_runs() -> None:
    python = {(block.document, block.line) for block in every_fenced()
              if classify(block) == "python"}
    assert python == {(block.document, block.line) for block in every_block()}


def test_a_block_no_test_runs_fails(tmp_path: Path) -> None:
    document = tmp_path / "DOC.md"
    document.write_text("```ruby\nputs 1\n```\n\n```sh\nmake clean\n```\n\n"
                        "```text\n$ echomq stats\n```\n\n"
                        "<!-- doc-test: mystery -->\n```sh\nls\n```\n"
                        "\n- item\n\n   ```bash\n   echomq stats\n   ```\n")
    *unrun, indented = fenced_of(document)
    for block in unrun:
        with pytest.raises(AssertionError):
            classify(block)
    assert (indented.language, indented.code, classify(indented)) == ("bash", "echomq stats\n",
                                                                      "shell")


def test_an_output_shape_stands_for_words_with_digits_and_elided_lines() -> None:
    shape = output_shape(["transition  cases  steps", "enqueue   138  146", "...",
                          "identical: 12 case runs"])
    assert shape.fullmatch("transition cases steps\nenqueue 7 9\nclaim 1 2\nx\n"
                           "identical: 3 case runs\n")
    assert not shape.fullmatch("transition cases steps\nenqueue 7 9\nidentical: 3 cases\n")
    assert not shape.fullmatch("transitions cases steps\nenqueue 7 9\nidentical: 3 case runs\n")


def test_the_metrics_the_queries_name_are_exported() -> None:
    source = (ROOT / "echomq" / "ops" / "metrics.py").read_text()
    for block in every_fenced():
        if classify(block) != "queries":
            continue
        for name in set(re.findall(r"\bechomq_\w+", block.code)):
            base = re.sub(r"_(total|bucket|sum|count)$", "", name)
            assert f'"{base}"' in source, f"{block.name}: {name} is not exported"
