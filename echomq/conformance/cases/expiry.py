"""Cases of expiry (docs/PROTOCOL.md, "Expiry"): the optional expires_at of enqueue and
enqueue_delayed (kept in the row when above 0, every bad word refused with nothing written), and
the claims that meet it — claim and settle's claim part end a job whose deadline their now
reaches, dead with the error ``expired`` and its end hook, then go on to the next job, at most
100 a call; every derived key they check refuses before anything is written."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    BASE,
    E_ARITY,
    E_TYPE,
    NOW,
    NULL,
    Case,
    Command,
    _argv,
    _case,
    held,
    job,
    key,
    leased,
    replied,
    row,
    settle,
    waiting,
)
from echomq.conformance.resp import Arg
from echomq.engine.transitions import EXPIRED_MAX

E_EXPIRES = b"-EMQNUM expires_at must be an integer from 0 to 999999999999999\r\n"
E_PRIORITY = b"-EMQNUM priority "
# A ghost ahead of every job: its id in pending, no row.
GHOST: Command = ["ZADD", key("pending"), str(NOW - 20), "JOB:0"]
BAD_DEADLINES: list[tuple[str, Arg]] = [
    ("negative", "-1"), ("word", "abc"), ("decimal-point", "1.5"), ("empty", ""),
    ("too-long", "1" * 16), ("plus", "+5"),
]


def expiring(job_id: str, deadline: Arg, at: int = NOW - 10, **fields: Arg) -> list[Command]:
    """A flat job waiting in pending since ``at``, its row's expires_at ``deadline``."""
    extra: list[Arg] = [item for pair in fields.items() for item in pair]
    return [row(job_id, "p", b"p", "t", str(at), "expires_at", deadline, *extra),
            ["ZADD", key("pending"), str(at), job_id]]


def with_deadline(name: str, deadline: Arg, priority: Arg = "0", **changes: Arg) -> list[Arg]:
    return [*_argv(name, **changes), priority, deadline]


def expiry_cases() -> Iterator[Case]:
    yield from admission_cases("enqueue")
    yield from admission_cases("enqueue_delayed")
    yield from claim_cases()
    yield from hook_cases()
    yield from refusal_cases()
    yield from settle_cases()


def admission_cases(name: str) -> Iterator[Case]:
    """The argument on its own: a deadline above 0 is kept in the row, 0 writes none; a bad word
    is refused after the priority's own check and before the keys' types."""
    yield _case(name, "expires-at-kept", with_deadline(name, str(NOW + 60_000)), b"+ENQUEUED")
    yield _case(name, "expires-at-zero", with_deadline(name, "0"), b"+ENQUEUED")
    yield _case(name, "expires-at-past", with_deadline(name, "1"), b"+ENQUEUED")
    yield _case(name, "expires-at-with-priority", with_deadline(name, str(NOW + 5), "7"),
                b"+ENQUEUED")
    yield _case(name, "expires-at-duplicate", with_deadline(name, str(NOW + 5)), b"+DUPLICATE",
                waiting("JOB:1"))
    for label, deadline in BAD_DEADLINES:
        yield _case(name, f"expires-at-bad-{label}", with_deadline(name, deadline), E_EXPIRES)
    yield _case(name, "expires-at-after-bad-priority", with_deadline(name, "abc", "abc"),
                E_PRIORITY)
    yield _case(name, "expires-at-bad-before-wrong-type", with_deadline(name, "abc"), E_EXPIRES,
                [["SET", key("wake"), "x"]])
    yield _case(name, "expires-at-one-extra-arg", [*with_deadline(name, "5"), "5"], E_ARITY)


