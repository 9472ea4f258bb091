"""How the ``echomq`` command reports what went wrong: one line saying what, one saying what to
try, and an exit code that tells the kind of failure. ``--debug`` shows the traceback instead.

Exit codes: 0 done; 1 the operation failed (no such job, a job that is not dead); 2 bad usage
or input (an unknown option, a wrong URL, a bad job id); 3 the server cannot be reached;
4 the server refused (trafikey not loaded, NOPERM, a wrong password, another error reply).
"""

from __future__ import annotations

from typing import IO, Any

import click

from echomq.engine.errors import KindError, LaneError, TrafikeyMissing

FAILED = 1
BAD_INPUT = 2
UNREACHABLE = 3
REFUSED = 4


class Failure(click.ClickException):
    """A failure shown as ``error: …`` and ``hint: …`` with its own exit code."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.hint = hint
        self.exit_code = exit_code  # type: ignore[misc]

    def show(self, file: IO[Any] | None = None) -> None:
        click.secho(f"error: {self.format_message()}", err=True, fg="red")
        if self.hint:
            click.echo(f"hint: {self.hint}", err=True)


URL_META = "echomq.url"


def server_url() -> str:
    """The server URL the running command connected to, without its credentials (``connect``
    keeps it so), for messages (``?`` before any)."""
    context = click.get_current_context(silent=True)
    return str(context.meta.get(URL_META, "?")) if context is not None else "?"


def debugging() -> bool:
    """Whether the running command was given ``--debug`` (or ``ECHOMQ_DEBUG``)."""
    context = click.get_current_context(silent=True)
    return bool(context is not None and context.find_root().params.get("debug"))


def usage_failure(exc: click.UsageError) -> Failure:
    """Click's report of bad usage (an unknown option, a value out of range) as one line and a
    hint, exit 2."""
    where = exc.ctx.command_path if exc.ctx is not None else "echomq"
    return Failure(exc.format_message(), f"`{where} -h` shows the usage", BAD_INPUT)


def failure_for(exc: BaseException) -> Failure | None:
    """The one-line report of ``exc``, or None for an error nothing is known about (the client
    library's classes loaded only now: ``echomq --help`` never needs them)."""
    import redis

    from echomq.engine.clients import twins

    url = server_url()
    if isinstance(exc, TrafikeyMissing):
        return Failure(exc.reason, "start valkey-server with --loadmodule "
                       "<trafikey.so> (`echomq serve` does), or use --wire 5", REFUSED)
    if isinstance(exc, KindError | LaneError):
        return Failure(str(exc), "job ids look like JOB:<1-200 of A-Za-z0-9._:->; lanes are "
                       "1-200 of A-Za-z0-9._:-", BAD_INPUT)
    if isinstance(exc, twins(redis.AuthenticationError)):
        return Failure(f"{url} refused the credentials: {exc}",
                       "put the user and password in the URL: redis://user:pass@host:port",
                       REFUSED)
    if isinstance(exc, twins(redis.ConnectionError, redis.TimeoutError)):
        return Failure(f"cannot reach Valkey at {url}: {_reason(exc)}",
                       "is the server running? `echomq serve` starts one; point --url or "
                       "ECHOMQ_URL at yours", UNREACHABLE)
    if isinstance(exc, twins(redis.ResponseError)):
        return Failure(f"the server at {url} refused: {exc}", "check the user's permissions "
                       "(ACL) and that this is the echomq server", REFUSED)
    return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().rstrip(".")
    return text.split(". ")[-1] if ". " in text else text


def bad_url(url: str, exc: Exception) -> Failure:
    return Failure(f"not a Valkey URL: {url!r} ({exc})",
                   "use redis://host:port[/db], rediss:// for TLS or unix:///path/to.sock",
                   BAD_INPUT)


class ErrorReportingGroup(click.Group):
    """Turns the exceptions of any subcommand into a :class:`Failure` unless ``--debug``."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise usage_failure(exc) from exc
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            failure = failure_for(exc)
            if failure is None:
                failure = Failure(f"{type(exc).__name__}: {exc}",
                                  "run again with --debug for the traceback")
            raise failure from exc
