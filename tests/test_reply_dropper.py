"""The reply-losing proxy the lost-reply tests run through (tests/reply_dropper.py)."""

from __future__ import annotations

import socket

from echomq.embedded import free_port
from tests.reply_dropper import ReplyDropper


def test_a_connection_to_a_server_that_is_down_is_closed_and_the_next_is_served_alike() -> None:
    """As without the proxy: a connection to a server that is down ends at once; the proxy
    goes on accepting (a test's server stopped before its proxy, at the test's end)."""
    dropper = ReplyDropper(free_port())  # nothing listens there
    try:
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", dropper.port), timeout=5) as client:
                assert client.recv(1) == b""  # closed, not left hanging
    finally:
        dropper.close()
