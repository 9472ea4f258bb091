"""The lockstep machine's rules for the bounds of dead jobs: an operator setting
``<base>deadconf`` (good values, cleared ones and bad ones) and trim_dead run at the machine's
clock — a mixin of ``tests.stateful_world.BeyondTheQueue``, checked as every step is, by both
executors and the model in lockstep."""

from __future__ import annotations

from typing import Any

from hypothesis import event, strategies as st
from hypothesis.stateful import precondition, rule

from echomq.engine.transitions import TRIM_DEAD

BASE = b"emq:{q}:"
DEADCONF = BASE + b"deadconf"
BOUNDS = st.sampled_from([None, b"0", b"1", b"2", b"3", b"1000", b"60000", b"007", b"",
                          b"-1", b"x", b"1.5", b"1" * 16])


class DeadBoundsRules:
    """Rules of ``QueueMachine``: the operator's bounds and housekeeping's trim."""

    model: Any
    live: set[bytes]
    ghosts: set[bytes]
    now: int

    def behind_the_back(self, *command: bytes) -> None:
        raise NotImplementedError

    def zmembers(self, role: bytes) -> list[bytes]:
        raise NotImplementedError

    def execute(self, transition: Any, argv: list[Any]) -> tuple[bytes, Any]:
        raise NotImplementedError

    @rule(field=st.sampled_from([b"max_count", b"max_age_ms"]), value=BOUNDS)
    def set_dead_bound(self, field: bytes, value: bytes | None) -> None:
        """The operator sets a bound (None: clears it, its default applies)."""
        kind = self.model.kind(DEADCONF)
        if value is None and kind == b"hash":
            self.behind_the_back(b"HDEL", DEADCONF, field)
        elif value is not None and kind in (b"none", b"hash"):
            self.behind_the_back(b"HSET", DEADCONF, field, value)

    @precondition(lambda self: self.zmembers(b"dead"))
    @rule(keep=st.sampled_from([b"0", b"1", b"2"]), age=st.sampled_from([b"0", b"1", b"1000"]),
          limit=st.sampled_from([1, 1_000]))
    def trim_dead_over(self, keep: bytes, age: bytes, limit: int) -> None:
        """Dead jobs and bounds the operator just lowered: those over them go, oldest first."""
        self.lower_dead_bounds(keep, age)
        self.trim_dead(limit)

    def lower_dead_bounds(self, keep: bytes, age: bytes) -> None:
        if self.model.kind(DEADCONF) in (b"none", b"hash"):
            self.behind_the_back(b"HSET", DEADCONF, b"max_count", keep, b"max_age_ms", age)

    @rule(limit=st.sampled_from([1, 2, 1_000]))
    def trim_dead(self, limit: int) -> None:
        """Housekeeping's trim: the jobs that leave dead leave with their rows."""
        reply, gone = self.trimmed(limit)
        if gone:
            event("dead jobs trimmed")
        elif reply.startswith(b"-EMQNUM deadconf"):
            event("a bad bound refused")

    def trimmed(self, limit: int) -> tuple[bytes, set[bytes]]:
        """trim_dead at the machine's clock, checked: its reply and the ids it took."""
        return self.trimmed_by([2, BASE + b"dead", DEADCONF, self.now, limit])

    def trimmed_by(self, argv: list[Any]) -> tuple[bytes, set[bytes]]:
        """A trim_dead (``argv``: numkeys 2, dead, deadconf, now, limit), checked: the jobs it
        took left with their rows, and are live no more; its reply and the ids it took."""
        before = set(self.zmembers(b"dead"))
        reply, _ = self.execute(TRIM_DEAD, argv)
        gone = before - set(self.zmembers(b"dead"))
        for job_id in gone:
            assert self.model.kind(BASE + b"job:" + job_id) == b"none", job_id
        self.live -= gone
        self.ghosts -= gone
        return reply, gone
