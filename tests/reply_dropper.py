"""A TCP proxy on loopback that loses replies: it forwards every request to the server, and for
a request it was told to watch for, it waits for the server's reply (so the call was applied)
and closes the client's connection instead of forwarding it — a reply lost on the way back."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

Watch = Callable[[bytes], bool]


class ReplyDropper:
    """Proxies 127.0.0.1:``port`` to the server at ``upstream``; ``drop(watch, n)`` loses the
    replies of the next ``n`` requests ``watch`` picks (with ``reply``: of those whose reply it
    picks too); ``dropped`` counts those lost."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._watch: Watch | None = None
        self._reply: Watch | None = None
        self._left = 0
        self.dropped = 0
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def drop(self, watch: Watch, count: int = 1, reply: Watch | None = None) -> None:
        with self._lock:
            self._watch, self._left, self._reply = watch, count, reply

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:  # the server is down (or stopped first at a test's end): so is the
                _close(client)  # proxied connection, as it would be without the proxy
                continue
            self._sockets += [client, server]
            armed = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, armed),
                             daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, armed),
                             daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket,
                  armed: threading.Event) -> None:
        while chunk := _recv(client):
            with self._lock:
                if self._left and self._watch is not None and self._watch(chunk):
                    if self._reply is None:
                        self._left -= 1
                    armed.set()
            try:
                server.sendall(chunk)
            except OSError:
                return
        _close(client, server)

    def _replies(self, server: socket.socket, client: socket.socket,
                 armed: threading.Event) -> None:
        while chunk := _recv(server):
            if armed.is_set() and self._lose(chunk):  # the watched call's reply: applied, lost
                _close(client, server)
                return
            armed.clear()
            try:
                client.sendall(chunk)
            except OSError:
                return
        _close(client, server)

    def _lose(self, reply: bytes) -> bool:
        with self._lock:
            if self._reply is not None:
                if not self._left or not self._reply(reply):
                    return False
                self._left -= 1
            self.dropped += 1
            return True


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
