"""What the dashboard's API checks in a request before it acts: the queue name in the path (one
with braces is no queue's: 400), and a JSON body's size and nesting (a body over ``MAX_BODY``
bytes is refused as it arrives with 413, one nested deeper than ``MAX_DEPTH`` with 400), so a
bad request gets a clear 4xx, never a 500, and a huge one is not read."""

from __future__ import annotations

import functools
import inspect
import itertools
import re
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from echomq.engine.errors import EchoMQError
from echomq.engine.transitions import queue_base

MAX_BODY = 64 * 1024  # the largest state change, 1000 job ids, is well under it
MAX_DEPTH = 32


class BodyRefused(Exception):
    """A request body the API does not read on: its status and reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


async def read_capped(request: Request) -> bytes:
    """The body, read as it arrives, refused once it passes ``MAX_BODY`` (or says it will)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise BodyRefused(413, f"the body is over {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BodyRefused(413, f"the body is over {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def nesting(raw: bytes) -> int:
    """How deep the arrays and objects of JSON text ``raw`` nest (strings skipped), without
    parsing it."""
    steps = (_STEP.get(byte, 0) for byte in _STRING.sub(b"", raw))
    return max(itertools.accumulate(steps, initial=0))


def refused(request: Request) -> Response | None:
    """A 400 for a path whose queue name no queue can have."""
    try:
        queue_base(request.path_params.get("name", ""))
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, 400)
    return None


Endpoint = Callable[[Request], Any]


def checked(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` behind the checks: the queue name first; a refused body, or an id or lane
    the transitions refuse, answered with its 4xx. Stays sync or async as it was (Starlette runs
    a sync one in a thread)."""
    if inspect.iscoroutinefunction(endpoint):
        return _checked_async(endpoint)

    @functools.wraps(endpoint)
    def checked_sync(request: Request) -> Response:
        try:
            return refused(request) or endpoint(request)
        except (BodyRefused, EchoMQError) as exc:
            return _answer(exc)

    return checked_sync


def _checked_async(endpoint: Endpoint) -> Endpoint:
    @functools.wraps(endpoint)
    async def checked_async(request: Request) -> Response:
        try:
            return refused(request) or await endpoint(request)
        except (BodyRefused, EchoMQError) as exc:
            return _answer(exc)

    return checked_async


def _answer(exc: BodyRefused | EchoMQError) -> Response:
    if isinstance(exc, BodyRefused):
        return JSONResponse({"error": exc.reason}, exc.status)
    return JSONResponse({"error": str(exc)}, 400)
