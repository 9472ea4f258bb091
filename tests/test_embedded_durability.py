"""What the embedded server keeps on disk, as docs/GUIDE.md's "machine crash" row says: nothing
(no append-only file, no snapshots) unless asked to persist, then an append-only file synced
every second; ``appendfsync always`` when the config says so."""

from __future__ import annotations

import pytest

from echomq.embedded import EmbeddedValkey
from tests.conftest import start_server


def settings(server: EmbeddedValkey) -> dict[str, str]:
    conn = server.client()
    try:
        return {name: conn.config_get(name)[name] for name in ("appendonly", "appendfsync",
                                                               "save")}
    finally:
        conn.close()


@pytest.mark.parametrize(("options", "expected"), [
    ({}, {"appendonly": "no", "appendfsync": "everysec", "save": ""}),
    ({"persist": True}, {"appendonly": "yes", "appendfsync": "everysec", "save": ""}),
    ({"persist": True, "config": {"appendfsync": "always"}},
     {"appendonly": "yes", "appendfsync": "always", "save": ""}),
], ids=["default", "persist", "always"])
def test_the_embedded_server_persists_with_everysec_only_when_asked(
        options: dict[str, object], expected: dict[str, str]) -> None:
    server = start_server(**options)
    try:
        assert settings(server) == expected
    finally:
        server.stop()