def claim_cases() -> Iterator[Case]:
    """A claim meets deadlines at or before its now only: the expired job goes dead, the next
    live one is leased; only expired jobs (or more than the bound of them): null."""
    yield _case("claim", "expired-then-live", _argv("claim"), job("JOB:2", 1, 1),
                expiring("JOB:1", str(NOW - 1)) + waiting("JOB:2"))
    yield _case("claim", "expired-at-now", _argv("claim"), job("JOB:2", 1, 1),
                expiring("JOB:1", str(NOW)) + waiting("JOB:2"))
    yield _case("claim", "deadline-after-now-leased", _argv("claim"), job("JOB:1", 1, 1),
                expiring("JOB:1", str(NOW + 1)) + waiting("JOB:2"))
    for label, deadline in [("zero", "0"), ("word", "abc"), ("negative", "-5")]:
        yield _case("claim", f"deadline-{label}-is-none", _argv("claim"), job("JOB:1", 1, 1),
                    expiring("JOB:1", deadline))
    yield _case("claim", "only-expired", _argv("claim"), NULL,
                expiring("JOB:1", str(NOW - 1)) + expiring("JOB:2", "1", at=NOW - 5))
    yield _case("claim", "expired-retried-job", _argv("claim"), NULL,
                expiring("JOB:1", str(NOW - 1), a="2", f="2", error=b"boom"))
    yield _case("claim", "expired-counts-on", _argv("claim"), NULL,
                [*expiring("JOB:1", "1"), ["HSET", key("counts"), "expired", "7"]])
    yield _case("claim", "expired-counts-not-a-number", _argv("claim"), NULL,
                [*expiring("JOB:1", "1"), ["HSET", key("counts"), "expired", "x"]])
    yield _case("claim", "expired-ghost-and-live", _argv("claim"), job("JOB:3", 1, 1),
                [GHOST, *expiring("JOB:1", "1"), *waiting("JOB:3")])
    many: list[Command] = []
    for n in range(EXPIRED_MAX + 1):
        many += expiring(f"JOB:{n:04d}", "1", at=NOW - 500 + n)
    yield _case("claim", "expired-bound", _argv("claim"), NULL, many + waiting("JOB:9999"))
    yield _case("claim", "expired-bound-wake-wrong-type", _argv("claim"), E_TYPE,
                [*many, ["SET", key("wake"), "x"]])
    yield _case("claim", "expired-under-the-bound", _argv("claim"), job("JOB:9999", 1, 1),
                many[4:] + waiting("JOB:9999"))  # 99 past their deadline
    yield _case("settle", "expired-bound", settle(count=3), replied([], []), many)


def hook_cases() -> Iterator[Case]:
    """An expired job's end hook, as a dead job's: its dependents by their policy, its dedupe
    key released."""
    for policy, label in [(None, "fail"), ("continue", "continue"), ("ignore", "ignore")]:
        yield _case("claim", f"expired-parent-{label}", _argv("claim"), NULL,
                    expiring("JOB:1", "1", next="JOB:2") + held("JOB:2", hold=False,
                                                                  policy=policy))
    yield _case("claim", "expired-dedupe-released", _argv("claim"), NULL,
                [*expiring("JOB:1", "1", dedupe="dedupe:k1"), ["SET", key("dedupe"), "JOB:1"]])


def refusal_cases() -> Iterator[Case]:
    """A derived key of the wrong type refuses the claim before anything is written: the dead
    set, the job's ended key, the counts, a dependent's row."""
    for label, setup in [("dead", ["SET", key("dead"), "x"]),
                         ("ended", ["SET", f"{BASE}ended:JOB:1", "x"]),
                         ("counts", ["SET", key("counts"), "x"]),
                         ("dependent-row", ["SET", key("job", "JOB:5"), "x"])]:
        yield _case("claim", f"expired-wrong-type-{label}", _argv("claim"), E_TYPE,
                    [GHOST, *expiring("JOB:1", "1", next="JOB:5"), *waiting("JOB:2"), setup])


def settle_cases() -> Iterator[Case]:
    """settle's claim part meets deadlines as claim does, after its items."""
    yield _case("settle", "expired-in-claim-walk", settle("ack", "JOB:1", 1, count=2),
                replied([b"ACKED"], [job("JOB:3", 1, 1), job("JOB:5", 1, 2)]),
                leased("JOB:1") + waiting("JOB:3", NOW - 5) + expiring("JOB:2", str(NOW - 1))
                + expiring("JOB:4", str(NOW), at=NOW - 4) + waiting("JOB:5", NOW - 3))
    yield _case("settle", "expired-wrong-type-counts", settle("ack", "JOB:1", 1, count=1),
                E_TYPE, leased("JOB:1") + expiring("JOB:2", "1") + [["SET", key("counts"), "x"]])
    yield _case("settle", "expired-no-items", settle(count=1), replied([], [job("JOB:3", 1, 1)]),
                expiring("JOB:2", "1") + waiting("JOB:3"))
