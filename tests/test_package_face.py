"""The package's face: every public name of ``echomq`` loads on first use (PEP 562), so the
protocol table and its generator need only the standard library — run here in a fresh
interpreter where redis, valkey, msgspec, hiredis, cffi and the compiled core cannot be
imported — while ``from echomq import Queue, ...``, ``echomq.aio`` and ``dir()`` work as ever."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import echomq

BLOCKED = ("redis", "valkey", "msgspec", "hiredis", "cffi", "_cffi_backend", "echomq._core")

# Run first in the child: the third-party packages cannot be imported, and what the body loads
# beyond the standard library is reported.
PRELUDE = f"""
import sys
for name in {BLOCKED!r}:
    sys.modules[name] = None
before = set(sys.modules)
"""
REPORT = """
loaded = {name.partition(".")[0] for name in set(sys.modules) - before if sys.modules[name]}
print(sorted(loaded - set(sys.stdlib_module_names) - {"echomq"}))
"""
CHECK_HEADER = """
import runpy
sys.argv = ["protocol_gen", "--check"]
try:
    runpy.run_module("echomq.engine.protocol_gen", run_name="__main__")
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
"""


def run_blocked(body: str) -> str:
    """What ``body`` loaded beyond the standard library, run with BLOCKED unimportable."""
    code = PRELUDE + textwrap.dedent(body) + REPORT
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("body", ["import echomq.engine.transitions", "import echomq",
                                  "import echomq.engine.protocol_gen", CHECK_HEADER],
                         ids=["transitions", "package", "generator", "generator --check"])
def test_the_table_and_its_generator_need_only_the_standard_library(body: str) -> None:
    assert run_blocked(body) == "[]"


def test_every_public_name_loads_on_first_use() -> None:
    namespace: dict[str, object] = {}
    exec("from echomq import *", namespace)  # the star import, as users write it
    assert set(echomq.__all__) <= set(namespace)
    for name in echomq.__all__:
        assert getattr(echomq, name) is namespace[name]
    from echomq import App, Consumer, Queue, Wire

    assert (Queue.__module__, Consumer.__module__, App.__module__) == (
        "echomq.queue.blocking", "echomq.consumer.blocking", "echomq.tasks.app")
    assert Wire.SCRIPTS == 5 and Wire.NATIVE == 6


def test_submodules_are_reached_as_attributes_and_dir_lists_the_names() -> None:
    assert echomq.aio.Queue.__module__ == "echomq.queue.aio"
    assert echomq.aio.Consumer.__module__ == "echomq.consumer.aio"
    assert echomq.embedded.EmbeddedValkey.__name__ == "EmbeddedValkey"
    assert set(echomq.__all__) <= set(dir(echomq))
    with pytest.raises(AttributeError, match="no attribute 'nowhere'"):
        echomq.nowhere  # noqa: B018 - the attribute access is the test


def test_the_subpackage_faces_give_the_same_names() -> None:
    from echomq.consumer import Consumer
    from echomq.queue import Job, Queue

    assert (Queue, Job, Consumer) == (echomq.Queue, echomq.Job, echomq.Consumer)
    assert set(dir(echomq.queue)) >= {"Queue", "Job", "Verdict"}
    with pytest.raises(AttributeError, match="no attribute 'nowhere'"):
        echomq.consumer.nowhere  # noqa: B018 - the attribute access is the test
