"""Dependencies and the join: enqueue_after (every policy, a duplicate, bad policies), after (each
parent's state, each policy, the seal, a job not waiting or sealed) and the end hook of every
transition that ends a job (ack, ack with a result, retry, settle, recover, cancel): dependents
counted down and released, failures and cancels propagated along chains, dedupe keys released,
and a derived key of the wrong type refusing the call before anything is written."""

from __future__ import annotations

from collections.abc import Iterator

from echomq.conformance.cases.common import (
    BASE,
    E_NUM,
    E_TYPE,
    NOW,
    Case,
    Command,
    _case,
    dead,
    held,
    key,
    leased,
    replied,
    row,
    settle,
    waiting,
)
from echomq.conformance.resp import Arg

E_POLICY = b"-EMQPOLICY policy must be fail, ignore or continue\r\n"
# A waiting job's `waits` that is not a count (absent counts 0): refused before anything is
# written, where the script's HINCRBY raised half-way and the native counted it as 0.
E_WAITS = b"-EMQNUM waits must be an integer from 0 to 999999999999999\r\n"
NOT_COUNTS = {"word": "x", "negative": "-1", "leading-zero": "007", "empty": "", "decimal": "1.5",
              "sixteen-digits": "1" + "0" * 15, "space": " 1"}


def enqueue_after(policy: Arg = "fail", *more: Arg, job_id: str = "JOB:1") -> list[Arg]:
    return [2, key("waiting"), key("job", job_id), job_id, b"payload", NOW, policy, *more]


def after(seal: int, *parents: str, job_id: str = "JOB:1") -> list[Arg]:
    keys = [key("waiting"), key("pending"), key("dead"), key("job", job_id), key("wake")]
    return [5, *keys, job_id, NOW, seal, *parents]


def parent_of(job_id: str, *children: str, attempt: int = 1) -> list[Command]:
    """A job leased at ``attempt`` whose row names ``children`` in its ``next``."""
    return [*leased(job_id, attempt), ["HSET", key("job", job_id), "next", " ".join(children)]]


def tombstone(job_id: str, *fields: Arg) -> list[Command]:
    """An acked job's row: no payload."""
    return [row(job_id, "a", "1", "f", "1", *fields)]


def cancelled(job_id: str, retention: int = 60_000) -> list[Command]:
    return tombstone(job_id, "cancel", str(retention), "cancelled", str(NOW - 7))


def enqueue_after_cases() -> Iterator[Case]:
    for policy in ("fail", "ignore", "continue"):
        yield _case("enqueue_after", f"policy-{policy}", enqueue_after(policy), b"+WAITING")
    yield _case("enqueue_after", "priority", enqueue_after("ignore", "5"), b"+WAITING")
    yield _case("enqueue_after", "duplicate", enqueue_after(), b"+DUPLICATE", waiting("JOB:1"))
    yield _case("enqueue_after", "duplicate-tombstone", enqueue_after(), b"+DUPLICATE",
                tombstone("JOB:1"))
    for label, word in (("upper", "FAIL"), ("empty", ""), ("plural", "fails"),
                        ("space", "ignore "), ("number", "0"), ("nul", b"fail\x00")):
        yield _case("enqueue_after", f"policy-{label}", enqueue_after(word), E_POLICY)
    bad_now = enqueue_after("nope")
    bad_now[5] = "x"
    yield _case("enqueue_after", "policy-after-now", bad_now, E_NUM + b"now")
    yield _case("enqueue_after", "policy-before-priority", enqueue_after("nope", "ten"), E_POLICY)


