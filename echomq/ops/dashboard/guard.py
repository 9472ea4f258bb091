"""What the dashboard refuses, before any handler runs.

- A ``Host`` not on the allow-list (DNS rebinding: a hostile name resolved to 127.0.0.1): 400.
- Without the right credentials when a token is set (``Authorization: Bearer <token>``, or basic
  auth with the token as password and any user name, which is logged): 401.
- A state change (any method but GET/HEAD/OPTIONS) whose ``Origin`` is missing or names another
  host than the one the page was served on, or that lacks the page's CSRF token in the
  ``X-EchoMQ-CSRF`` header (a cross-site form or a ``no-cors`` fetch cannot set it): 403.
Every answer forbids framing and caching, and the page may only load its own scripts.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

log = logging.getLogger("echomq.ops.dashboard")

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
CSRF_HEADER = "x-echomq-csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Policy:
    """``allowed_hosts``: ``name`` (any port) or ``name:port`` (that port only); ``"*"`` allows
    any Host and gives up the DNS-rebinding defence. ``token``: required credentials, or None."""

    allowed_hosts: tuple[str, ...]
    csrf_token: str
    token: str | None = None


def split_host(host: str) -> tuple[str, str | None]:
    """``("name", "port")`` of a Host header value; IPv6 literals keep their brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else None
    name, colon, port = host.partition(":")
    return name, port if colon else None


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    name, port = split_host(host)
    for entry in allowed:
        if entry == "*":
            return True
        want_name, want_port = split_host(entry)
        if want_name == name and want_port in (None, port):
            return True
    return False


def who(request: Request) -> tuple[str, str | None]:
    """The client address and the authenticated user (basic auth's user name, or ``token``)."""
    client = f"{request.client.host}:{request.client.port}" if request.client else "?"
    return client, request.scope.get("echomq.user")


def refusal(request: Request, policy: Policy) -> Response | None:
    """The answer that refuses ``request``, or None when it may go on."""
    host = request.headers.get("host", "")
    if not host_allowed(host, policy.allowed_hosts):
        return _refuse(request, 400, f"host {host!r} is not allowed")
    if policy.token is not None:
        user = authenticated_user(request.headers.get("authorization", ""), policy.token)
        if user is None:
            return _refuse(request, 401, "credentials required",
                           {"WWW-Authenticate": 'Basic realm="echomq dashboard"'})
        request.scope["echomq.user"] = user
    if request.method not in SAFE_METHODS:
        return _state_change_refusal(request, policy, host)
    return None


def _state_change_refusal(request: Request, policy: Policy, host: str) -> Response | None:
    origin = request.headers.get("origin")
    if origin is None or not same_origin(origin, host):
        return _refuse(request, 403, f"cross-origin request refused (origin {origin!r})")
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), policy.csrf_token.encode()):
        return _refuse(request, 403, "missing or wrong CSRF token")
    return None


def same_origin(origin: str, host: str) -> bool:
    """Whether ``origin`` (scheme://host[:port]) names the host the request was sent to. The
    scheme is not compared: behind a TLS proxy the page is https while the app sees http."""
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower()


def authenticated_user(header: str, token: str) -> str | None:
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
        return "token"
    if scheme == "basic":
        try:
            user, _, password = base64.b64decode(value.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if hmac.compare_digest(password.encode(), token.encode()):
            return user or "token"
    return None


def _refuse(request: Request, status: int, reason: str,
            headers: dict[str, str] | None = None) -> Response:
    client, user = who(request)
    log.warning("dashboard refused %s %r from %s (user %r): %s", request.method,
                request.url.path, client, user, reason)
    return JSONResponse({"error": reason}, status, headers={**SECURITY_HEADERS,
                                                            **(headers or {})})
