"""The pytest plugin ``echomq.testing``: installing echomq gives a project's tests these fixtures
(registered through the ``pytest11`` entry point; echomq itself never imports this package).

- ``echomq_server`` (one a pytest run): a private valkey-server on a free loopback port,
  trafikey loaded when it is built; the tests skip, saying why, when no valkey-server can be found.
- ``echomq_conn``: a client of it, the server flushed before each test.
- ``echomq_clock``: the test's ``Clock``, started at the server's time; every transition sent
  without a ``now`` of its own reads it during the test, so ``echomq_clock.advance(60)`` makes a
  job delayed by a minute, a retry's back-off or a cron tick due without a wait.
- ``echomq_app``: the App under test, bound to ``echomq_conn`` for the test: the one the ini
  option ``echomq_app`` names (``module:attribute``, as ``echomq worker`` takes it), else a new
  ``App(echomq_conn)``.
- ``echomq_worker``: a ``Worker`` of ``echomq_app`` on the test's clock:
  ``echomq_worker.run_until_idle()`` runs what the test enqueued, here, until nothing is left to
  run now, and returns the attempts (``Ran``), raising ``DeadJobs`` when any ended dead.

The names below load on first use, so a pytest run that uses none of them imports no more of
echomq than this page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from echomq._lazy import lazy_face

if TYPE_CHECKING:
    from echomq.embedded import EmbeddedValkey
    from echomq.tasks.app import App
    from echomq.testing.binding import bound
    from echomq.testing.clock import Clock
    from echomq.testing.worker import DeadJobs, Ran, Worker

__all__ = ["Clock", "DeadJobs", "Ran", "Worker", "bound"]

# Only __getattr__: pytest reads every name dir() gives when it registers the plugin.
__getattr__ = lazy_face(__name__, {
    "bound": "echomq.testing.binding",
    "Clock": "echomq.testing.clock",
    "DeadJobs": "echomq.testing.worker",
    "Ran": "echomq.testing.worker",
    "Worker": "echomq.testing.worker",
}, __all__)[0]

APP_OPTION = "echomq_app"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(APP_OPTION, "the App the echomq_app fixture binds to the test's server "
                  "(module:attribute, as `echomq worker` takes it)", default="")


def started_server() -> EmbeddedValkey:
    """A valkey-server of the tests' own, with trafikey when it is built."""
    from echomq.embedded import EmbeddedValkey, find_valkey_server, start_on_a_free_port
    from echomq.engine.native import module_path

    try:
        module: bool = bool(module_path())
    except FileNotFoundError:
        module = False  # the scripts serve every transition
    try:
        server = find_valkey_server()
        return start_on_a_free_port(lambda port: EmbeddedValkey(server=server, module=module,
                                                                port=port))
    except FileNotFoundError as exc:  # none found, or ECHOMQ_VALKEY_SERVER names no file
        pytest.skip(f"echomq.testing needs a valkey-server: {exc}")


@pytest.fixture(scope="session")
def echomq_server() -> Iterator[EmbeddedValkey]:
    """A private valkey-server for the whole pytest run (trafikey loaded when built)."""
    server = started_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def echomq_conn(echomq_server: EmbeddedValkey) -> Iterator[Any]:
    """A client of the run's server, flushed before the test."""
    conn = echomq_server.client()
    conn.flushall()
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def echomq_clock(echomq_conn: Any) -> Iterator[Clock]:
    """The test's clock, from the server's now; read by every transition without a ``now``."""
    from echomq.engine.server_time import server_ms
    from echomq.testing.clock import Clock

    with Clock(server_ms(echomq_conn)) as clock:
        yield clock


@pytest.fixture
def echomq_app(request: pytest.FixtureRequest, echomq_conn: Any,
               echomq_clock: Clock) -> Iterator[App]:
    """The ini option's App bound to the test's server for the test, else a new App on it."""
    from echomq.tasks.app import App
    from echomq.testing.binding import bound
    from echomq.worker.spec import load_object

    target = str(request.config.getini(APP_OPTION))
    if not target:
        yield App(echomq_conn)
        return
    app = load_object(target)
    if not isinstance(app, App):
        raise pytest.UsageError(f"{APP_OPTION} = {target} names no echomq App")
    with bound(app, echomq_conn):
        yield app


@pytest.fixture
def echomq_worker(echomq_app: App, echomq_clock: Clock) -> Worker:
    """Runs the App's jobs in the test's process, on the test's clock."""
    from echomq.testing.worker import Worker

    return Worker(echomq_app, echomq_clock)
