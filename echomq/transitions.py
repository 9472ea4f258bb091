"""The spine: one row per transition, read by both executors, the client and the tests.

Each transition names its key roles (built from the queue's base and, for ``job``, the job id;
``fence`` is the queue's lease counter, a string every claim increments),
its arguments, its Lua file in ``echomq/lua/`` and its native twin in trafikey (or none).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transition:
    name: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    native: str | None
    # A transition that admits work is refused by a server out of memory; the others stay allowed
    # so a full queue can still drain. Scripts say so in their shebang, the module in its flags.
    admits: bool = False
    # The name a wire=6 refusal gives (the seed's name for the lane claim is "gclaim2").
    label: str = ""
    # A transition taking a list after its fixed arguments: how one element of it reads.
    items: str = ""

    @property
    def public_name(self) -> str:
        return self.label or self.name

    @property
    def script_file(self) -> str:
        return f"{self.name}.lua"


ENQUEUE = Transition(
    "enqueue", ("job", "pending", "wake"), ("id", "payload", "now"), "EMQ.ENQUEUE", admits=True
)
CLAIM = Transition("claim", ("pending", "active", "fence"), ("lease_ms", "now"), "EMQ.CLAIM")
ACK = Transition("ack", ("active", "job"), ("id", "fence", "retention_ms"), "EMQ.ACK")
RETRY = Transition(
    "retry",
    ("active", "delayed", "dead", "job"),
    ("id", "fence", "delay_ms", "max_attempts", "error", "now"),
    "EMQ.RETRY",
)
EXTEND = Transition("extend", ("active", "job"), ("id", "fence", "lease_ms", "now"), "EMQ.EXTEND")
SETTLE = Transition(
    "settle",
    ("active", "delayed", "dead", "pending", "fence", "ring", "wake"),
    ("now", "retention_ms", "lease_ms", "count"),
    "EMQ.SETTLE",
    items="ack <id> <fence> | release <id> <fence> | retry <id> <fence> <delay_ms> <max_attempts> "
          "<error>",
)
EXTEND_MANY = Transition(
    "extend_many", ("active",), ("lease_ms", "now"), "EMQ.EXTEND_MANY", items="<id> <fence>"
)
RECOVER = Transition(
    "recover", ("active", "pending", "ring", "wake", "dead"), ("now", "limit", "max_attempts"),
    "EMQ.RECOVER",
)
PROMOTE = Transition(
    "promote", ("delayed", "pending", "ring", "wake"), ("now", "limit"), "EMQ.PROMOTE"
)

LANE_ENQUEUE = Transition(
    "lane_enqueue", ("job", "lane", "ring", "wake"), ("id", "payload", "group", "now"), None,
    admits=True,
)
LANE_CLAIM = Transition("lane_claim", ("ring", "active", "fence"), ("lease_ms", "now"), None,
                        label="gclaim2")

REQUEUE = Transition("requeue", ("dead", "pending", "ring", "wake", "job"), ("id", "now"), None)
PURGE = Transition("purge", ("dead",), ("limit",), None)

# Every transition with a native twin; the conformance suite runs each on both executors.
TRANSITIONS: tuple[Transition, ...] = (
    ENQUEUE, CLAIM, ACK, RETRY, EXTEND, SETTLE, EXTEND_MANY, RECOVER, PROMOTE
)
# Transitions that exist only as scripts: a wire=6 client refuses them before sending anything.
SCRIPT_ONLY: tuple[Transition, ...] = (LANE_ENQUEUE, LANE_CLAIM)
# An operator's tools over dead jobs: scripts whatever the queue's wire (see echomq.admin).
ADMIN: tuple[Transition, ...] = (REQUEUE, PURGE)
ALL_TRANSITIONS: tuple[Transition, ...] = TRANSITIONS + SCRIPT_ONLY + ADMIN


def queue_base(name: str) -> str:
    """The prefix of every key of queue ``name``; the hash tag keeps the queue in one slot."""
    if not name or "{" in name or "}" in name:
        raise ValueError(f"queue name must be non-empty and free of braces: {name!r}")
    return f"emq:{{{name}}}:"


def key_of(base: str, role: str, job_id: str | None = None, lane: str | None = None) -> str:
    """The key of ``role`` (pending, active, ...; ``job``: the row of ``job_id``; ``lane``: the
    lane of group ``lane``)."""
    if role == "job":
        return f"{base}job:{job_id}"
    if role == "lane":
        return f"{base}lane:{lane}"
    return base + role


def keys_for(base: str, transition: Transition, job_id: str | None = None,
             lane: str | None = None) -> list[str]:
    """The declared keys of ``transition`` on the queue at ``base``, in protocol order."""
    return [key_of(base, role, job_id, lane) for role in transition.keys]
