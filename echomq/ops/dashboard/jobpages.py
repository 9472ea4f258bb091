"""The dashboard's pages of one queue and of one job, and the API behind them (read-only):

- ``GET queues/{name}``: the queue's jobs by state, paged, filtered and searched
  (``echomq.ops.jobs.lists``); its query is the list's, so every view has its own URL.
- ``GET queues/{name}/jobs/{id}``: the job's story (``echomq.ops.jobs.story``).
- ``GET api/queues/{name}/jobs?state=…&cursor=…&limit=…&newest=1&task=…&lane=…&priority=…&
  older_than_ms=…&error=…&args=…&id=…``: a page of a list, ``{"state", "jobs", "next",
  "looked", "bound", "server_time_ms"}``; a bad parameter is a 400 before anything is read.
- ``GET api/queues/{name}/jobs/{id}/story``: the story as JSON (404: no such job).
"""

from __future__ import annotations

import html
from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from echomq.ops.dashboard.guard import Policy
from echomq.ops.dashboard.requests import checked
from echomq.ops.jobs.lists import ListError, filters_of, limit_of, list_jobs
from echomq.ops.jobs.story import story_of

PAGE_FILES = {"queue.js": "text/javascript", "job.js": "text/javascript",
              "pages.js": "text/javascript"}


def page_html(name: str, request: Request, policy: Policy) -> str:
    """Page ``name`` with the app's root path (where it is mounted) and the CSRF token in it:
    the pages live below the root, so they name its API and files from it."""
    root = request.scope.get("root_path", "").rstrip("/")
    body = resources.files("echomq.ops.web").joinpath(name).read_text(encoding="utf-8")
    return body.replace("{{root}}", html.escape(root, quote=True)).replace(
        "{{csrf}}", html.escape(policy.csrf_token, quote=True))


class JobPages:
    def __init__(self, conn: object, policy: Policy) -> None:
        self.conn = conn
        self.policy = policy

    def routes(self) -> list[Route]:
        return [Route("/queues/{name}", checked(self.queue_page)),
                Route("/queues/{name}/jobs/{job_id}", checked(self.job_page)),
                Route("/api/queues/{name}/jobs", checked(self.jobs)),
                Route("/api/queues/{name}/jobs/{job_id}/story", checked(self.story))]

    def queue_page(self, request: Request) -> Response:
        return Response(page_html("queue.html", request, self.policy),
                        media_type="text/html; charset=utf-8")

    def job_page(self, request: Request) -> Response:
        return Response(page_html("job.html", request, self.policy),
                        media_type="text/html; charset=utf-8")

    def jobs(self, request: Request) -> Response:
        params = request.query_params
        try:
            answer = list_jobs(self.conn, request.path_params["name"],
                               params.get("state", "pending"), filters_of(params),
                               cursor=params.get("cursor") or None, limit=limit_of(params),
                               newest=params.get("newest") == "1")
        except ListError as exc:
            return JSONResponse({"error": str(exc)}, 400)
        return JSONResponse(answer)

    def story(self, request: Request) -> Response:
        found = story_of(self.conn, request.path_params["name"], request.path_params["job_id"])
        if found is None:
            return JSONResponse({"error": "no such job"}, 404)
        return JSONResponse(found)
