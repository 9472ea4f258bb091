"""A raw RESP connection for tests: sends one command, returns the reply's exact bytes.

Framing is hiredis's: bytes are fed to a ``hiredis.Reader`` until it holds one whole reply, so
what comes back is byte-for-byte what the server sent, not a parsed (and normalised) value.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

import hiredis

Arg = bytes | str | int


def encode_command(args: Sequence[Arg]) -> bytes:
    return bytes(hiredis.pack_command(tuple(args)))


class RawConnection:
    """One socket to a server; ``call`` returns the raw reply bytes."""

    def __init__(self, port: int, protocol: int = 2, db: int = 0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        if protocol == 3:
            self.call("HELLO", "3")
        if db:
            assert self.call("SELECT", db) == b"+OK\r\n"

    def call(self, *args: Arg) -> bytes:
        self.sock.sendall(encode_command(args))
        reader = hiredis.Reader()
        received = bytearray()
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            received += chunk
            reader.feed(chunk)
            if reader.gets() is not False:
                return bytes(received)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
