"""Every ```python block of README.md and docs/*.md runs as written, as a user would run it: a
whole script in a fresh directory, against a server this test starts, with the worker it needs
(the conventions are in ``tests/doc_blocks.py``)."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from echomq import Queue
from echomq.consumer.roster import live_workers
from echomq.embedded import EmbeddedValkey
from tests.conftest import start_server
from tests.doc_blocks import Block, blocks_of, every_block, modules_before
from tests.reliability.servers import cluster

ECHOMQ = str(Path(sys.executable).with_name("echomq"))
BOUND_S = 120.0  # a loaded 2-core machine: a bound on waiting, never a speed
SERVED_JOB = "JOB:doc-test-served"
NEEDS = {"worker", "serves", "cluster", "pytest"}


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"not in {BOUND_S} s: {what}"
        time.sleep(0.05)


def pointed(code: str, ports: dict[int, int]) -> str:
    """``code`` with the ports it names (6379, 7000) replaced by the test's servers' ports."""
    for written, actual in ports.items():
        code = re.sub(rf"\b{written}\b", str(actual), code)
    return code


@contextmanager
def servers_for(block: Block) -> Iterator[tuple[EmbeddedValkey, dict[int, int]]]:
    """A valkey-server with trafikey for the block, and a cluster too when it needs one; the
    server, and the ports to put in place of those the block names."""
    server = start_server()
    try:
        if block.need("cluster") is None:
            yield server, {6379: server.port}
            return
        with cluster() as nodes:
            yield server, {6379: server.port, 7000: nodes.nodes[0].port}
    finally:
        server.stop()


@contextmanager
def worker(arguments: str, server: EmbeddedValkey, cwd: Path) -> Iterator[None]:
    """``echomq worker ARGUMENTS`` on the block's server, live before the block runs, and
    stopped (SIGTERM, exit 0) after it."""
    argv = [ECHOMQ, "worker", *shlex.split(arguments), "--url", f"redis://localhost:{server.port}"]
    log = cwd / "worker.log"
    with log.open("w") as output:
        process = subprocess.Popen(argv, cwd=cwd, stdout=output, stderr=subprocess.STDOUT)
    conn = server.client()
    try:
        until(lambda: process.poll() is not None or bool(live_workers(conn)), "a live worker")
        assert process.poll() is None, log.read_text()
        yield
    finally:
        conn.close()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=BOUND_S)
    assert process.returncode == 0, log.read_text()


def run_served(script: Path, queue_name: str, server: EmbeddedValkey) -> None:
    """The block serves ``queue_name`` until stopped: a job enqueued there is done, then
    SIGTERM ends it, exit 0."""
    conn = server.client()
    queue = Queue(conn, queue_name)
    process = subprocess.Popen([sys.executable, script.name], cwd=script.parent,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        queue.enqueue(SERVED_JOB, b"hello")
        until(lambda: process.poll() is not None or queue.outcome(SERVED_JOB).state == "done",
              f"{SERVED_JOB} done")
        assert process.poll() is None, process.communicate()[0]
        process.send_signal(signal.SIGTERM)
        printed = process.communicate(timeout=BOUND_S)[0]
        assert process.returncode == 0, printed
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        conn.close()


def run_script(script: Path, *, pytest_file: bool = False) -> None:
    """Run ``script`` (a test file: by pytest, with the plugins it would meet in a user's
    project but Hypothesis's, two seconds of import on a loaded machine); exit 0."""
    argv = ([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-p", "no:hypothesispytest", script.name] if pytest_file
            else [sys.executable, script.name])
    done = subprocess.run(argv, cwd=script.parent, capture_output=True, text=True,
                          timeout=BOUND_S)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("block", every_block(), ids=lambda block: block.name)
def test_the_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    assert block.needs.partition(" ")[0] in NEEDS | {""}, f"unknown need: {block.needs}"
    with servers_for(block) as (server, ports), ExitStack() as stack:
        for name, code in modules_before(block).items():
            (tmp_path / name).write_text(pointed(code, ports))
        script = tmp_path / (block.module or "block.py")
        script.write_text(pointed(block.code, ports))
        arguments = block.need("worker")
        if arguments is not None:
            stack.enter_context(worker(arguments, server, tmp_path))
        served = block.need("serves")
        if served is not None:
            run_served(script, served, server)
        else:
            run_script(script, pytest_file=block.need("pytest") is not None)


def test_every_document_has_its_blocks_collected() -> None:
    blocks = every_block()
    assert {block.document.name for block in blocks} >= {"README.md", "GUIDE.md", "CLUSTER.md"}
    assert all(block.code.strip() for block in blocks)


def test_the_ports_a_block_names_are_pointed_at_the_tests_servers() -> None:
    code = 'redis.Redis.from_url("redis://localhost:6379")  # 63790, 16379 stay\nport=7000'
    assert pointed(code, {6379: 41001, 7000: 41002}) == (
        'redis.Redis.from_url("redis://localhost:41001")  # 63790, 16379 stay\nport=41002')


def test_a_need_is_read_from_the_comment_before_the_fence(tmp_path: Path) -> None:
    document = tmp_path / "DOC.md"
    document.write_text("text\n<!-- doc-test: worker myapp:app --queue a -->\n```python\n"
                        "# myapp.py\nx = 1\n```\n\n```python\nimport myapp\n```\n")
    first, second = blocks_of(document)
    assert (first.line, first.module, first.need("worker"), first.need("serves")) == (
        4, "myapp.py", "myapp:app --queue a", None)
    assert (second.line, second.module, second.needs) == (9, None, "")
    assert modules_before(second) == {"myapp.py": "# myapp.py\nx = 1\n"}


def test_a_toml_file_is_written_for_the_blocks_after_it_and_never_run(tmp_path: Path) -> None:
    document = tmp_path / "DOC.md"
    document.write_text("```toml\n# pyproject.toml\n[tool.x]\n```\n"
                        "<!-- doc-test: pytest -->\n```python\n# test_x.py\n```\n")
    toml, tests = blocks_of(document)
    assert (toml.language, toml.module, tests.module, tests.need("pytest")) == (
        "toml", "pyproject.toml", "test_x.py", "")
    assert modules_before(tests) == {"pyproject.toml": "# pyproject.toml\n[tool.x]\n"}
