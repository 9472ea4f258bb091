"""step's cases: a step recorded under the current lease, a name recorded already, every way a
lease is not current, the output's cap and a job's, the name's gate, and the order in which they
are checked. The main outcomes state the keyspace they must leave (``STATED``, by case label):
tests/conformance/test_steps.py holds the model to them, so that a rule the model and both
executors got wrong alike still fails."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    E_KEYS,
    E_NUM,
    E_TYPE,
    NOW,
    Case,
    _argv,
    _case,
    key,
    leased,
    row,
)
from echomq.conformance.resp import Arg

NAME = "step"
E_STEP_NAME = b"-EMQLANE step must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -\r\n"
E_OUTPUT = b"-EMQSIZE output must be at most 262144 bytes\r\n"
E_TOTAL = b"-EMQSIZE a job's steps must be at most 1048576 bytes in all\r\n"
OUTPUT_AT_CAP = b"o" * 262_144
OUTPUT_OVER_CAP = b"o" * 262_145
LEASED_ROW = [(b"a", b"1"), (b"f", b"1"), (b"p", b"p"), (b"t", str(NOW - 5).encode())]
ACTIVE = (b"zset", [(b"JOB:1", float(NOW + 30_000))], False)


def _keyspace(*fields: tuple[bytes, bytes]) -> dict[bytes, tuple[object, ...]]:
    """The keyspace of JOB:1 leased (``leased``), its row holding ``fields`` besides its own."""
    return {b"active": ACTIVE, b"job:JOB:1": (b"hash", sorted([*LEASED_ROW, *fields]), False)}


NEAR = str(1_048_576 - 4)  # a job's steps four bytes short of their cap
# The keyspace each main outcome must leave, by case label (the queue's keys by their suffix).
STATED: dict[str, dict[bytes, tuple[object, ...]]] = {
    "recorded": _keyspace((b"step:charge", b"ch_1"), (b"steps", b"4")),
    "second-step-adds-to-the-total": _keyspace((b"step:charge", b"ch_1"),
                                               (b"step:email", b"sent"), (b"steps", b"8")),
    "kept-the-first-output": _keyspace((b"step:charge", b"ch_1"), (b"steps", b"4")),
    "stale-fence-records-nothing": _keyspace(),
    "job-total-at-the-cap": _keyspace((b"step:charge", b"ch_1"), (b"steps", b"1048576")),
    "job-total-over-the-cap-writes-nothing": _keyspace((b"steps", NEAR.encode())),
}


def _call(**changes: Arg) -> list[Arg]:
    return _argv(NAME, **changes)


def step_cases() -> Iterator[Case]:
    yield from outcome_cases()
    yield from cap_cases()
    yield from gate_cases()


def outcome_cases() -> Iterator[Case]:
    """Recorded, kept, stale: what each leaves."""
    recorded = [*leased("JOB:1"), ["HSET", key("job"), "step:charge", "ch_1", "steps", "4"]]
    yield _case(NAME, "recorded", _call(), b"+RECORDED\r\n", leased("JOB:1"))
    yield _case(NAME, "second-step-adds-to-the-total", _call(step="email", output=b"sent"),
                b"+RECORDED\r\n", recorded)
    yield _case(NAME, "kept-the-first-output", _call(output=b"ch_2"), b"+KEPT\r\n", recorded)
    yield _case(NAME, "stale-fence-records-nothing", _call(fence=2), b"+STALE\r\n",
                leased("JOB:1"))
    yield _case(NAME, "kept-when-recorded-empty", _call(), b"+KEPT\r\n",
                [*leased("JOB:1"), ["HSET", key("job"), "step:charge", ""]])
    yield _case(NAME, "a-later-lease-keeps-what-an-earlier-recorded", _call(fence=2, output=b"x"),
                b"+KEPT\r\n",
                [*leased("JOB:1", attempt=2), ["HSET", key("job"), "step:charge", "ch_1"]])
    yield _case(NAME, "tombstone-is-stale", _call(), b"+STALE",
                [row("JOB:1", "a", "1", "f", "1", "step:charge", "ch_1"),
                 ["PEXPIRE", key("job"), "100000"]])
    yield _case(NAME, "dead-is-stale", _call(), b"+STALE",
                [row("JOB:1", "p", "p", "a", "3", "f", "1"), ["ZADD", key("dead"), "1", "JOB:1"]])
    yield _case(NAME, "old-layout-lease", _call(), b"+RECORDED",
                [row("JOB:1", "payload", "p", "attempts", "1", "fence", "1"),
                 ["ZADD", key("active"), str(NOW), "JOB:1"]])
    yield _case(NAME, "binary-output", _call(output=b"\x00\xff\r\n$-1"), b"+RECORDED",
                leased("JOB:1"))
    yield _case(NAME, "empty-output", _call(output=b""), b"+RECORDED", leased("JOB:1"))
    for label, name in (("longest", "s" * 200), ("all-classes", "Az09._:-"), ("one-byte", "x")):
        yield _case(NAME, f"name-{label}", _call(step=name), b"+RECORDED", leased("JOB:1"))


def cap_cases() -> Iterator[Case]:
    """The output's cap, the job's, and a total that is not a number."""
    yield _case(NAME, "output-at-the-cap", _call(output=OUTPUT_AT_CAP), b"+RECORDED",
                leased("JOB:1"))
    yield _case(NAME, "output-over-the-cap", _call(output=OUTPUT_OVER_CAP), E_OUTPUT,
                leased("JOB:1"))
    yield _case(NAME, "output-over-the-cap-when-stale", _call(fence=9, output=OUTPUT_OVER_CAP),
                E_OUTPUT, leased("JOB:1"))
    yield _case(NAME, "job-total-at-the-cap", _call(), b"+RECORDED\r\n",
                [*leased("JOB:1"), ["HSET", key("job"), "steps", NEAR]])
    yield _case(NAME, "job-total-over-the-cap-writes-nothing", _call(output=b"ch_10"), E_TOTAL,
                [*leased("JOB:1"), ["HSET", key("job"), "steps", NEAR]])
    yield _case(NAME, "job-total-over-the-cap-when-stale", _call(fence=3, output=b"ch_10"),
                b"+STALE", [*leased("JOB:1"), ["HSET", key("job"), "steps", NEAR]])
    yield _case(NAME, "job-total-over-the-cap-when-kept", _call(output=b"ch_10"), b"+KEPT",
                [*leased("JOB:1"), ["HSET", key("job"), "steps", NEAR, "step:charge", "x"]])
    for label, total in (("word", "ten"), ("negative", "-5"), ("empty", "")):
        yield _case(NAME, f"job-total-{label}-counts-zero", _call(), b"+RECORDED",
                    [*leased("JOB:1"), ["HSET", key("job"), "steps", total]])


def gate_cases() -> Iterator[Case]:
    """The name's gate, and the order of the checks: id, name, keys, fence, output, types."""
    bad: list[tuple[str, Arg]] = [
        ("empty", ""), ("too-long", "s" * 201), ("slash", "a/b"), ("space", "a b"),
        ("nul", b"a\x00b"), ("high-byte", b"\xff"), ("brace", "{q}")]
    for label, name in bad:
        yield _case(NAME, f"name-{label}", _call(step=name), E_STEP_NAME, leased("JOB:1"))
    yield _case(NAME, "name-before-keys", [2, key("active"), key("job", "JOB:2"), "JOB:1", 1,
                                           "a/b", b"x"], E_STEP_NAME)
    yield _case(NAME, "keys-before-fence", [2, key("active"), key("job", "JOB:2"), "JOB:1", "x",
                                            "charge", b"x"], E_KEYS)
    yield _case(NAME, "fence-before-output", _call(fence="x", output=OUTPUT_OVER_CAP), E_NUM,
                leased("JOB:1"))
    yield _case(NAME, "output-before-types", _call(output=OUTPUT_OVER_CAP), E_OUTPUT,
                [["SET", key("active"), "x"]])
    yield _case(NAME, "types-before-the-lease", _call(), E_TYPE,
                [["SET", key("active"), "x"], row("JOB:1", "f", "1")])
