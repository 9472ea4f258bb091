"""The servers a developer or an operator runs in the foreground: ``echomq serve`` (valkey-server
with trafikey loaded) and ``echomq dashboard`` (the web dashboard). SIGINT or SIGTERM stops
either."""

from __future__ import annotations

import os
import socket
import threading

import click

from echomq.cli.common import connect, stop_on_signals, url_option
from echomq.cli.errors import Failure
from echomq.embedded import EmbeddedValkey


@click.command()
@click.option("--dir", "directory", default=None, type=click.Path(file_okay=False),
              help="keep the data in this directory (append-only file); default: a temp dir")
@click.option("--port", default=None, type=click.IntRange(1, 65535), help="default: a free one")
@click.option("--unix-socket", is_flag=True, help="listen on <dir>/valkey.sock instead")
def serve(directory: str | None, port: int | None, unix_socket: bool) -> None:
    """Run a valkey-server with trafikey loaded in the foreground, for development."""
    stop = stop_on_signals()  # before anything starts: a stop during start-up is kept
    if directory:
        directory = os.path.abspath(directory)  # the server runs in its own directory
        os.makedirs(directory, exist_ok=True)
    server = EmbeddedValkey(directory=directory, port=port, persist=directory is not None,
                            unix_socket=unix_socket)
    with server:
        click.echo(f"valkey-server with trafikey at {server.url} (Ctrl-C or SIGTERM stops it)")
        click.echo(f"export ECHOMQ_URL={server.url}")
        _wait_for(stop, server)


def _wait_for(stop: threading.Event, server: EmbeddedValkey) -> None:
    while not stop.wait(0.5):
        if server.process is None or server.process.poll() is not None:
            raise click.ClickException(f"valkey-server exited:\n{server.log()[-2000:]}")


LOOPBACK_ADDRESSES = ("127.0.0.1", "::1", "localhost")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="the address to listen on; anything but loopback is reachable by others")
@click.option("--port", default=8042, show_default=True, type=click.IntRange(0, 65535),
              help="0: a free one")
@click.option("--token", envvar="ECHOMQ_DASHBOARD_TOKEN", show_envvar=True, default=None,
              help="require it: as a bearer token, or as the basic-auth password")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME[:PORT]",
              help="a Host header to serve besides localhost, 127.0.0.1 and [::1] on this "
                   "port (the name people reach it by); repeatable")
@url_option
def dashboard(host: str, port: int, token: str | None, allow_hosts: tuple[str, ...],
              url: str) -> None:
    """Serve the web dashboard: queues, lanes, depths over the last hour, rates, dead jobs with
    their errors, requeue and purge. State changes need the page's CSRF token and its origin."""
    import uvicorn

    from echomq.ops.dashboard import LOOPBACK_HOSTS, create_app

    conn = connect(url)
    conn.ping()  # one clear error now rather than a page of them later
    listener = _listen(host, port)
    bound = listener.getsockname()[1]
    allowed = [f"{name}:{bound}" for name in LOOPBACK_HOSTS] + list(allow_hosts)
    if host not in LOOPBACK_ADDRESSES:
        _warn_exposed(host, token)
    app = create_app(conn, allowed_hosts=allowed, token=token)
    shown_host = f"[{host}]" if ":" in host else host
    click.echo(f"echomq dashboard at http://{shown_host}:{bound}/ (Ctrl-C or SIGTERM stops it)")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    stop = stop_on_signals()
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]},
                              name="echomq-dashboard", daemon=True)
    thread.start()  # off the main thread, so the signals stay ours
    while not stop.wait(0.5) and thread.is_alive():
        pass
    server.should_exit = True
    thread.join(timeout=10)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise Failure(f"cannot listen on {host}:{port}: {exc.strerror}",
                      "choose another --port (0 picks a free one)") from exc
    listener.listen(128)
    return listener


def _warn_exposed(host: str, token: str | None) -> None:
    click.secho(f"WARNING: the dashboard listens on {host}, not loopback: anyone who can reach "
                "this address can see your queues" + ("" if token else " and requeue or purge "
                "dead jobs, since no --token is set") + ".", err=True, fg="red", bold=True)
    click.secho("WARNING: serve it behind TLS, set --token (or ECHOMQ_DASHBOARD_TOKEN), and "
                "--allow-host the name it is reached by.", err=True, fg="red", bold=True)
