"""numkeys spelled loosely (" 3", "3 ", "03", "+3", ...) on both executors, under a user whose ACL
allows one queue's keys.

The server reads EVALSHA's numkeys twice: strictly in the handler (``-ERR value is not an integer
or out of range``), and as ``atoi`` does when it looks for the keys (evalGetKeys), for the ACL check
and COMMAND GETKEYS. So a loose numkeys naming another queue's keys is refused NOPERM before the
script runs. trafikey reads both the same way: the raw replies match byte for byte, RESP2 and RESP3,
and so do COMMAND GETKEYS's answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.conformance.resp import Arg, RawConnection
from echomq.embedded import EmbeddedValkey
from echomq.engine.scripts import script_for
from echomq.engine.transitions import ARGUMENTS, TRANSITIONS, Transition, keys_for, queue_base
from tests.conftest import start_server

PASSWORD = "pw"
USER = "one-queue"
MINE, OTHER = queue_base("mine"), queue_base("other")
# Accepted by atoi, refused by the strict read; and a few neither reads as the key count.
LOOSE = [" {n}", "{n} ", "0{n}", "+{n}", "\t{n}", "{n}x", "00{n}"]
ODD = ["-{n}", "0", "{n}{n}{n}", "", "x{n}", "99999999999"]
SAMPLE_ARG = {"id": "JOB:1", "group": "g", "int": "1", "now": "1700000000000", "bytes": "x",
              "result": "r", "progress": "g", "policy": "fail", "mode": "dedupe"}


def call_args(transition: Transition, base: str, numkeys: str) -> list[Arg]:
    """A well-formed call of ``transition`` on the queue at ``base`` (no items)."""
    args = [SAMPLE_ARG[ARGUMENTS[name].kind] for name in transition.args]
    return [numkeys, *keys_for(base, transition, job_id="JOB:1"), *args]


def spellings(transition: Transition, forms: list[str]) -> list[str]:
    return [form.format(n=len(transition.keys)) for form in forms]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedValkey]:
    made = start_server()
    try:
        admin = made.client()
        admin.execute_command("ACL", "SETUSER", USER, "reset", "on", f">{PASSWORD}",
                              "~emq:{mine}:*", "+@all")
        for transition in TRANSITIONS:
            admin.script_load(script_for(transition).source)
        admin.close()
        yield made
    finally:
        made.stop()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def user(server: EmbeddedValkey, request: pytest.FixtureRequest) -> Iterator[RawConnection]:
    conn = RawConnection(server.port)
    assert conn.call("AUTH", USER, PASSWORD) == b"+OK\r\n"
    if request.param == 3:
        assert not conn.call("HELLO", "3").startswith(b"-")
    yield conn
    conn.close()


def both(conn: RawConnection, transition: Transition, argv: list[Arg]) -> tuple[bytes, bytes]:
    assert transition.native is not None
    lua = conn.call("EVALSHA", script_for(transition).sha, *argv)
    native = conn.call(transition.native, *argv)
    return lua, native


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: t.name)
def test_loose_numkeys_on_a_queue_not_allowed_is_noperm_on_both(
        user: RawConnection, transition: Transition) -> None:
    for numkeys in spellings(transition, LOOSE):
        lua, native = both(user, transition, call_args(transition, OTHER, numkeys))
        assert lua.startswith(b"-NOPERM"), (numkeys, lua)
        assert native == lua, (numkeys, native, lua)


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: t.name)
def test_loose_numkeys_on_the_allowed_queue_is_the_servers_integer_error_on_both(
        user: RawConnection, transition: Transition) -> None:
    for numkeys in spellings(transition, LOOSE):
        lua, native = both(user, transition, call_args(transition, MINE, numkeys))
        assert lua.startswith(b"-ERR "), (numkeys, lua)
        assert native == lua, (numkeys, native, lua)


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: t.name)
def test_odd_numkeys_is_the_same_on_both(
        user: RawConnection, transition: Transition) -> None:
    for numkeys in spellings(transition, ODD):
        for base in (MINE, OTHER):
            lua, native = both(user, transition, call_args(transition, base, numkeys))
            assert native == lua, (numkeys, base, native, lua)


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: t.name)
def test_command_getkeys_reads_numkeys_as_for_evalsha(
        user: RawConnection, transition: Transition) -> None:
    assert transition.native is not None
    for numkeys in spellings(transition, ["{n}", *LOOSE, *ODD]):
        argv = call_args(transition, MINE, numkeys)
        lua = user.call("COMMAND", "GETKEYS", "EVALSHA", script_for(transition).sha, *argv)
        native = user.call("COMMAND", "GETKEYS", transition.native, *argv)
        assert native == lua, (numkeys, native, lua)
