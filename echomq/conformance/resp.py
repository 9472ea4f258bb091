"""A raw RESP connection: sends one command, returns the reply's exact bytes.

Framing is hiredis's: bytes are fed to a ``hiredis.Reader`` until it holds one whole reply, so
what comes back is byte-for-byte what the server sent, not a parsed (and normalised) value.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import hiredis

Arg = bytes | str | int


def encode_command(args: Sequence[Arg]) -> bytes:
    # hiredis's stub types the argument as a one-element tuple; any length is packed.
    return bytes(hiredis.pack_command(tuple(args)))  # type: ignore[arg-type]


def parse(reply: bytes) -> Any:
    """A raw reply as hiredis parses it (errors come back as ``hiredis.ReplyError`` values)."""
    reader = hiredis.Reader()
    reader.feed(reply)
    return reader.gets()


@dataclass(frozen=True)
class Address:
    """Where a server listens and how to log in: what a ``redis://`` URL says."""

    host: str = "127.0.0.1"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_url(cls, url: str) -> Address:
        """``redis://[[user]:password@]host[:port][/db]``; anything else is a ValueError."""
        parts = urlsplit(url)
        if parts.scheme != "redis":
            # the scheme alone: the URL may hold a password
            raise ValueError(f"only redis:// URLs are supported (this one's scheme: "
                             f"{parts.scheme!r})")
        db = parts.path.strip("/")
        return cls(parts.hostname or "127.0.0.1", parts.port or 6379, int(db) if db else 0,
                   unquote(parts.username) if parts.username else None,
                   unquote(parts.password) if parts.password else None)


class RawConnection:
    """One socket to a server; ``call`` returns the raw reply bytes."""

    def __init__(self, port: int, protocol: int = 2, db: int = 0, *,
                 host: str = "127.0.0.1", username: str | None = None,
                 password: str | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        try:
            self._start(protocol, db, username, password)
        except BaseException:
            self.sock.close()
            raise

    @classmethod
    def to(cls, address: Address, protocol: int = 2) -> RawConnection:
        return cls(address.port, protocol, address.db, host=address.host,
                   username=address.username, password=address.password)

    def _start(self, protocol: int, db: int, username: str | None,
               password: str | None) -> None:
        if password is not None:
            login: list[Arg] = [username or "default", password]
            self._expect_ok(self.call("AUTH", *login), "AUTH")
        if protocol == 3:
            reply = self.call("HELLO", "3")
            if reply.startswith(b"-"):
                raise ConnectionError(f"HELLO 3 refused: {reply.decode(errors='replace')}")
        if db:
            self._expect_ok(self.call("SELECT", db), "SELECT")

    @staticmethod
    def _expect_ok(reply: bytes, command: str) -> None:
        if reply != b"+OK\r\n":
            raise ConnectionError(f"{command} refused: {reply.decode(errors='replace').strip()}")

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

    def replies(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """``commands`` sent in one write, their replies read in order, each as ``parse`` reads
        it: one round trip for the lot."""
        if not commands:
            return []
        self.sock.sendall(b"".join(encode_command(args) for args in commands))
        reader = hiredis.Reader()
        found: list[Any] = []
        while len(found) < len(commands):
            reply = reader.gets()
            if reply is not False:
                found.append(reply)
                continue
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            reader.feed(chunk)
        return found

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
