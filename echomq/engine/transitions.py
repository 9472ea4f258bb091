"""The protocol table: one row per transition, the single source both executors, the client and
the tests read.

Each transition names its key roles (built from the queue's base and, for ``job``, the job id;
``fence`` is the queue's lease counter, a string every claim increments), its arguments, its Lua
file in ``echomq/lua/`` and its native twin in trafikey (or none), its flags, summary and
complexity. A key role has one type wherever it appears (``ROLE_TYPES``) and an argument name one
kind and minimum (``ARGUMENTS``), so a row lists names and the grammar gives the rest.

The C side reads this table through ``native/protocol.h``, which ``python -m echomq.engine.
protocol_gen`` writes from it (a test fails when the checked-in header is stale); the Lua side
and docs/PROTOCOL.md are checked against it by tests/test_protocol_table.py.

The error table (``ERROR_CODES``, ``ERROR_TEXTS``) states every error reply byte for byte and the
exception each code raises in Python: the generator writes native/emq_errors.h from it, the client
builds its own refusals and echomq.engine.errors its mapping from it, and tests/test_error_table.py
checks the scripts' texts and docs/PROTOCOL.md's error table against it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The number bounds and the error table are part of the protocol table, re-exported from here,
# and so is the check of a queue's name.
from echomq.engine.error_table import (
    ERROR_CODES as ERROR_CODES,
    ERROR_FIELDS as ERROR_FIELDS,
    ERROR_TEXTS as ERROR_TEXTS,
    ERRORS as ERRORS,
    FENCE_MAX as FENCE_MAX,
    INT_MAX as INT_MAX,
    MAX_JOB_STEPS_BYTES as MAX_JOB_STEPS_BYTES,
    MAX_PROGRESS_BYTES as MAX_PROGRESS_BYTES,
    MAX_RESULT_BYTES as MAX_RESULT_BYTES,
    MAX_STEP_BYTES as MAX_STEP_BYTES,
    PRIORITY_BAND as PRIORITY_BAND,
    PRIORITY_MAX as PRIORITY_MAX,
    PRIORITY_MIN as PRIORITY_MIN,
    TIME_CAP as TIME_CAP,
    ErrorCode as ErrorCode,
    ErrorText as ErrorText,
)
from echomq.engine.queue_names import queue_base as queue_base

# The type of each key role: a declared key must be absent or of this type (WRONGTYPE otherwise).
ROLE_TYPES: dict[str, str] = {
    "job": "hash",  # the row of the id argument: <base>job:<id>
    "pending": "zset",
    "active": "zset",
    "delayed": "zset",
    "dead": "zset",
    "wake": "list",
    "ring": "list",
    "lane": "list",  # the lane of the group argument: <base>lane:<group>
    "fence": "string",
    "laneconf": "hash",  # lane knobs: <knob> the queue's default, <knob>:<group> a group's
    "leased": "hash",  # leases held per group
    "parked": "hash",  # why a group is out of the ring: bits 1 limit, 2 rate, 4 paused
    "throttled": "zset",  # groups over their rate, score = when their window opens
    "windows": "hash",  # each rate-limited group's window: '<start> <claims>'
    "turn": "string",  # '<served> <group>': the ring head's claims in its turn
    "paused": "string",  # present while the whole queue is paused
    "deadconf": "hash",  # the bounds of dead: max_count, max_age_ms (DEAD_BOUNDS)
    # A claim's record, <base>claim:<claim_id>: the leases a claim that named it handed out,
    # '<id> <fence>' each, space-separated, for a lease's time (see CLAIM_RECORD).
    "claim": "string",
    # The optional last key of an evented call (``Transition.events``): the queue's events,
    # <base>events, one entry per change the call makes (EVENTS_MAXLEN kept, about).
    "events": "stream",
    # A lane's jobs of priority other than 0, <base>prio:<group>, scored as pending is: derived
    # next to the group's lane, never declared.
    "prio": "zset",
    # Jobs waiting for their parents (enqueue_after, after), score = the now of their admission.
    "waiting": "zset",
    # Per group, how many of its entries in the ring it left behind when it left the ring (lane
    # pause, lane set, cancel emptying its lane: the ring not walked); lane claim drops them.
    # Derived, never declared.
    "ringleft": "hash",
    # A dedupe key, <base>dedupe:<key> (the key chosen by the caller, of the lane gate): the id
    # of the job that holds it (enqueue_unique; released by the end of that job).
    "dedupe": "string",
}
# Roles whose key is derived from an argument rather than a fixed suffix: role -> (prefix, arg).
DERIVED_ROLES: dict[str, tuple[str, str]] = {"job": ("job:", "id"), "lane": ("lane:", "group"),
                                             "prio": ("prio:", "group")}
# Declared keys named by the caller rather than by an argument: role -> the prefix after the
# base; the rest is the caller's (1 to 200 bytes of A-Z a-z 0-9 . _ : -, the lane gate).
NAMED_ROLES: dict[str, str] = {"dedupe": "dedupe:"}
# The optional last key of a claiming transition (``Transition.record``): its claim record,
# <base>claim:<claim_id>, the claim id chosen by the caller (1 to 200 bytes of A-Z a-z 0-9 . _ : -,
# as a lane name). A claim sent again with it after a lost reply answers the leases recorded
# that are still held, and leases nothing more.
CLAIM_RECORD = "claim"
CLAIM_RECORD_PREFIX = "claim:"
# The optional key after the claim record (or the keys, for a transition taking none): the queue's
# events stream, <base>events. A call that declares it appends an entry per change it makes,
# trimmed to about EVENTS_MAXLEN entries; a call that does not appends nothing.
EVENTS_ROLE = "events"
EVENTS_MAXLEN = 10_000
# The most expired jobs one claim (or settle's claim part) ends on its walk of pending: a queue
# full of jobs that outlived their deadline is cleared a bounded piece a call.
EXPIRED_MAX = 100
# The error an expired job ends dead with, and the field of the row holding its deadline.
EXPIRED_ERROR = "expired"
EVENT_KINDS: tuple[str, ...] = ("enqueued", "claimed", "done", "retried", "dead", "released",
                                "recovered", "promoted", "requeued", "purged", "cancelled",
                                "progress", "waiting", "ready", "debounced")


@dataclass(frozen=True)
class Argument:
    """How one argument reads: ``id`` (the kind gate), ``group`` (the lane gate), ``int`` (1 to 15
    digits, at least ``min``), ``now`` (``*`` or an integer from 0), ``bytes`` (anything),
    ``result`` (any bytes, at most ``MAX_RESULT_BYTES`` of them), ``progress`` (any bytes, at
    most ``MAX_PROGRESS_BYTES``), ``step`` (a step's name: the lane gate, EMQLANE with its own
    text), ``output`` (any bytes, at most ``MAX_STEP_BYTES``) or ``priority`` (an optional
    ``-`` and 1 to 3 digits, from ``PRIORITY_MIN`` to ``PRIORITY_MAX``) or ``policy``
    (exactly ``fail``, ``ignore`` or ``continue``)."""

    kind: str
    min: int = 0


ARGUMENTS: dict[str, Argument] = {
    "id": Argument("id"),
    "group": Argument("group"),
    "payload": Argument("bytes"),
    "error": Argument("bytes"),
    "now": Argument("now"),
    "fence": Argument("int", 1),
    "lease_ms": Argument("int", 1),
    "retention_ms": Argument("int", 0),
    "delay_ms": Argument("int", 0),
    "max_attempts": Argument("int", 1),
    "limit": Argument("int", 1),
    "count": Argument("int", 0),
    "at_ms": Argument("int", 0),
    "result": Argument("result"),
    "progress": Argument("progress"),
    "step": Argument("step"),  # a step's name, of the lane gate
    "output": Argument("output"),  # a step's recorded output: at most MAX_STEP_BYTES
    "scope": Argument("scope"),  # a group, or * for the whole queue
    "concurrency": Argument("knob"),  # = keep, - clear, or an integer from 1
    "rate": Argument("knob"),
    "window_ms": Argument("knob"),
    "weight": Argument("knob"),
    "paused": Argument("flag"),  # 1 or 0
    "priority": Argument("priority"),  # -100 to 100; higher is claimed first
    "expires_at": Argument("int", 0),  # ms on now's clock; a claim at it ends the job (0: none)
    "policy": Argument("policy"),  # fail, ignore or continue (EMQPOLICY otherwise)
    "seal": Argument("int", 0),  # not 0: the call seals the waiting job's list of parents
    "parent": Argument("id"),  # a job the waiting job waits on
    "mode": Argument("mode"),  # enqueue_unique: dedupe, debounce or throttle (EMQMODE)
    "period_ms": Argument("int", 0),  # enqueue_unique: the mode's window
}
# The modes of enqueue_unique, in the order of their number in the native call (0, 1, 2).
UNIQUE_MODES: tuple[str, ...] = ("dedupe", "debounce", "throttle")


@dataclass(frozen=True)
class ItemForm:
    """One form an element of a variadic tail takes: its op word (none for extend_many's pairs)
    and its arguments after the word."""

    word: str | None
    args: tuple[str, ...]

    @property
    def shape(self) -> str:
        words = ([self.word] if self.word else []) + [f"<{a}>" for a in self.args]
        return " ".join(words)


@dataclass(frozen=True)
class Transition:
    name: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    native: str | None
    # A transition that admits work is refused by a server out of memory; the others stay allowed
    # so a full queue can still drain. Scripts say so in their shebang, the module in its flags.
    admits: bool = False
    # A transition taking a list after its fixed arguments: the forms one element of it takes.
    item_forms: tuple[ItemForm, ...] = ()
    # O(1) or O(log N) work: the module flags the command "fast".
    fast: bool = False
    # The call may declare one more key after ``keys``: its claim record (CLAIM_RECORD).
    record: bool = False
    # Arguments after ``args`` that a call may leave off (trailing, in order; absent reads as 0).
    optional: tuple[str, ...] = ()
    # The event kinds the transition may append (EVENT_KINDS): when any, the call may declare
    # the queue's events key (EVENTS_ROLE) last, after its claim record.
    events: tuple[str, ...] = ()
    max_items: int = 0  # a list's bound (0: none): more items is EMQARITY (ERRORS["MANY"])
    summary: str = ""
    complexity: str = ""

    @property
    def script_file(self) -> str:
        return f"{self.name}.lua"

    @property
    def verb(self) -> str:
        """The name in EMQARITY errors (``EMQ.<verb>``), on both executors."""
        return self.name.upper()

    @property
    def variadic(self) -> bool:
        return bool(self.item_forms)

    @property
    def items(self) -> str:
        """How one element of the list after the fixed arguments reads ("" when there is none)."""
        return " | ".join(form.shape for form in self.item_forms)

    @property
    def item_shape(self) -> str:
        """The shape an EMQITEM error names: the forms, "a, b or c"."""
        shapes = [form.shape for form in self.item_forms]
        return " or ".join(filter(None, [", ".join(shapes[:-1]), shapes[-1]])) if shapes else ""

    @property
    def key_types(self) -> tuple[str, ...]:
        return tuple(ROLE_TYPES[role] for role in self.keys)

    @property
    def arguments(self) -> tuple[Argument, ...]:
        return tuple(ARGUMENTS[name] for name in self.args)

    @property
    def flags(self) -> str:
        """The native command's flags: every transition writes; admitting work is deny-oom; the
        keys are reported like EVALSHA's (getkeys-api), and none is mandatory, as for EVALSHA."""
        words = ["write"] + (["deny-oom"] if self.admits else []) + (["fast"] if self.fast else [])
        return " ".join([*words, "getkeys-api", "no-mandatory-keys"])

    @property
    def optional_keys(self) -> int:
        """How many keys a call may declare after ``keys``: its record, then its events key."""
        return int(self.record) + int(bool(self.events))

    def layout(self) -> str:
        """The call as docs/PROTOCOL.md writes it; integers carry their minimum: <lease_ms:1>.
        The optional keys and arguments in brackets: ``3|4|5 ... [<base>claim:<claim_id>]
        [<base>events] ... [<priority>]``."""
        head = self.native or "EVALSHA <sha>"
        keys = [_key_text(role) for role in self.keys]
        numkeys = "|".join(str(len(self.keys) + n) for n in range(self.optional_keys + 1))
        if self.record:
            keys.append(f"[<base>{CLAIM_RECORD_PREFIX}<claim_id>]")
        if self.events:
            keys.append(f"[<base>{EVENTS_ROLE}]")
        args = [_arg_text(name) for name in self.args]
        args += [f"[{_arg_text(name)}]" for name in self.optional]
        tail = [_tail_text(self.item_forms)] if self.item_forms else []
        return " ".join([head, numkeys, *keys, *args, *tail])


def _key_text(role: str) -> str:
    if role in NAMED_ROLES:
        return f"<base>{NAMED_ROLES[role]}<key>"
    if role in DERIVED_ROLES:
        prefix, arg = DERIVED_ROLES[role]
        return f"<base>{prefix}<{arg}>"
    return f"<base>{role}"


def _arg_text(name: str) -> str:
    argument = ARGUMENTS[name]
    return f"<{name}:{argument.min}>" if argument.kind == "int" else f"<{name}>"


def _tail_text(forms: tuple[ItemForm, ...]) -> str:
    if len(forms) == 1 and forms[0].word is None:
        return "[" + " ".join(_arg_text(a) for a in forms[0].args) + " ...]"
    return "[item ...]"


def item_layouts(transition: Transition) -> list[str]:
    """The forms of a settle-like list as docs/PROTOCOL.md writes them, one per form."""
    return [" ".join(([form.word] if form.word else []) + [_arg_text(a) for a in form.args])
            for form in transition.item_forms]


ENQUEUE = Transition(
    "enqueue", ("job", "pending", "wake"), ("id", "payload", "now"), "EMQ.ENQUEUE", admits=True,
    fast=True, optional=("priority", "expires_at"), events=("enqueued",),
    summary="Admit a job once (twin of enqueue.lua).",
    complexity="O(log N) with N the pending jobs",
)
CLAIM = Transition(
    "claim", ("pending", "active", "fence"), ("lease_ms", "now"), "EMQ.CLAIM", record=True,
    events=("claimed", "dead", "ready"),
    summary="Lease the oldest pending job (twin of claim.lua).",
    complexity="O(G + E + log N) with G the ghosts dropped, E the expired jobs ended (at most 100)",
)
ENQUEUE_DELAYED = Transition(
    "enqueue_delayed", ("job", "delayed", "wake"), ("id", "payload", "now", "delay_ms", "at_ms"),
    "EMQ.ENQUEUE_DELAYED", admits=True, fast=True, optional=("priority", "expires_at"),
    events=("enqueued",),
    summary="Admit a job once, to run later (twin of enqueue_delayed.lua).",
    complexity="O(log N) with N the delayed jobs",
)
ACK = Transition(
    "ack", ("active", "job"), ("id", "fence", "retention_ms"), "EMQ.ACK", fast=True,
    events=("done", "cancelled", "ready"),
    summary="Complete the current lease (twin of ack.lua).", complexity="O(log N)",
)
ACK_RESULT = Transition(
    "ack_result", ("active", "job"), ("id", "fence", "retention_ms", "result"), "EMQ.ACK_RESULT",
    fast=True, events=("done", "cancelled", "ready"),
    summary="Complete the current lease, keeping its result (twin of ack_result.lua).",
    complexity="O(log N)",
)
RETRY = Transition(
    "retry",
    ("active", "delayed", "dead", "job"),
    ("id", "fence", "delay_ms", "max_attempts", "error", "now"),
    "EMQ.RETRY", fast=True, events=("retried", "dead", "cancelled", "ready"),
    summary="Fail the current lease: delayed or dead (twin of retry.lua).", complexity="O(log N)",
)
EXTEND = Transition(
    "extend", ("active", "job"), ("id", "fence", "lease_ms", "now"), "EMQ.EXTEND", fast=True,
    summary="Push the current lease's deadline (twin of extend.lua).", complexity="O(log N)",
)
PROGRESS = Transition(
    "progress", ("active", "job"), ("id", "fence", "progress"), "EMQ.PROGRESS", fast=True,
    events=("progress",),
    summary="Record how far the current lease got (twin of progress.lua).", complexity="O(1)",
)
STEP = Transition(
    "step", ("active", "job"), ("id", "fence", "step", "output"), "EMQ.STEP", fast=True,
    summary="Record a step's output under the current lease, once (twin of step.lua).",
    complexity="O(1)",
)
SETTLE = Transition(
    "settle",
    ("active", "delayed", "dead", "pending", "fence", "ring", "wake"),
    ("now", "retention_ms", "lease_ms", "count"),
    "EMQ.SETTLE", record=True,
    events=("done", "retried", "dead", "released", "cancelled", "claimed", "ready"),
    item_forms=(
        ItemForm("ack", ("id", "fence")),
        ItemForm("done", ("id", "fence", "result")),
        ItemForm("release", ("id", "fence")),
        ItemForm("retry", ("id", "fence", "delay_ms", "max_attempts", "error")),
    ),
    summary="Settle many leases, then lease the next jobs, in one call (twin of settle.lua).",
    complexity="O((I + C + G) log N) with I the items, C the jobs claimed, G the ghosts dropped",
)
EXTEND_MANY = Transition(
    "extend_many", ("active",), ("lease_ms", "now"), "EMQ.EXTEND_MANY",
    item_forms=(ItemForm(None, ("id", "fence")),),
    summary="Push many current leases' deadlines (twin of extend_many.lua).",
    complexity="O(P log N) with P the pairs",
)
RECOVER = Transition(
    "recover", ("active", "pending", "ring", "wake", "dead"), ("now", "limit", "max_attempts"),
    "EMQ.RECOVER", events=("recovered", "dead", "cancelled", "ready"),
    summary="Expired leases go back where they came from (twin of recover.lua).",
    complexity="O(M log N) with M the leases taken",
)
CANCEL = Transition(
    "cancel", ("job", "pending", "delayed", "active", "dead", "ring"),
    ("id", "now", "retention_ms"),
    "EMQ.CANCEL", events=("cancelled",),
    summary="Cancel a job: a waiting one becomes a cancelled tombstone, a leased one is flagged "
            "(twin of cancel.lua).",
    complexity="O(log N), or O(L) with L the jobs of a lane job's lane",
)
PROMOTE = Transition(
    "promote", ("delayed", "pending", "ring", "wake"), ("now", "limit"), "EMQ.PROMOTE",
    events=("promoted",),
    summary="Due delayed jobs go back to run (twin of promote.lua).",
    complexity="O(M log N) with M the jobs taken",
)

LANE_ENQUEUE = Transition(
    "lane_enqueue", ("job", "lane", "ring", "wake"), ("id", "payload", "group", "now"), None,
    admits=True, optional=("priority",), events=("enqueued",),
    summary="Admit a job once into its group's lane.",
)
LANE_ENQUEUE_DELAYED = Transition(
    "lane_enqueue_delayed", ("job", "delayed", "wake"),
    ("id", "payload", "group", "now", "delay_ms", "at_ms"), None, admits=True,
    optional=("priority",), events=("enqueued",),
    summary="Admit a job once, to run later in its group's lane.",
)
LANE_CLAIM = Transition(
    "lane_claim",
    ("ring", "active", "fence", "laneconf", "leased", "parked", "throttled", "windows", "turn",
     "paused"),
    ("lease_ms", "now"), None, record=True, events=("claimed",),
    summary="Lease the head job of the ring's head lane, within its limits and weight.",
)
LANE_SET = Transition(
    "lane_set", ("ring", "laneconf", "leased", "parked", "throttled", "windows", "turn"),
    ("scope", "concurrency", "rate", "window_ms", "weight", "now"), None,
    summary="Set a group's lane knobs, or the queue's defaults.",
)
LANE_PAUSE = Transition(
    "lane_pause", ("ring", "parked", "throttled", "turn", "paused", "wake"), ("scope", "paused"),
    None, summary="Pause or resume a group's lane, or the whole queue.",
)

REQUEUE = Transition(
    "requeue", ("dead", "pending", "ring", "wake", "job"), ("id", "now"), None,
    events=("requeued",),
    summary="A dead job runs again with a fresh count of attempts.",
)
PURGE = Transition("purge", ("dead",), ("limit",), None, events=("purged",),
                   summary="Forget the oldest dead jobs.")
TRIM_DEAD = Transition(
    "trim_dead", ("dead", "deadconf"), ("now", "limit"), "EMQ.TRIM_DEAD", events=("purged",),
    summary="Forget the oldest dead jobs beyond the queue's bounds (twin of trim_dead.lua).",
    complexity="O(M log N) with M the jobs trimmed",
)
ENQUEUE_AFTER = Transition(
    "enqueue_after", ("waiting", "job"), ("id", "payload", "now", "policy"), "EMQ.ENQUEUE_AFTER",
    admits=True, fast=True, optional=("priority",), events=("waiting",),
    summary="Admit a job once, to wait for its parents (twin of enqueue_after.lua).",
    complexity="O(log N) with N the waiting jobs",
)
AFTER = Transition(
    "after", ("waiting", "pending", "dead", "job", "wake"), ("id", "now", "seal"), "EMQ.AFTER",
    item_forms=(ItemForm(None, ("parent",)),), events=("ready", "dead", "cancelled"),
    summary="Register a waiting job's parents, and seal it (twin of after.lua).",
    complexity="O((P + D) log N) with P the parents, D the jobs a failure or cancel ends",
)
ENQUEUE_UNIQUE = Transition(
    "enqueue_unique", ("pending", "delayed", "job", "wake", "dedupe"),
    ("id", "payload", "now", "mode", "period_ms", "delay_ms"), "EMQ.ENQUEUE_UNIQUE",
    admits=True, fast=True, optional=("priority",), events=("enqueued", "debounced"),
    summary="Admit a job once per dedupe key: dedupe, debounce or throttle (twin of "
            "enqueue_unique.lua).",
    complexity="O(log N) with N the pending or delayed jobs",
)
ENQUEUE_MANY_MAX = 10_000  # the most jobs one EMQ.ENQUEUE_MANY admits: its time stays bounded
ENQUEUE_MANY = Transition(
    "enqueue_many", ("pending", "delayed", "wake"), ("now",), "EMQ.ENQUEUE_MANY", admits=True,
    item_forms=(ItemForm(None, ("id", "payload", "delay_ms", "priority")),), events=("enqueued",),
    max_items=ENQUEUE_MANY_MAX, complexity="O(J log N) with J the jobs",
    summary="Admit many flat jobs, a verdict each (twin of enqueue_many.lua).")
# The bounds of a queue's dead jobs, fields of <base>deadconf (decimal; 0: no bound of that
# kind), and each one's value when its field is absent: 10,000 jobs, 180 days.
DEAD_BOUNDS: dict[str, int] = {"max_count": 10_000, "max_age_ms": 180 * 24 * 3600 * 1000}

# Every transition with a native twin; the conformance suite runs each on both executors.
TRANSITIONS: tuple[Transition, ...] = (
    ENQUEUE, CLAIM, ACK, RETRY, EXTEND, SETTLE, EXTEND_MANY, RECOVER, PROMOTE, ENQUEUE_DELAYED,
    ACK_RESULT, PROGRESS, CANCEL, TRIM_DEAD, ENQUEUE_AFTER, AFTER, ENQUEUE_UNIQUE, ENQUEUE_MANY,
    STEP,
)
# Transitions that exist only as scripts: a wire=6 client refuses them before sending anything.
SCRIPT_ONLY: tuple[Transition, ...] = (LANE_ENQUEUE, LANE_CLAIM, LANE_ENQUEUE_DELAYED, LANE_SET,
                                       LANE_PAUSE)
# An operator's tools over dead jobs: scripts whatever the queue's wire (see echomq.ops.admin).
ADMIN: tuple[Transition, ...] = (REQUEUE, PURGE)
ALL_TRANSITIONS: tuple[Transition, ...] = TRANSITIONS + SCRIPT_ONLY + ADMIN


def key_of(base: str, role: str, job_id: str | None = None, lane: str | None = None) -> str:
    """The key of ``role`` (pending, active, ...; ``job``: the row of ``job_id``; ``ended``: the
    token that wakes the waiters of ``job_id``; ``lane``: the lane of group ``lane``; ``claim``:
    the record of claim id ``job_id``; ``dedupe``: the dedupe key ``lane``)."""
    if role == CLAIM_RECORD:
        return f"{base}{CLAIM_RECORD_PREFIX}{job_id}"
    if role in ("job", "ended"):
        return f"{base}{role}:{job_id}"
    if role in ("lane", "prio"):
        return f"{base}{role}:{lane}"
    if role in NAMED_ROLES:
        return f"{base}{NAMED_ROLES[role]}{lane}"
    return base + role


def keys_for(base: str, transition: Transition, job_id: str | None = None,
             lane: str | None = None, claim_id: str | None = None,
             events: bool = False) -> list[str]:
    """The declared keys of ``transition`` on the queue at ``base``, in protocol order; with
    ``claim_id`` (a transition taking a record), its claim record after them; with ``events``,
    the queue's events key last when the transition appends events (else none)."""
    keys = [key_of(base, role, job_id, lane) for role in transition.keys]
    if claim_id is not None:
        if not transition.record:
            raise ValueError(f"{transition.name} takes no claim record")
        keys.append(key_of(base, CLAIM_RECORD, claim_id))
    if events and transition.events:
        keys.append(key_of(base, EVENTS_ROLE))
    return keys
