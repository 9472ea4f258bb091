"""The command line loads a command only when it runs: ``echomq --help`` lists every command from
the group's table (``echomq.cli.main.COMMANDS``) without importing any of them, so it loads click
and nothing else beyond the standard library. The table's summaries are held to each command's
own help, at every width click may list them in."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import click
import pytest
from click.testing import CliRunner

from echomq.cli.main import COMMANDS, main, summary

# What ``echomq --help`` must not load: the clients, the terminal tables, the codecs, the web
# and metrics libraries, and the package's own client and consumer.
HEAVY = ("redis", "valkey", "hiredis", "rich", "msgspec", "starlette", "uvicorn",
         "prometheus_client", "opentelemetry", "cffi", "_cffi_backend", "echomq._core")

# In a fresh interpreter: HEAVY cannot be imported; ``echomq --help`` runs; what it loaded beyond
# the standard library is printed.
HELP = f"""
import sys
for name in {HEAVY!r}:
    sys.modules[name] = None
before = set(sys.modules)
from echomq.cli.main import main
try:
    main(["--help"])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
loaded = {{name.partition(".")[0] for name in set(sys.modules) - before if sys.modules[name]}}
echomq = sorted(name for name in sys.modules if name.startswith("echomq.") and sys.modules[name])
print(sorted(loaded - set(sys.stdlib_module_names)))
print(echomq)
"""


def test_help_lists_every_command_loading_none_of_them() -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(HELP)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    *shown, packages, modules = done.stdout.strip().splitlines()
    assert packages == "['click', 'echomq']"
    loaded = ast.literal_eval(modules)
    assert [name for name in loaded if name.startswith("echomq.cli.")] == [
        "echomq.cli.errors", "echomq.cli.main"]
    assert not [name for name in loaded if name.startswith(
        ("echomq.consumer", "echomq.queue", "echomq.ops", "echomq.worker", "echomq.tasks",
         "echomq.aio"))]
    listed = [line.split()[0] for line in shown[shown.index("Commands:") + 1:]]
    assert listed == sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_commands_own_help_at_every_width(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None and command.name == name
    assert command.callback is not None
    assert command.callback.__module__ == COMMANDS[name][0]
    for limit in range(10, 200):
        assert summary(name, limit) == command.get_short_help_str(limit), limit


def test_the_listing_is_clicks_own() -> None:
    """The group's help as click would write it from the commands themselves."""

    class Eager(click.Group):
        pass

    eager = Eager(name="main", params=main.params, help=main.help,
                  context_settings=main.context_settings)
    for name in COMMANDS:
        command = main.get_command(click.Context(main), name)
        assert command is not None
        eager.add_command(command, name)
    runner = CliRunner()
    assert runner.invoke(main, ["--help"]).output == runner.invoke(eager, ["--help"]).output


# In a fresh interpreter: what ``echomq worker --help`` (the supervisor's own imports) and a
# blocking worker process's program load of the terminal tables and the asyncio consumer.
WORKER = """
import sys
from echomq.cli.main import main
try:
    main(["worker", "--help"])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print(sorted(name for name in ("rich", "echomq.cli.views") if name in sys.modules))
import echomq.worker.child
print(sorted(name for name in ("echomq.aio", "echomq.consumer.aio") if name in sys.modules))
"""


def test_a_worker_loads_no_tables_and_a_blocking_one_no_asyncio_consumer() -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WORKER)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-2:] == ["[]", "[]"]
