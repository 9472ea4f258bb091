"""What every case is built of: the case type, the queue's keys, the states a case starts from
(a job waiting, leased, delayed), each transition's good call and the state it succeeds on, the
ids good and bad, the argument lists and replies a settle gives, and the check of one case on
both executors.

A case is a state (raw data commands applied to both executors' dbs), an argument list from
numkeys onwards, and the reply it must start with — so the table itself is checked, not only
the parity of the two executors — and the oracle's answer (echomq/conformance/oracle.py): the
model's exact reply and keyspace, or, for a case the model cannot run, the keyspace it states.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from echomq.conformance.harness import BY_NAME, Pair, parity_differences
from echomq.conformance.oracle import Keyspace, oracle_differences
from echomq.conformance.resp import Arg
from echomq.engine.transitions import Transition

BASE = "emq:{q}:"
OTHER = "emq:{other}:"
NOW = 1_700_000_000_000
MAXINT = "999999999999999"
FENCE_MAX = "999999999999998"

E_ARITY = b"-EMQARITY "
E_KIND = b"-EMQKIND "
E_KEYS = b"-EMQKEYS "
E_NUM = b"-EMQNUM "
E_TYPE = b"-WRONGTYPE "
E_FENCE = b"-EMQFENCE the fence counter must hold an integer from 0 to 999999999999998\r\n"
E_ITEM = b"-EMQITEM item "
E_NOTINT = b"-ERR value is not an integer or out of range"
E_NEGATIVE = b"-ERR Number of keys can't be negative"
E_TOOMANY = b"-ERR Number of keys can't be greater than number of args"
E_SIZE = b"-EMQSIZE result must be at most 524288 bytes\r\n"
E_PROGRESS_SIZE = b"-EMQSIZE progress must be at most 65536 bytes\r\n"
NULL = b"<null>"  # $-1 under RESP2, _ under RESP3
NULLS = {2: b"$-1\r\n", 3: b"_\r\n"}

Command = Sequence[Arg]


@dataclass
class Case:
    transition: Transition
    label: str
    argv: list[Arg]
    expect: bytes
    setup: list[Command] = field(default_factory=list)
    # The keyspace the call must leave, for a case the model cannot run (echomq/conformance/
    # oracle.py): normalised, expiries included, keys by their suffix after the queue's base.
    # None: the model is the oracle.
    keyspace: Keyspace | None = None

    @property
    def id(self) -> str:
        return f"{self.transition.name}:{self.label}"


DEDUPE_KEY = "k1"  # the dedupe key of enqueue_unique's calls: <base>dedupe:k1


def key(role: str, job_id: str = "JOB:1", base: str = BASE) -> str:
    if role == "dedupe":
        return f"{base}dedupe:{DEDUPE_KEY}"
    return base + (f"job:{job_id}" if role == "job" else role)


def row(job_id: str, *fields: Arg, base: str = BASE) -> list[Arg]:
    return ["HSET", key("job", job_id, base), *fields]


def waiting(job_id: str, at: int = NOW, payload: Arg = b"p") -> list[Command]:
    """A flat job enqueued at ``at``, not yet claimed."""
    return [row(job_id, "p", payload, "a", "0", "t", str(at)),
            ["ZADD", key("pending"), str(at), job_id]]


def leased(job_id: str, attempt: int = 1, deadline: int = NOW + 30_000,
           lane: str | None = None, fence: int | None = None) -> list[Command]:
    """A job under its ``attempt``-th lease, fenced ``fence`` (default: ``attempt``), until
    ``deadline`` (a lane job if ``lane``)."""
    fields: list[Arg] = ["p", b"p", "a", str(attempt), "t", str(NOW - 5),
                         "f", str(attempt if fence is None else fence)]
    if lane is not None:
        fields += ["lane", lane]
    return [row(job_id, *fields), ["ZADD", key("active"), str(deadline), job_id]]


def delayed(job_id: str, due: int, lane: str | None = None) -> list[Command]:
    fields: list[Arg] = ["p", b"p", "a", "1", "t", str(NOW - 5)]
    if lane is not None:
        fields += ["lane", lane]
    return [row(job_id, *fields), ["ZADD", key("delayed"), str(due), job_id]]


def dead(job_id: str, died: int) -> list[Command]:
    """A job that died at ``died``, its ended key holding its token."""
    return [row(job_id, "p", b"p", "a", "3", "t", str(NOW - 50),
                "error", b"boom"),
            ["ZADD", key("dead"), str(died), job_id], ["RPUSH", f"{BASE}ended:{job_id}", "1"]]


GOOD: dict[str, list[Arg]] = {
    "enqueue": [3, key("job"), key("pending"), key("wake"), "JOB:1", b"payload", NOW],
    "claim": [3, key("pending"), key("active"), key("fence"), 30_000, NOW],
    "ack": [2, key("active"), key("job"), "JOB:1", 1, 60_000],
    "retry": [4, key("active"), key("delayed"), key("dead"), key("job"), "JOB:1", 1, 1_000, 3,
              b"boom", NOW],
    "extend": [2, key("active"), key("job"), "JOB:1", 1, 30_000, NOW],
    "settle": [7, key("active"), key("delayed"), key("dead"), key("pending"), key("fence"),
               key("ring"), key("wake"), NOW, 60_000, 30_000, 1, "ack", "JOB:1", 1,
               "retry", "JOB:2", 1, 1_000, 3, b"boom"],
    "extend_many": [1, key("active"), 30_000, NOW, "JOB:1", 1, "JOB:2", 1],
    "recover": [5, key("active"), key("pending"), key("ring"), key("wake"), key("dead"), NOW, 100,
                3],
    "promote": [4, key("delayed"), key("pending"), key("ring"), key("wake"), NOW, 100],
    "enqueue_delayed": [3, key("job"), key("delayed"), key("wake"), "JOB:1", b"payload", NOW,
                        5_000, 0],
    "ack_result": [2, key("active"), key("job"), "JOB:1", 1, 60_000, b"result"],
    "progress": [2, key("active"), key("job"), "JOB:1", 1, b"3 of 10"],
    "step": [2, key("active"), key("job"), "JOB:1", 1, "charge", b"ch_1"],
    "cancel": [6, key("job"), key("pending"), key("delayed"), key("active"), key("dead"),
               key("ring"), "JOB:1", NOW, 60_000],
    "trim_dead": [2, key("dead"), key("deadconf"), NOW, 100],
    "enqueue_after": [2, key("waiting"), key("job"), "JOB:1", b"payload", NOW, "fail"],
    "after": [5, key("waiting"), key("pending"), key("dead"), key("job"), key("wake"), "JOB:1",
              NOW, 1, "JOB:2"],
    "enqueue_unique": [5, key("pending"), key("delayed"), key("job"), key("wake"), key("dedupe"),
                       "JOB:1", b"payload", NOW, "dedupe", 60_000, 0],
    "enqueue_many": [3, key("pending"), key("delayed"), key("wake"), NOW,
                     "JOB:1", b"payload", 0, 0, "JOB:2", b"later", 5_000, 7],
}

# A state on which each transition's GOOD call succeeds.
READY: dict[str, list[Command]] = {
    "enqueue": [],
    "claim": waiting("JOB:1"),
    "ack": leased("JOB:1"),
    "retry": leased("JOB:1"),
    "extend": leased("JOB:1"),
    "settle": leased("JOB:1") + leased("JOB:2") + waiting("JOB:3"),
    "extend_many": leased("JOB:1") + leased("JOB:2"),
    "recover": leased("JOB:1", deadline=NOW - 1),
    "promote": delayed("JOB:1", due=NOW - 1),
    "enqueue_delayed": [],
    "ack_result": leased("JOB:1"),
    "progress": leased("JOB:1"),
    "step": leased("JOB:1"),
    "cancel": waiting("JOB:1"),
    "trim_dead": [["HSET", key("deadconf"), "max_count", "1"], *dead("JOB:1", NOW - 10),
                  *dead("JOB:2", NOW - 5)],
    "enqueue_after": [],
    "after": [],  # filled below: JOB:1 waiting, open; JOB:2 (its parent) absent, so done
    "enqueue_unique": [],
    "enqueue_many": [],
}



def held(job_id: str, at: int = NOW - 10, waits: int = 1, hold: bool = True,
         policy: str | None = None, priority: int = 0) -> list[Command]:
    """A job admitted by enqueue_after at ``at``, waiting for ``waits`` (its open hold counted
    while ``hold``)."""
    fields: list[Arg] = ["p", b"p", "a", "0", "t", str(at)]
    if priority:
        fields += ["priority", str(priority)]
    fields += ["waits", str(waits)]
    if hold:
        fields += ["hold", "1"]
    if policy is not None:
        fields += ["policy", policy]
    return [row(job_id, *fields), ["ZADD", key("waiting"), str(at), job_id]]


READY["after"] = held("JOB:1")

BAD_IDS: list[tuple[str, Arg]] = [
    ("empty", ""), ("kind-only", "JOB:"), ("lowercase-kind", "job:1"), ("other-kind", "RUN:1"),
    ("no-kind", "1234"), ("space", "JOB:a b"), ("nul", b"JOB:a\x00b"), ("high-byte", b"JOB:\xff"),
    ("newline", "JOB:a\r\nb"), ("slash", "JOB:a/b"), ("brace", "JOB:{q}"),
    ("too-long", "JOB:" + "a" * 201),
]
GOOD_IDS: list[tuple[str, Arg]] = [
    ("longest", "JOB:" + "z" * 200), ("all-classes", "JOB:Az09._:-"), ("one-byte", "JOB:x"),
]


def _raw(value: Arg) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _case(name: str, label: str, argv: list[Arg], expect: bytes,
          setup: Sequence[Command] = (), keyspace: Keyspace | None = None) -> Case:
    return Case(BY_NAME[name], label, argv, expect, list(setup), keyspace)


def _argv(name: str, **changes: Arg) -> list[Arg]:
    t, argv = BY_NAME[name], list(GOOD[name])
    for arg, value in changes.items():
        argv[1 + len(t.keys) + t.args.index(arg)] = value
    return argv


SETTLE_KEYS: list[Arg] = [7, key("active"), key("delayed"), key("dead"), key("pending"),
                          key("fence"), key("ring"), key("wake")]


def settle(*items: Arg, count: Arg = 0, retention: Arg = 60_000) -> list[Arg]:
    """A settle of ``items`` claiming ``count`` jobs."""
    return [*SETTLE_KEYS, NOW, retention, 30_000, count, *items]


def job(job_id: str, attempt: int, fence: int, payload: bytes = b"p") -> bytes:
    """One job as a claim replies it."""
    raw = job_id.encode()
    return (b"*4\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n:%d\r\n"
            % (len(raw), raw, len(payload), payload, attempt, fence))


def replied(verdicts: list[bytes], jobs: list[bytes]) -> bytes:
    """A settle's reply: its items' verdicts, then the jobs it leased."""
    head = b"*2\r\n*%d\r\n" % len(verdicts) + b"".join(b"+%s\r\n" % v for v in verdicts)
    return head + b"*%d\r\n" % len(jobs) + b"".join(jobs)


def case_differences(pair: Pair, case: Case) -> list[str]:
    """Runs ``case`` on both executors of ``pair``: what differs between them, whether their
    reply is the one the table expects, and how it differs from the oracle's (the model's reply
    and keyspace, or the keyspace the case states). Empty when the case passes."""
    pair.reset(case.setup)
    outcomes = pair.run(case.transition, case.argv)
    found = parity_differences(outcomes)
    reply = outcomes["lua"].reply
    if case.expect == NULL:
        expected, met = NULLS[pair.protocol], reply == NULLS[pair.protocol]
    else:
        expected, met = case.expect, reply.startswith(case.expect)
    if not met:
        found.append(f"reply {reply[:60]!r} is not the expected {expected[:60]!r}")
    found += oracle_differences(case, pair.protocol, reply, outcomes["lua"].after)
    return found