def after_cases() -> Iterator[Case]:
    open_job = held("JOB:1")
    yield _case("after", "open-no-parents", after(0), b"+WAITING", open_job)
    yield _case("after", "seal-no-parents", after(1), b"+READY", open_job)
    yield _case("after", "seal-priority", after(1), b"+READY", held("JOB:1", priority=7))
    yield _case("after", "not-waiting", after(1, "JOB:2"), b"+NOTWAITING", waiting("JOB:1"))
    yield _case("after", "absent", after(1, "JOB:2"), b"+NOTWAITING")
    yield _case("after", "sealed", after(1, "JOB:2"), b"+SEALED", held("JOB:1", hold=False))
    yield _case("after", "live-parent", after(1, "JOB:2"), b"+WAITING",
                open_job + waiting("JOB:2"))
    yield _case("after", "live-parent-open", after(0, "JOB:2", "JOB:3"), b"+WAITING",
                open_job + waiting("JOB:2") + leased("JOB:3"))
    yield _case("after", "live-parent-twice", after(1, "JOB:2", "JOB:2"), b"+WAITING",
                open_job + waiting("JOB:2"))
    yield _case("after", "live-parent-linked", after(1, "JOB:2"), b"+READY",
                held("JOB:1", waits=1) + parent_of("JOB:2", "JOB:9", "JOB:1"))
    yield _case("after", "live-parent-appended", after(1, "JOB:2"), b"+WAITING",
                open_job + parent_of("JOB:2", "JOB:9"))
    yield _case("after", "self-parent", after(1, "JOB:1"), b"+READY", open_job)
    yield _case("after", "done-parents", after(1, "JOB:2", "JOB:3"), b"+READY",
                open_job + tombstone("JOB:2"))
    yield _case("after", "dead-fail", after(1, "JOB:2", "JOB:3"), b"+DEAD",
                open_job + dead("JOB:2", NOW - 3) + waiting("JOB:3"))
    yield _case("after", "live-then-dead", after(0, "JOB:3", "JOB:2"), b"+DEAD",
                open_job + dead("JOB:2", NOW - 3) + waiting("JOB:3"))
    yield _case("after", "dead-ignore", after(1, "JOB:2"), b"+READY",
                held("JOB:1", policy="ignore") + dead("JOB:2", NOW - 3))
    yield _case("after", "dead-ignore-open", after(0, "JOB:2"), b"+WAITING",
                held("JOB:1", policy="ignore") + dead("JOB:2", NOW - 3))
    yield _case("after", "dead-continue-open", after(0, "JOB:2", "JOB:3"), b"+READY",
                held("JOB:1", policy="continue") + dead("JOB:2", NOW - 3) + waiting("JOB:3"))
    yield _case("after", "cancelled-parent", after(1, "JOB:2"), b"+CANCELLED",
                open_job + cancelled("JOB:2"))
    yield _case("after", "cancelled-parent-no-retention", after(1, "JOB:2"), b"+CANCELLED",
                open_job + cancelled("JOB:2", 0))
    # The job's own dependents end with it.
    chain = [*open_job, ["HSET", key("job", "JOB:1"), "next", "JOB:5 JOB:6"],
             *held("JOB:5", hold=False), *held("JOB:6", hold=False, policy="ignore", waits=2),
             *dead("JOB:2", NOW - 3)]
    yield _case("after", "dead-chain", after(1, "JOB:2"), b"+DEAD", chain)
    yield _case("after", "cancelled-chain", after(1, "JOB:2"), b"+CANCELLED",
                [*chain[:-3], *cancelled("JOB:2")])
    yield _case("after", "parent-wrongtype", after(1, "JOB:3", "JOB:2"), E_TYPE,
                open_job + waiting("JOB:3") + [["SET", key("job", "JOB:2"), "x"]])
    yield _case("after", "dependent-wrongtype", after(1, "JOB:2"), E_TYPE,
                [*chain, ["DEL", key("job", "JOB:6")], ["SET", key("job", "JOB:6"), "x"]])
    yield _case("after", "ended-wrongtype", after(1, "JOB:2"), E_TYPE,
                open_job + dead("JOB:2", NOW - 3) + [["SET", BASE + "ended:JOB:1", "x"]])


def waits(job_id: str, value: Arg) -> list[Command]:
    """A planted `waits` on a job's row."""
    return [["HSET", key("job", job_id), "waits", value]]


