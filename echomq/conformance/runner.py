"""``echomq conformance``: the case table and a seeded random sequence on any server with trafikey.

Everything runs in scratch keys under a prefix unique to the run (``{emqconf-<token>-…}``): the
runner checks the prefix is empty before it starts and before every case, never flushes, never
reads or writes another key, and deletes its scratch keys when it ends — done, failed, Ctrl-C or
SIGTERM. Exit status: 0 when both executors agreed everywhere and every case replied as its table
expects, 1 on any difference, 2 when the check could not run (no connection, no trafikey), 130
after Ctrl-C and 143 after SIGTERM.
"""

from __future__ import annotations

import json
import random
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import FrameType

from echomq.conformance.cases import all_cases, case_differences
from echomq.conformance.harness import Pair, Scratch, ScratchNotEmpty, scan
from echomq.conformance.resp import Address, RawConnection, parse
from echomq.conformance.walk import Walk
from echomq.engine.errors import TrafikeyMissing
from echomq.engine.transitions import TRANSITIONS

PROTOCOLS = (2, 3)
NAME = "echomq conformance"
Say = Callable[[str], None]


class Stopped(Exception):
    """SIGTERM or Ctrl-C arrived: the run stops, its scratch keys are removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.status = 128 + signum


class StopRequests:
    """The signals that stop a run, taken as requests: the handler only records the signal, and
    the run stops between two calls (``check``), never inside one. An exception raised by the
    handler itself would surface wherever the interpreter happened to be, a C extension's reply
    parsing included."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def record(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise Stopped(self.signum)


@dataclass
class Difference:
    where: str
    protocol: int
    transition: str
    details: list[str]


@dataclass
class Report:
    server: str
    scratch: str
    seed: int
    random_steps: int
    cases: dict[str, int] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences


def run(url: str, seed: int | None = None, random_steps: int = 500, as_json: bool = False,
        say: Say = print) -> int:
    """Runs the check against the server at ``url`` and prints the report; the exit status."""
    try:
        address = Address.from_url(url)
    except ValueError as exc:
        return _fail(str(exc), "give --url as redis://[user:password@]host:port[/db]")
    scratch = Scratch()
    chosen = random.SystemRandom().randrange(2**31) if seed is None else seed
    report = Report("", scratch.token, chosen, random_steps)
    try:
        with _stopped_between_calls() as stop:
            report.server = _check_server(address, scratch)
            with _scratch_removed(address, scratch):
                for protocol in PROTOCOLS:
                    _run_protocol(address, scratch, protocol, report, stop.check)
    except (KeyboardInterrupt, Stopped) as exc:
        print(f"{NAME}: interrupted; its scratch keys were removed", file=sys.stderr)
        return exc.status if isinstance(exc, Stopped) else 130
    except TrafikeyMissing as exc:
        return _fail(f"the server does not know {exc.command}: trafikey is not loaded there",
                     "start valkey-server with --loadmodule <path of trafikey.so>, which "
                     "echomq.engine.native.module_path() gives")
    except (OSError, RuntimeError) as exc:
        return _fail(_describe(exc, address), _hint(exc))
    say(json.dumps(_jsonable(report)) if as_json else "\n".join(_lines(report)))
    return 0 if report.identical else 1


def _fail(message: str, hint: str) -> int:
    print(f"{NAME}: error: {message} (hint: {hint})", file=sys.stderr)
    return 2


def _hint(exc: Exception) -> str:
    if isinstance(exc, ScratchNotEmpty):
        return "something else writes under the run's prefix; run it again"
    if isinstance(exc, RuntimeError):
        return ("the user needs the EMQ.* commands, EVALSHA, SCRIPT LOAD, SCAN and DEL, and the "
                "keys ~{emqconf-*")
    return "check --url, and that valkey-server runs there"


def _describe(exc: Exception, address: Address) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return f"cannot connect to {address.host}:{address.port}: connection refused"
    return f"{address.host}:{address.port}: {exc}"


@contextmanager
def _stopped_between_calls() -> Iterator[StopRequests]:
    """SIGTERM, and SIGINT unless it is ignored (a command in a shell's background), recorded
    as stop requests for the time of the run."""
    stop = StopRequests()
    taken = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        taken.append(signal.SIGINT)
    previous = {signum: signal.signal(signum, stop.record) for signum in taken}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def _scratch_removed(address: Address, scratch: Scratch) -> Iterator[None]:
    """Deletes the run's scratch keys on the way out, whatever ended the run, on a connection of
    its own (an interrupted one may be mid-reply)."""
    try:
        yield
    finally:
        try:
            with RawConnection.to(address) as conn:
                scratch.clear(conn)
        except OSError:
            print(f"{NAME}: could not remove the scratch keys "
                  f"{scratch.pattern.decode()} (the server went away)", file=sys.stderr)


def _check_server(address: Address, scratch: Scratch) -> str:
    """The server's name and version; raises when trafikey is missing or the scratch prefix
    already holds keys."""
    with RawConnection.to(address) as conn:
        for transition in TRANSITIONS:
            if transition.native and conn.call(transition.native).startswith(
                    b"-ERR unknown command"):
                raise TrafikeyMissing(transition.native)
        if scan(conn, scratch.pattern):
            raise ScratchNotEmpty(f"keys exist under {scratch.pattern!r}; nothing was touched")
        info = parse(conn.call("INFO", "server"))
    version = ""
    if isinstance(info, bytes):
        fields = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
        version = fields.get("valkey_version") or fields.get("redis_version") or ""
    where = f"{address.host}:{address.port} db {address.db}"
    return f"{where} (valkey {version})" if version else where


def _run_protocol(address: Address, scratch: Scratch, protocol: int, report: Report,
                  between_calls: Callable[[], None]) -> None:
    pair = Pair(address, protocol, scratch)
    try:
        for case in all_cases():
            between_calls()
            name = case.transition.name
            report.cases[name] = report.cases.get(name, 0) + 1
            found = case_differences(pair, case)
            if found:
                report.differences.append(Difference(case.id, protocol, name, found))
        walked = Walk(pair, report.seed).run(report.random_steps, between_calls)
        for name, count in walked.steps.items():
            report.steps[name] = report.steps.get(name, 0) + count
        if walked.differences:
            report.differences.append(Difference(
                f"random sequence (seed {report.seed})", protocol, "", walked.differences))
        pair.reset()
    finally:
        pair.close()


def _lines(report: Report) -> Iterator[str]:
    yield f"{NAME}: {report.server}, scratch keys {{{report.scratch}-*}}"
    yield (f"random sequence: seed {report.seed}, {report.random_steps} steps; "
           "every run on RESP2 and RESP3")
    yield f"{'transition':<14}{'cases':>7}{'steps':>7}{'differences':>13}"
    for transition in TRANSITIONS:
        name = transition.name
        if name in report.cases or name in report.steps:
            differing = sum(1 for d in report.differences if d.transition == name)
            yield (f"{name:<14}{report.cases.get(name, 0):>7}{report.steps.get(name, 0):>7}"
                   f"{differing:>13}")
    for difference in report.differences:
        yield f"DIFFERENT {difference.where} (RESP{difference.protocol})"
        yield from (f"    {line}" for line in difference.details)
    runs, steps = sum(report.cases.values()), sum(report.steps.values())
    if report.identical:
        yield f"identical: {runs} case runs and {steps} random steps, both executors agree"
    else:
        yield f"{len(report.differences)} differences in {runs} case runs and {steps} steps"


def _jsonable(report: Report) -> dict[str, object]:
    out = asdict(report)
    out["identical"] = report.identical
    return out
