"""The web dashboard as an ASGI app (Starlette): queues and their lanes, depths over the last
hour, rates, dead jobs with their errors and tracebacks, bulk requeue and purge, a job's cancel.

``create_app(conn_or_url, …)`` is mountable into any ASGI app (FastAPI/Starlette ``mount``, or a
Django ASGI router); ``echomq dashboard`` serves it with uvicorn on 127.0.0.1. What it refuses
(foreign Host, cross-origin or token-less state changes, missing credentials) is in
``echomq.ops.dashboard.guard``; every requeue, purge and cancel is logged on the
``echomq.ops.dashboard`` logger with the client's address and user.

API (paths relative to where the app is mounted): ``GET api/queues``, ``GET api/history``,
``GET api/workers`` (the live workers, read-only: ``{"server_time_ms", "workers": [...]}``),
``GET api/queues/{name}/dead``, ``GET api/queues/{name}/jobs/{id}``,
``POST api/queues/{name}/jobs/{id}/cancel`` (``{"id", "verdict"}``: ``Queue.cancel``'s),
``POST api/queues/{name}/dead/requeue`` (JSON ``{"ids": [...]}``),
``POST api/queues/{name}/dead/purge`` (JSON ``{"limit": n}``),
``GET api/queues/{name}/lanes`` (``{"paused", "lanes": [...]}``: each group's knobs, jobs
waiting, leases held, state), ``POST api/queues/{name}/pause`` and ``.../resume`` (JSON
``{"lane": group}`` or ``{}`` for the whole queue), ``GET api/queues/{name}/events``
(``?since=ID&count=N&block_ms=M``: ``{"enabled", "events": [...], "last"}``, a long poll of the
queue's events stream; ``echomq.ops.dashboard.live``), ``GET api/queues/{name}/limits`` and
``POST`` the same (JSON ``{"concurrency", "rate", "window_ms"}``, each optional, an integer from 1
or null for no limit: ``Queue.set_limits``; the limits as they now apply).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict
from importlib import resources
from typing import Any

import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from echomq.consumer.roster import counts_by_queue, live_workers, running_by_queue
from echomq.engine.errors import EchoMQError
from echomq.engine.server_time import server_ms
from echomq.ops import admin
from echomq.ops.dashboard.guard import LOOPBACK_HOSTS, SECURITY_HEADERS, Policy, refusal, who
from echomq.ops.dashboard.history import COLUMNS, History
from echomq.ops.dashboard.jobpages import PAGE_FILES, JobPages, page_html
from echomq.ops.dashboard.live import events_answer, query_of
from echomq.ops.dashboard.requests import MAX_DEPTH, BodyRefused, checked, nesting, read_capped
from echomq.ops.workflows import workflow_of
from echomq.queue.blocking import recorded_queue
from echomq.queue.lanes import lane_report, lane_waiting
from echomq.queue.limits import KNOBS

__all__ = ["LOOPBACK_HOSTS", "History", "Policy", "create_app"]

log = logging.getLogger("echomq.ops.dashboard")
PREVIEW_BYTES = 4096
MAX_LIST = 1000
LIMIT_MAX = 999_999_999_999_999
# The files the page loads, the only ones ``static/{name}`` serves, and their types.
STATIC_FILES = {"dashboard.js": "text/javascript", "live.js": "text/javascript",
                "workflow.js": "text/javascript", "dashboard.css": "text/css", **PAGE_FILES}


def _asset(name: str) -> str:
    return resources.files("echomq.ops.web").joinpath(name).read_text(encoding="utf-8")


class _Guard(BaseHTTPMiddleware):
    def __init__(self, app: ASGIApp, policy: Policy, history: History) -> None:
        super().__init__(app)
        self.policy = policy
        self.history = history

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        refused = refusal(request, self.policy)
        if refused is not None:
            return refused
        self.history.start()  # mounted apps get no lifespan: the first request starts it
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response


def create_app(conn_or_url: Any, *, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
               token: str | None = None, csrf_token: str | None = None,
               sample_interval_s: float = 5.0, keep_s: float = 3600.0,
               history: History | None = None) -> Starlette:
    """The dashboard over ``conn_or_url`` (a redis client or a ``redis://`` URL).

    ``allowed_hosts``: the Host header values served (``name`` or ``name:port``; default the
    loopback names on any port). ``token``: require it as a bearer token or as the basic-auth
    password. ``csrf_token``: the token the page sends with each state change (default: a new
    random one; give the same to every process that serves the app behind one address)."""
    conn = redis.Redis.from_url(conn_or_url) if isinstance(conn_or_url, str) else conn_or_url
    history = history or History(conn, interval_s=sample_interval_s, keep_s=keep_s)
    policy = Policy(tuple(allowed_hosts), csrf_token or secrets.token_urlsafe(32), token)
    views = _Views(conn, history, policy)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        history.start()
        yield
        history.stop()

    app = Starlette(routes=views.routes(), lifespan=lifespan,
                    middleware=[Middleware(_Guard, policy=policy, history=history)])
    app.state.history = history
    app.state.policy = policy
    return app



class _Views:
    def __init__(self, conn: Any, history: History, policy: Policy) -> None:
        self.conn = conn
        self.history = history
        self.policy = policy

    def routes(self) -> list[Route]:
        return [
            Route("/", self.page), Route("/static/{name}", self.static),
            Route("/api/queues", self.queues), Route("/api/history", self.series),
            Route("/api/workers", self.workers),
            Route("/api/queues/{name}/dead", checked(self.dead)),
            Route("/api/queues/{name}/jobs/{job_id}", checked(self.job)),
            Route("/api/queues/{name}/jobs/{job_id}/workflow", checked(self.workflow)),
            Route("/api/queues/{name}/jobs/{job_id}/cancel", checked(self.cancel),
                  methods=["POST"]),
            Route("/api/queues/{name}/dead/requeue", checked(self.requeue), methods=["POST"]),
            Route("/api/queues/{name}/dead/purge", checked(self.purge), methods=["POST"]),
            Route("/api/queues/{name}/lanes", checked(self.lanes)),
            Route("/api/queues/{name}/pause", checked(self.pause), methods=["POST"]),
            Route("/api/queues/{name}/resume", checked(self.resume), methods=["POST"]),
            Route("/api/queues/{name}/events", checked(self.events)),
            Route("/api/queues/{name}/limits", checked(self.limits)),
            Route("/api/queues/{name}/limits", checked(self.set_limits), methods=["POST"]),
            *JobPages(self.conn, self.policy).routes(),
        ]

    async def page(self, request: Request) -> Response:
        return Response(page_html("dashboard.html", request, self.policy),
                        media_type="text/html; charset=utf-8")

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return JSONResponse({"error": "not found"}, 404)
        return Response(_asset(name), media_type=f"{STATIC_FILES[name]}; charset=utf-8")

    def queues(self, request: Request) -> Response:
        found = [admin.stats(self.conn, name) for name in admin.queue_names(self.conn)]
        live = live_workers(self.conn)
        serving, running = counts_by_queue(live), running_by_queue(live)
        return JSONResponse([{**s.as_dict(), "rates": self.history.rates(s.name),
                              "workers": serving.get(s.name, 0),
                              "running": running.get(s.name, 0), **self._pauses(s.name),
                              "limits": asdict(recorded_queue(self.conn, s.name,
                                                              check_policy=False).limits())}
                             for s in found])

    def _pauses(self, name: str) -> dict[str, Any]:
        """Whether queue ``name`` is paused, and its paused lanes with their jobs waiting."""
        queue = recorded_queue(self.conn, name, check_policy=False)
        whole, lanes = queue.paused()
        depths = {group: lane_waiting(self.conn, queue, group) for group in lanes}
        return {"paused": whole, "paused_lanes": depths}

    def lanes(self, request: Request) -> Response:
        queue = recorded_queue(self.conn, request.path_params["name"], check_policy=False)
        rows = sorted((row for shard in queue.shard_queues for row in lane_report(shard)),
                      key=lambda row: row["group"])
        return JSONResponse({"paused": queue.paused()[0], "lanes": rows})

    async def pause(self, request: Request) -> Response:
        return await self._pause_or_resume(request, True)

    async def resume(self, request: Request) -> Response:
        return await self._pause_or_resume(request, False)

    async def _pause_or_resume(self, request: Request, pause: bool) -> Response:
        body = await _json_body(request)
        lane = body.get("lane") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(lane, str | None):
            return JSONResponse({"error": "a JSON object, with a lane (group) or none"}, 400)
        name = request.path_params["name"]
        queue = recorded_queue(self.conn, name, check_policy=False)
        try:
            if pause:
                queue.pause(lane)
            else:
                queue.resume(lane)
        except (EchoMQError, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, 400)
        action = "pause" if pause else "resume"
        _audit(request, action, name, f"lane={json.dumps(lane)}")
        whole, lanes = queue.paused()
        return JSONResponse({"paused": whole, "paused_lanes": lanes})

    def limits(self, request: Request) -> Response:
        queue = recorded_queue(self.conn, request.path_params["name"], check_policy=False)
        return JSONResponse(asdict(queue.limits()))

    async def set_limits(self, request: Request) -> Response:
        """Set the queue-wide limits the body names (``Queue.set_limits``): each an integer from
        1, or null for no limit; the limits as they now apply."""
        body = await _json_body(request)
        if not isinstance(body, dict) or not body.keys() <= set(KNOBS) or not all(
                value is None or (type(value) is int and 1 <= value <= LIMIT_MAX)
                for value in body.values()):
            return JSONResponse({"error": "a JSON object of concurrency, rate and window_ms, "
                                          f"each an integer from 1 to {LIMIT_MAX} or null "
                                          "(no limit)"}, 400)
        name = request.path_params["name"]
        applied = recorded_queue(self.conn, name, check_policy=False).set_limits(**body)
        _audit(request, "limits", name, f"set={json.dumps(body, sort_keys=True)}")
        return JSONResponse(asdict(applied))

    async def events(self, request: Request) -> Response:
        """The queue's events after ``since`` (the newest without it), waiting up to
        ``block_ms`` for one: the live view's long poll (read-only)."""
        since, count, block_ms = query_of(request.query_params)
        answer = await events_answer(self.conn, request.path_params["name"], since, count,
                                     block_ms)
        return JSONResponse(answer)

    def workers(self, request: Request) -> Response:
        return JSONResponse({"server_time_ms": server_ms(self.conn),
                             "workers": [{**w.as_dict(), "job_ran_ms": w.job_ran_ms}
                                         for w in live_workers(self.conn)]})

    def series(self, request: Request) -> Response:
        return JSONResponse({"interval_s": self.history.interval_s,
                             "columns": COLUMNS,
                             "series": self.history.series()})

    def dead(self, request: Request) -> Response:
        limit = _bounded_int(request.query_params.get("limit"), 100)
        jobs = admin.dead_jobs(self.conn, request.path_params["name"], limit)
        return JSONResponse([asdict(job) for job in jobs])

    def job(self, request: Request) -> Response:
        found = admin.inspect(self.conn, request.path_params["name"],
                              request.path_params["job_id"])
        if found is None:
            return JSONResponse({"error": "no such job"}, 404)
        return JSONResponse(job_detail(found))

    def workflow(self, request: Request) -> Response:
        """The workflow tree around one job (``echomq.ops.workflows``)."""
        found = workflow_of(self.conn, request.path_params["name"],
                            request.path_params["job_id"])
        if found is None:
            return JSONResponse({"error": "no such job"}, 404)
        return JSONResponse(found)

    def cancel(self, request: Request) -> Response:
        """Cancel one job (``Queue.cancel``): its verdict. A bad id is refused (400) by the
        checks around it, before anything is sent."""
        name, job_id = request.path_params["name"], request.path_params["job_id"]
        verdict = recorded_queue(self.conn, name, check_policy=False,
                        events=admin.has_events(self.conn, name)).cancel(job_id)
        _audit(request, "cancel", name, f"id={json.dumps(job_id)} verdict={verdict.value}")
        return JSONResponse({"id": job_id, "verdict": verdict.value})

    async def requeue(self, request: Request) -> Response:
        body = await _json_body(request)
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids or len(ids) > MAX_LIST or not all(
                isinstance(job_id, str) for job_id in ids):
            return JSONResponse({"error": f"ids: a list of 1-{MAX_LIST} job ids"}, 400)
        name = request.path_params["name"]
        try:
            done = {job_id: admin.requeue(self.conn, name, job_id) for job_id in ids}
        except (EchoMQError, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, 400)
        requeued = [job_id for job_id, ok in done.items() if ok]
        not_dead = [job_id for job_id, ok in done.items() if not ok]
        _audit(request, "requeue", name, f"ids={json.dumps(ids)} requeued={len(requeued)} "
                                         f"not_dead={len(not_dead)}")
        return JSONResponse({"requeued": requeued, "not_dead": not_dead})

    async def purge(self, request: Request) -> Response:
        body = await _json_body(request)
        limit = body.get("limit") if isinstance(body, dict) else None
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100_000:
            return JSONResponse({"error": "limit: a number of dead jobs, 1-100000"}, 400)
        name = request.path_params["name"]
        purged = admin.purge(self.conn, name, limit=limit)
        _audit(request, "purge", name, f"limit={limit} purged={purged}")
        return JSONResponse({"purged": purged})


def job_detail(found: dict[str, Any]) -> dict[str, Any]:
    """A job as the page shows it: a preview of its payload, its error's first line apart from
    the traceback that may follow it, the last progress it reported (None: none), and its other
    fields."""
    fields = dict(found["fields"])
    payload = fields.pop("payload", b"")
    progress = fields.pop("progress", None)
    error = admin.readable_error(str(fields.pop("error", "")))
    message, _, traceback = error.partition("\n")
    return {**{k: v for k, v in found.items() if k != "fields"}, "fields": fields,
            "payload_size": len(payload),
            "payload_preview": admin.shown(payload[:PREVIEW_BYTES]),
            "payload_truncated": len(payload) > PREVIEW_BYTES,
            "error": message, "traceback": traceback,
            "progress": None if progress is None else progress[:PREVIEW_BYTES]}


async def _json_body(request: Request) -> Any:
    """The request's JSON body; None for one that is not JSON. A body over ``MAX_BODY`` bytes
    or nested deeper than ``MAX_DEPTH`` is refused (BodyRefused) before it is read further or
    parsed."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return None
    raw = await read_capped(request)
    if nesting(raw) > MAX_DEPTH:
        raise BodyRefused(400, f"the JSON body is nested deeper than {MAX_DEPTH}")
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _bounded_int(raw: str | None, default: int) -> int:
    try:
        return min(max(int(raw), 1), MAX_LIST) if raw is not None else default
    except ValueError:
        return default


def _audit(request: Request, action: str, queue: str, what: str) -> None:
    client, user = who(request)
    # Names come from the URL and the Authorization header: quoted, so they cannot forge lines.
    log.info("dashboard %s queue=%s %s client=%s user=%s", action, json.dumps(queue), what,
             client, json.dumps(user))