def waits_cases() -> Iterator[Case]:
    """A waiting job's `waits` that is not a count refuses the calls that count on it (after, on
    its own job; an end hook counting a dependent down), with nothing written; a call that ends
    the dependent instead, or leaves it alone, goes on."""
    live_parent = leased("JOB:2")
    for label, value in NOT_COUNTS.items():
        yield _case("after", f"waits-{label}", after(1, "JOB:2"), E_WAITS,
                    held("JOB:1") + waits("JOB:1", value) + live_parent)
    yield _case("after", "waits-not-a-count-open", after(0), E_WAITS,
                held("JOB:1") + waits("JOB:1", "x"))
    yield _case("after", "waits-absent-counts-0", after(1, "JOB:2"), b"+READY",
                [*held("JOB:1"), ["HDEL", key("job", "JOB:1"), "waits"], *live_parent])
    yield _case("after", "waits-sealed-not-read", after(1, "JOB:2"), b"+SEALED",
                held("JOB:1", hold=False) + waits("JOB:1", "x") + live_parent)
    ack: list[Arg] = [2, key("active"), key("job"), "JOB:1", 1, 60_000]
    for label, hold in (("open", True), ("sealed", False)):
        dependent = parent_of("JOB:1", "JOB:5") + held("JOB:5", hold=hold) + waits("JOB:5", "x")
        yield _case("ack", f"hook-waits-not-a-count-{label}", ack, E_WAITS, dependent)
    dependent = parent_of("JOB:1", "JOB:5") + held("JOB:5", hold=False) + waits("JOB:5", "-1")
    yield _case("ack_result", "hook-waits-not-a-count",
                [2, key("active"), key("job"), "JOB:1", 1, 60_000, b"r"], E_WAITS, dependent)
    yield _case("settle", "hook-waits-not-a-count", settle("done", "JOB:1", 1, b"r", count=1),
                E_WAITS, dependent + waiting("JOB:3"))
    retry: list[Arg] = [4, key("active"), key("delayed"), key("dead"), key("job"), "JOB:1", 1,
                        1_000, 1, b"boom", NOW]
    ignored = parent_of("JOB:1", "JOB:5") + held("JOB:5", hold=False, policy="ignore") \
        + waits("JOB:5", "007")
    yield _case("retry", "hook-dead-ignore-waits-not-a-count", retry, E_WAITS, ignored)
    failed = parent_of("JOB:1", "JOB:5") + held("JOB:5", hold=False) + waits("JOB:5", "x")
    yield _case("retry", "hook-dead-fail-waits-not-read", retry, b"+DEAD", failed)
    yield _case("retry", "hook-retrying-waits-not-read", [*retry[:8], 3, *retry[9:]],
                b"+RETRYING", failed)
    recover: list[Arg] = [5, key("active"), key("pending"), key("ring"), key("wake"), key("dead"),
                          NOW, 100, 1]
    yield _case("recover", "hook-spent-waits-not-a-count", recover, E_WAITS,
                [*ignored, ["ZADD", key("active"), NOW - 9, "JOB:1"]])
    cancel: list[Arg] = [6, key("job"), key("pending"), key("delayed"), key("active"), key("dead"),
                         key("ring"), "JOB:1", NOW, 60_000]
    yield _case("cancel", "hook-waits-not-read", cancel, b"+CANCELLED",
                [*waiting("JOB:1"), ["HSET", key("job"), "next", "JOB:5"],
                 *held("JOB:5", hold=False), *waits("JOB:5", "x")])


