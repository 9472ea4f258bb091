"""The command line and the live-worker registry are in modules a reader takes in whole: each
under 500 lines, every command in the module of its concern and registered by the group, which
holds no command of its own (no command imports it: `.importlinter`, inside-cli). The dashboard
page's scripts (echomq/ops/web/*.js) are held to the same 500 lines."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from echomq.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
MOST_LINES = 499
MODULES = [*sorted((ROOT / "echomq" / "cli").glob("*.py")),
           ROOT / "echomq" / "consumer" / "presence.py",
           ROOT / "echomq" / "consumer" / "roster.py",
           *sorted((ROOT / "echomq" / "ops" / "web").glob("*.js"))]

# Each command of `echomq`, and the module that defines it.
HOMES = {
    "enqueue": "jobs", "inspect": "jobs", "cancel": "jobs",
    "stats": "queues", "lanes": "queues", "pause": "queues", "resume": "queues",
    "recover": "queues", "forget": "queues", "migrate": "queues", "events": "events",
    "dead": "dead", "dead list": "dead", "dead requeue": "dead", "dead purge": "dead",
    "dead bounds": "dead",
    "worker": "workers", "workers": "workers",
    "serve": "serve", "dashboard": "serve",
    "demo": "tools", "bench": "tools", "conformance": "tools",
    "limits": "limits",
}


def homes(group: click.Group, prefix: str = "") -> dict[str, str]:
    """Each command under ``group`` (a subgroup's too), by its path, and its callback's module."""
    found: dict[str, str] = {}
    context = click.Context(group)
    for name in group.list_commands(context):  # the top group imports each on first use
        command = group.get_command(context, name)
        assert command is not None and command.callback is not None
        found[prefix + name] = command.callback.__module__
        if isinstance(command, click.Group):
            found |= homes(command, f"{prefix}{name} ")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_each_module_is_under_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MOST_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_the_group_registers_every_command_from_the_module_of_its_concern() -> None:
    assert isinstance(main, click.Group)
    assert homes(main) == {path: f"echomq.cli.{home}" for path, home in HOMES.items()}
