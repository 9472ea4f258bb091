"""``Wire`` names the executors: ``Wire.SCRIPTS`` is 5 and ``Wire.NATIVE`` is 6, so the numbers
still work wherever ``wire=`` is taken, and ``Wire.AUTO`` (the default) is named "auto"; the
command line's ``--wire`` takes the number or the name."""

from __future__ import annotations

import pytest
import redis
from click.testing import CliRunner

from echomq import Queue, Verdict, Wire
from echomq.aio import Queue as AsyncQueue
from echomq.cli.main import main
from echomq.consumer.presence import Announcer
from echomq.consumer.roster import live_workers
from echomq.embedded import EmbeddedValkey
from echomq.engine.executors import executor_for
from echomq.engine.wire import wire_of


def test_the_members_are_the_numbers_and_either_picks_the_executor(conn: redis.Redis) -> None:
    assert (Wire.SCRIPTS, Wire.NATIVE) == (5, 6)
    assert executor_for(5) is executor_for(Wire.SCRIPTS)
    assert executor_for(6) is executor_for(Wire.NATIVE)
    assert Queue(conn, "q").wire is Wire.AUTO
    assert Queue(conn, "q", wire=5).wire is Wire.SCRIPTS
    assert executor_for("auto") is not executor_for(Wire.AUTO)  # each queue learns on its own
    assert Queue(conn, "q", wire=6).wire is Wire.NATIVE
    assert AsyncQueue(conn, "q", wire=Wire.NATIVE).wire is Wire.NATIVE
    with pytest.raises(ValueError, match=r"wire must be 5 \(scripts\), 6 \(native\) or 'auto'"):
        executor_for(7)


@pytest.mark.parametrize(("given", "wire"), [(5, Wire.SCRIPTS), ("6", Wire.NATIVE),
                                             ("scripts", Wire.SCRIPTS), ("Native", Wire.NATIVE),
                                             (Wire.NATIVE, Wire.NATIVE), ("auto", Wire.AUTO),
                                             (" Auto ", Wire.AUTO), (Wire.AUTO, Wire.AUTO)])
def test_a_wire_is_named_by_its_number_or_its_name(given: int | str, wire: Wire) -> None:
    assert wire_of(given) is wire


@pytest.mark.parametrize("given", [4, "7", "lua", "", "5.0"])
def test_anything_else_is_no_wire(given: int | str) -> None:
    with pytest.raises(ValueError, match=r"wire must be 5 \(scripts\), 6 \(native\) or 'auto'"):
        wire_of(given)


@pytest.mark.parametrize("name", ["native", "6", "auto"])
def test_the_command_line_takes_the_name_or_the_number(valkey: EmbeddedValkey, conn: redis.Redis,
                                                       name: str) -> None:
    result = CliRunner().invoke(main, ["enqueue", "mail", "x", "--id", "JOB:1", "--wire", name],
                                env={"ECHOMQ_URL": valkey.url}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert Queue(conn, "mail").enqueue("JOB:1", b"x") is Verdict.DUPLICATE


def test_the_live_worker_record_keeps_the_number_or_auto(conn: redis.Redis) -> None:
    announcer = Announcer(conn, "q", Wire.NATIVE)
    announcer._refresh()
    assert conn.hget(announcer.key, "wire") == b"6"
    auto = Announcer(conn, "q", "auto")
    auto._refresh()
    assert conn.hget(auto.key, "wire") == b"auto"
    assert sorted(str(worker.wire) for worker in live_workers(conn)) == ["6", "auto"]