def hook_cases() -> Iterator[Case]:
    """The end hook on each transition that ends a job."""
    ack: list[Arg] = [2, key("active"), key("job"), "JOB:1", 1, 60_000]
    fan_in = parent_of("JOB:1", "JOB:5") + held("JOB:5", hold=False, waits=2)
    last = parent_of("JOB:1", "JOB:5", "JOB:6") + held("JOB:5", hold=False, priority=3) \
        + held("JOB:6", waits=1)
    yield _case("ack", "hook-count-down", ack, b"+ACKED", fan_in)
    yield _case("ack", "hook-release", ack, b"+ACKED", last)
    yield _case("ack", "hook-not-waiting", ack, b"+ACKED",
                parent_of("JOB:1", "JOB:5", "JOB:7") + waiting("JOB:5"))
    yield _case("ack", "hook-no-retention", [*ack[:-1], 0], b"+ACKED", last)
    flagged: list[Command] = [["HSET", key("job"), "cancel", "5000", "cancelled", str(NOW - 1)]]
    yield _case("ack", "hook-flagged-cancels", ack, b"+CANCELLED", last + flagged)
    dedupe: list[Command] = [["HSET", key("job"), "dedupe", "dedupe:k1"],
                             ["SET", BASE + "dedupe:k1", "JOB:1"]]
    yield _case("ack", "hook-dedupe-released", ack, b"+ACKED", leased("JOB:1") + dedupe)
    yield _case("ack", "hook-dedupe-window", ack, b"+ACKED",
                leased("JOB:1") + dedupe + [["HSET", key("job"), "dedupe_ms", "9000"]])
    # The release with a dedupe_ms is a PEXPIRE on the server's real clock: each window here
    # outlasts the snapshot (the random walk's 1,000 ms ran out within its run, Walk.short_lived;
    # 50 ms could on a slow server). The walk's end was an ack with a result: it, settle's done
    # and a cancel that ends the job at once.
    window: list[Command] = [*leased("JOB:1"), *dedupe,
                             ["HSET", key("job"), "dedupe_ms", "60000"]]
    yield _case("ack_result", "hook-dedupe-window",
                [2, key("active"), key("job"), "JOB:1", 1, 60_000, b"*3\r\n"], b"+ACKED", window)
    yield _case("settle", "hook-dedupe-window", settle("done", "JOB:1", 1, b"r"),
                replied([b"ACKED"], []), window)
    yield _case("cancel", "hook-dedupe-window",
                [6, key("job"), key("pending"), key("delayed"), key("active"), key("dead"),
                 key("ring"), "JOB:1", NOW, 60_000], b"+CANCELLED",
                [*waiting("JOB:1"), *dedupe, ["HSET", key("job"), "dedupe_ms", "60000"]])
    yield _case("ack", "hook-dedupe-taken", ack, b"+ACKED",
                leased("JOB:1") + dedupe + [["SET", BASE + "dedupe:k1", "JOB:2"]])
    yield _case("ack", "hook-dedupe-wrongtype", ack, E_TYPE,
                leased("JOB:1") + dedupe[:1] + [["RPUSH", BASE + "dedupe:k1", "x"]])
    yield _case("ack", "hook-waiting-wrongtype", ack, E_TYPE,
                [*fan_in, ["SET", key("waiting"), "x"]])
    yield _case("ack", "hook-pending-wrongtype", ack, E_TYPE,
                [*last, ["SET", key("pending"), "x"]])
    yield _case("ack_result", "hook-release",
                [2, key("active"), key("job"), "JOB:1", 1, 60_000, b"r"], b"+ACKED", last)
    retry: list[Arg] = [4, key("active"), key("delayed"), key("dead"), key("job"), "JOB:1", 1,
                        1_000, 1, b"boom", NOW]
    chain = parent_of("JOB:1", "JOB:5", "JOB:6", "JOB:7") + held("JOB:5", hold=False) \
        + held("JOB:6", hold=False, policy="ignore", waits=2) \
        + held("JOB:7", hold=False, policy="continue", waits=3) \
        + [["HSET", key("job", "JOB:5"), "next", "JOB:8 JOB:9"]] \
        + held("JOB:8", hold=False) + held("JOB:9", hold=False, policy="continue")
    yield _case("retry", "hook-dead-chain", retry, b"+DEAD", chain)
    yield _case("retry", "hook-retrying", [*retry[:8], 3, *retry[9:]], b"+RETRYING", chain)
    yield _case("retry", "hook-dead-ended-wrongtype", retry, E_TYPE,
                [*chain, ["SET", BASE + "ended:JOB:8", "x"]])
    yield _case("retry", "hook-dead-dedupe", retry, b"+DEAD",
                [*leased("JOB:1"),
                 ["HSET", key("job"), "dedupe", "dedupe:k", "dedupe_ms", "60000"],
                 ["SET", BASE + "dedupe:k", "JOB:1"]])
    two = [*parent_of("JOB:1", "JOB:5"), *parent_of("JOB:2", "JOB:5"),
           *held("JOB:5", hold=False, waits=2), *parent_of("JOB:3", "JOB:6"),
           *held("JOB:6", hold=False)]
    items: list[Arg] = ["ack", "JOB:1", 1, "done", "JOB:2", 1, b"r", "retry", "JOB:3", 1, 0, 1,
                        b"bad"]
    yield _case("settle", "hook-fan-in", settle(*items, count=1),
                replied([b"ACKED", b"ACKED", b"DEAD"], []), two)
    yield _case("settle", "hook-twice", settle("ack", "JOB:1", 1, "ack", "JOB:1", 1),
                replied([b"ACKED", b"ACKED"], []), fan_in)
    recover: list[Arg] = [5, key("active"), key("pending"), key("ring"), key("wake"), key("dead"),
                          NOW, 100, 1]
    spent: list[Command] = [
        *parent_of("JOB:1", "JOB:5", "JOB:6"), ["ZADD", key("active"), NOW - 9, "JOB:1"],
        *held("JOB:5", hold=False), *held("JOB:6", hold=False, policy="continue"),
        *parent_of("JOB:2", "JOB:6"), ["ZADD", key("active"), NOW - 5, "JOB:2"],
        ["HSET", key("job", "JOB:2"), "cancel", "0", "cancelled", str(NOW - 2)]]
    yield _case("recover", "hook-spent-and-flagged", recover, b":2", spent)
    cancel: list[Arg] = [6, key("job"), key("pending"), key("delayed"), key("active"), key("dead"),
                         key("ring"), "JOB:1", NOW, 60_000]
    yield _case("cancel", "hook-waiting-job", cancel, b"+CANCELLED",
                [*held("JOB:1"), ["HSET", key("job"), "next", "JOB:5"],
                 *held("JOB:5", hold=False)])
    yield _case("cancel", "hook-pending-parent", [*cancel[:-1], 0], b"+CANCELLED",
                [*waiting("JOB:1"), ["HSET", key("job"), "next", "JOB:5 JOB:6"],
                 *held("JOB:5", hold=False), *held("JOB:6", hold=False, policy="ignore")])
    # A cycle (raw AFTER with seal 0 can name a job's own dependent): the cancel reaches its
    # job again through JOB:5's next and finds it already ending, not waiting: one event each,
    # and a row deleted once.
    cycle = [*held("JOB:1"), ["HSET", key("job"), "next", "JOB:5"],
             *held("JOB:5", hold=False), ["HSET", key("job", "JOB:5"), "next", "JOB:1"]]
    yield _case("cancel", "hook-cycle", [7, *cancel[1:7], key("events"), *cancel[7:]],
                b"+CANCELLED", cycle)
    yield _case("cancel", "hook-cycle-no-retention", [*cancel[:-1], 0], b"+CANCELLED", cycle)
    yield _case("cancel", "hook-waiting-wrongtype", cancel, E_TYPE,
                [row("JOB:1", "p", b"p", "waits", "1"), ["SET", key("waiting"), "x"]])
    yield _case("cancel", "hook-leased-flags-only", cancel, b"+CANCELLING",
                parent_of("JOB:1", "JOB:5") + held("JOB:5", hold=False))


def join_cases() -> list[Case]:
    return [*enqueue_after_cases(), *after_cases(), *hook_cases(), *waits_cases()]
