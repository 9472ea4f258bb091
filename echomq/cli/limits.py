"""``echomq limits``: a flat queue's queue-wide limits, shown or set (``Queue.set_limits``):
at most N jobs leased at once, at most R claims a window, shared by every worker."""

from __future__ import annotations

from typing import Any

import click

from echomq.cli.args import QUEUE
from echomq.cli.common import connect, emit, json_option, url_option
from echomq.queue.blocking import recorded_queue
from echomq.queue.limits import Limit, QueueLimits

INT_MAX = 999_999_999_999_999


class LimitValue(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """A limit: an integer from 1, or ``none`` (no limit; the window: its default)."""

    name = "limit"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int | None:
        if value is None or value == "none":
            return None
        if isinstance(value, int):
            return value
        if not (isinstance(value, str) and value.isascii() and value.isdigit()
                and 1 <= int(value) <= INT_MAX and len(value) <= 15):
            self.fail(f"{value!r} is not a limit: an integer from 1 to {INT_MAX}, or none "
                      "(no limit)", param, ctx)
        return int(value)


def limits_text(queue: str, limits: QueueLimits) -> str:
    """``q: at most 4 leased at once, at most 10 claims a 1000 ms window`` (or ``no limits``)."""
    parts = []
    if limits.concurrency is not None:
        parts.append(f"at most {limits.concurrency:,} leased at once")
    if limits.rate is not None:
        parts.append(f"at most {limits.rate:,} claims a {limits.window_ms:,} ms window")
    return f"{queue}: {', '.join(parts) if parts else 'no limits'}"


@click.command()
@click.argument("queue", type=QUEUE)
@click.option("--concurrency", type=LimitValue(), default=None,
              help="lease at most N of its jobs at once, across every worker (none: no limit)")
@click.option("--rate", type=LimitValue(), default=None,
              help="claim at most R of its jobs a window (none: no limit)")
@click.option("--window-ms", type=LimitValue(), default=None,
              help="the rate's window in ms (none: the default, 1000)")
@url_option
@json_option
def limits(queue: str, concurrency: int | None, rate: int | None, window_ms: int | None,
           url: str, as_json: bool) -> None:
    """Show QUEUE's queue-wide limits, or set those given: at most N jobs leased at once and at
    most R claimed a window, shared by every worker of the queue."""
    ctx = click.get_current_context()
    given = {name: value for name, value in (("concurrency", concurrency), ("rate", rate),
                                             ("window_ms", window_ms))
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    changes: dict[str, Limit] = {"concurrency": ..., "rate": ..., "window_ms": ..., **given}
    applied = recorded_queue(connect(url), queue, check_policy=False).set_limits(**changes)
    emit(as_json, {"concurrency": applied.concurrency, "rate": applied.rate,
                   "window_ms": applied.window_ms}, lambda: [limits_text(queue, applied)])
