"""The echomq command line run in-process against a test server, for the CLI tests."""

from __future__ import annotations

from click.testing import CliRunner

from echomq.cli.main import main
from echomq.embedded import EmbeddedValkey


def cli(valkey: EmbeddedValkey, *args: str) -> str:
    """What ``echomq ARGS`` prints against ``valkey``; a command that does not succeed fails
    the test with its output."""
    result = CliRunner().invoke(main, list(args), env={"ECHOMQ_URL": valkey.url},
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output
