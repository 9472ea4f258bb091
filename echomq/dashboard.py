"""``echomq dashboard``: a small web page over the operator's stats — queues, lanes, depths over
time, dead jobs with their errors, and a button that requeues a dead job.

Served by the standard library's threading HTTP server; the page polls a JSON API:
``GET /api/queues`` (every queue's stats), ``GET /api/queues/<name>/dead`` (its dead jobs),
``POST /api/queues/<name>/dead/<id>/requeue``.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import unquote

from echomq import admin
from echomq.errors import EchoMQError

log = logging.getLogger("echomq")


def _page() -> bytes:
    return resources.files("echomq.web").joinpath("dashboard.html").read_bytes()


class DashboardHandler(BaseHTTPRequestHandler):
    """Answers the page and its API from ``server.conn`` (a blocking redis client)."""

    server: DashboardServer

    def do_GET(self) -> None:
        parts = self._parts()
        if parts == []:
            self._send(HTTPStatus.OK, _page(), "text/html; charset=utf-8")
        elif parts == ["api", "queues"]:
            names = admin.queue_names(self.server.conn)
            self._json([admin.stats(self.server.conn, name).as_dict() for name in names])
        elif len(parts) == 4 and parts[:2] == ["api", "queues"] and parts[3] == "dead":
            self._json([asdict(job) for job in admin.dead_jobs(self.server.conn, parts[2])])
        else:
            self._json({"error": "not found"}, HTTPStatus.NOT_FOUND)

    def do_POST(self) -> None:
        parts = self._parts()
        if len(parts) == 6 and parts[:2] == ["api", "queues"] and parts[3::2] == ["dead",
                                                                                  "requeue"]:
            try:
                requeued = admin.requeue(self.server.conn, parts[2], parts[4])
            except (EchoMQError, ValueError) as exc:
                self._json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
                return
            log.info("dashboard requeued %s of %s: %s", parts[4], parts[2], requeued)
            self._json({"requeued": requeued})
        else:
            self._json({"error": "not found"}, HTTPStatus.NOT_FOUND)

    def _parts(self) -> list[str]:
        path = self.path.split("?", 1)[0]
        return [unquote(part) for part in path.split("/") if part]

    def _json(self, body: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("dashboard: " + format, *args)


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, conn: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), DashboardHandler)
        self.conn = conn

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="echomq-dashboard",
                                  daemon=True)
        thread.start()
        return thread
