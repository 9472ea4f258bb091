"""numkeys spelled loosely (" 3", "3 ", "03", "+3", ...) on both executors, under a user whose ACL
allows one queue's keys, and under one allowed to read them only (``%R~``).

The server reads EVALSHA's numkeys twice: strictly in the handler (``-ERR value is not an integer
or out of range``), and when it looks for the keys, for the ACL check and COMMAND GETKEYS: by the
key spec (strictly; its keys flagged RW, access, update), or, when that read refuses it, as
``atoi`` does (evalGetKeys), its keys flagged with nothing. So a loose numkeys naming another
queue's keys is refused NOPERM before the script runs, while one naming keys the user may only
read passes the ACL check (no permission is asked of them) and meets the handler's error; a strict
numkeys on those keys is NOPERM. Under MULTI the ACL refusal comes at queueing (EXECABORT at
EXEC), the handler's error at EXEC. trafikey reads numkeys the same ways and flags the keys the
same: the raw replies match byte for byte, RESP2 and RESP3, and so do COMMAND GETKEYS's and
GETKEYSANDFLAGS's answers."""

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
READER = "reads-one-queue"
E_NOTINT = b"-ERR value is not an integer or out of range\r\n"
E_PERM = b"-NOPERM No permissions to access a key\r\n"
E_EXECABORT = b"-EXECABORT Transaction discarded because of previous errors.\r\n"
MINE, OTHER = queue_base("mine"), queue_base("other")
# Accepted by atoi, refused by the strict read; and a few neither reads as the key count.
LOOSE = [" {n}", "{n} ", "0{n}", "+{n}", "\t{n}", "{n}x", "00{n}"]
ODD = ["-{n}", "0", "{n}{n}{n}", "", "x{n}", "99999999999"]
SAMPLE_ARG = {"id": "JOB:1", "group": "g", "int": "1", "now": "1700000000000", "bytes": "x",
              "result": "r", "progress": "g", "policy": "fail", "mode": "dedupe",
              "step": "charge", "output": "o"}


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
        admin.execute_command("ACL", "SETUSER", READER, "reset", "on", f">{PASSWORD}",
                              "%R~emq:{mine}:*", "+@all")
        for transition in TRANSITIONS:
            admin.script_load(script_for(transition).source)
        admin.close()
        yield made
    finally:
        made.stop()


def connect(server: EmbeddedValkey, name: str, protocol: int) -> RawConnection:
    conn = RawConnection(server.port)
    assert conn.call("AUTH", name, PASSWORD) == b"+OK\r\n"
    if protocol == 3:
        assert not conn.call("HELLO", "3").startswith(b"-")
    return conn


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def user(server: EmbeddedValkey, request: pytest.FixtureRequest) -> Iterator[RawConnection]:
    conn = connect(server, USER, request.param)
    yield conn
    conn.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def reader(server: EmbeddedValkey, request: pytest.FixtureRequest) -> Iterator[RawConnection]:
    conn = connect(server, READER, request.param)
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


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: t.name)
def test_loose_numkeys_on_keys_granted_read_only_is_the_integer_error_on_both(
        reader: RawConnection, transition: Transition) -> None:
    """The keys the atoi read finds carry no flags: a read-only grant lets them through to the
    handler, whose strict read refuses numkeys. A strict numkeys asks for write: NOPERM."""
    for numkeys in spellings(transition, LOOSE):
        assert both(reader, transition, call_args(transition, MINE, numkeys)) == (
            E_NOTINT, E_NOTINT), numkeys
    strict = str(len(transition.keys))
    assert both(reader, transition, call_args(transition, MINE, strict)) == (E_PERM, E_PERM)


def in_multi(conn: RawConnection, command: list[Arg]) -> tuple[bytes, bytes]:
    """``command`` queued in a transaction: the reply to it, then EXEC's."""
    assert conn.call("MULTI") == b"+OK\r\n"
    return conn.call(*command), conn.call("EXEC")


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: t.name)
def test_under_multi_both_queue_a_loose_numkeys_and_abort_on_a_refused_key(
        reader: RawConnection, transition: Transition) -> None:
    """The ACL check runs as a command is queued: a loose numkeys on keys granted read-only is
    queued and fails at EXEC with the handler's error; a strict one is refused NOPERM as it is
    queued, and EXEC discards the transaction. The same on both executors."""
    assert transition.native is not None
    for numkeys, expected in ((f" {len(transition.keys)}", (b"+QUEUED\r\n", b"*1\r\n" + E_NOTINT)),
                              (str(len(transition.keys)), (E_PERM, E_EXECABORT))):
        argv = call_args(transition, MINE, numkeys)
        lua = in_multi(reader, ["EVALSHA", script_for(transition).sha, *argv])
        native = in_multi(reader, [transition.native, *argv])
        assert lua == native == expected, (numkeys, lua, native)


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: t.name)
def test_command_getkeysandflags_flags_the_keys_as_for_evalsha(
        user: RawConnection, transition: Transition) -> None:
    """A strict numkeys: the key spec's flags (RW, access, update); one only atoi reads: none."""
    assert transition.native is not None
    for numkeys in spellings(transition, ["{n}", *LOOSE, *ODD]):
        argv = call_args(transition, MINE, numkeys)
        lua = user.call("COMMAND", "GETKEYSANDFLAGS", "EVALSHA", script_for(transition).sha, *argv)
        native = user.call("COMMAND", "GETKEYSANDFLAGS", transition.native, *argv)
        assert native == lua, (numkeys, native, lua)
    flags = user.call("COMMAND", "GETKEYSANDFLAGS", transition.native,
                      *call_args(transition, MINE, f"+{len(transition.keys)}"))
    empty = b"~0\r\n" if b"~" in flags else b"*0\r\n"  # RESP3 answers the flags as a set
    assert flags.count(empty) == len(transition.keys) and b"RW" not in flags, flags
