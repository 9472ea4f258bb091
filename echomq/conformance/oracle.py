"""The oracle of the case table: what a case's call must reply and the keyspace it must leave,
known without asking either executor, so a bug made the same way in both still fails the table.

Every case has one of two oracles. Most run on the model (``echomq.conformance.model``, a third
executor in plain Python): its setup applied, the same argument list under the pair's protocol;
the executors' reply must be the model's byte for byte and their keyspace (normalised, expiries
included) the model's rendering. A case the model cannot run states the keyspace it must leave
(``Case.keyspace``, in the shape ``normalise`` gives, each key named by its suffix after the
queue's base, so a case moved to another base keeps its oracle) — the cases on the server's
clock (``now`` ``*``), whose effects depend on a time only the server reads; their reply is the
table's own ``expect``. ``oracle_of`` names a case's oracle, and refuses a case that has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from echomq.conformance.harness import Snapshot
from echomq.conformance.model import Model, normalise, raw
from echomq.conformance.resp import Arg
from echomq.engine.transitions import Transition

Keyspace = dict[bytes, tuple[Any, ...]]
MODEL = "model"
EXPLICIT = "explicit keyspace"
LIMIT = 5


class Oracled(Protocol):
    """What the oracle reads of a case."""

    @property
    def id(self) -> str: ...  # pragma: no cover

    transition: Transition
    argv: list[Arg]
    setup: list[Sequence[Arg]]
    keyspace: Keyspace | None


class NoOracle(AssertionError):
    """A case neither the model runs nor the table gives a keyspace for."""


def on_server_clock(case: Oracled) -> bool:
    """The case's ``now`` is ``*``: the server's clock, unknown to the model."""
    t = case.transition
    if "now" not in t.args:
        return False
    at = 1 + len(t.keys) + t.args.index("now")
    return len(case.argv) > at and raw(case.argv[at]) == b"*"


def oracle_of(case: Oracled) -> str:
    """Which oracle judges ``case``: the model, or the keyspace the case states."""
    if case.keyspace is not None:
        return EXPLICIT
    if on_server_clock(case):
        raise NoOracle(f"{case.id}: on the server's clock, and no keyspace stated")
    return MODEL


def expected(case: Oracled, protocol: int) -> tuple[bytes | None, Keyspace]:
    """The reply (None: the table's ``expect`` is the oracle) and keyspace ``case`` must give."""
    if oracle_of(case) == EXPLICIT:
        assert case.keyspace is not None
        base = base_of(case)
        return None, {base + suffix: value for suffix, value in case.keyspace.items()}
    model = Model(protocol)
    for command in case.setup:
        model.apply_setup(command)
    reply = model.call(case.transition, case.argv)
    return reply, model.render()


def base_of(case: Oracled) -> bytes:
    """The queue's base of the case's first key (``<base>job:<id>`` or ``<base><role>``)."""
    first, role = raw(case.argv[1]), case.transition.keys[0]
    return first[:first.rindex(b"job:")] if role == "job" else first[:-len(role)]


def oracle_differences(case: Oracled, protocol: int, reply: bytes, after: Snapshot) -> list[str]:
    """How an executor's ``reply`` and keyspace ``after`` differ from what the oracle says."""
    want, keyspace = expected(case, protocol)
    found = []
    if want is not None and reply != want:
        found.append(f"reply {reply[:80]!r} is not the model's {want[:80]!r}")
    got = normalise(after)
    lines = []
    for key in sorted(set(got) | set(keyspace)):
        if got.get(key) != keyspace.get(key):
            lines.append(f"key {key!r}: executors {_short(got.get(key))}, "
                         f"{oracle_of(case)} {_short(keyspace.get(key))}")
    found += lines[:LIMIT] + ([f"... and {len(lines) - LIMIT} more keys"]
                              if len(lines) > LIMIT else [])
    return found


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
