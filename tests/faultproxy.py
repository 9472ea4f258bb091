"""``FaultProxy``: a TCP proxy on loopback between a client and a server, which a test cuts and
restores. While it is down, every connection through it is closed and each new one is accepted
and closed at once, so the client's calls fail fast, as across a network outage; the server and
its other clients go on.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class FaultProxy:
    """Forwards ``127.0.0.1:port`` to ``target_port`` until ``down()``; ``up()`` restores it."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._down = False
        self._closed = False
        self.refused = 0  # connections accepted and closed while down
        self._thread = threading.Thread(target=self._accept, daemon=True, name="fault-proxy")
        self._thread.start()

    def down(self) -> None:
        """Cut every connection through the proxy; refuse new ones until ``up()``."""
        with self._lock:
            self._down = True
            pairs, self._pairs = self._pairs, set()
        for pair in pairs:
            _close(*pair)

    def up(self) -> None:
        with self._lock:
            self._down = False

    def close(self) -> None:
        self._closed = True
        self.down()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down = self._down
                if down:
                    self.refused += 1
            if down:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            pair = (client, server)
            with self._lock:
                self._pairs.add(pair)
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair: tuple[socket.socket, socket.socket]) -> None:
        """Copy bytes both ways until either side closes (or ``down()`` closes both)."""
        client, server = pair
        other = {client: server, server: client}
        with selectors.DefaultSelector() as selector:
            for sock in pair:
                sock.setblocking(True)
                selector.register(sock, selectors.EVENT_READ)
            try:
                while True:
                    for key, _ in selector.select(timeout=0.5):
                        sock = key.fileobj
                        assert isinstance(sock, socket.socket)
                        data = sock.recv(65536)
                        if not data:
                            return
                        other[sock].sendall(data)
                    with self._lock:
                        if pair not in self._pairs:
                            return
            except (OSError, ValueError):
                return
            finally:
                with self._lock:
                    self._pairs.discard(pair)
                _close(client, server)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
