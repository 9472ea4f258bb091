"""Validation in the order docs/PROTOCOL.md gives: numkeys, arity, the job id, the keys, the
numbers, a batch's items, the types, then the keys a transition derives (ended, lanes)."""

from __future__ import annotations

from collections.abc import Sequence

from echomq.conformance.model.call import (
    MAX_JOBS,
    WIDTH,
    Call,
    Item,
    many_error,
    parse_items,
    parse_jobs,
    parse_pairs,
)
from echomq.conformance.model.records import Records, optional_keys, split_optional
from echomq.conformance.model.replies import (
    E_FENCE,
    E_KEYS,
    E_KIND,
    E_MODE,
    E_NEGATIVE,
    E_NOTINT,
    E_NOW,
    E_POLICY,
    E_PRIORITY,
    E_PROGRESS,
    E_RESULT,
    E_STEP_NAME,
    E_STEP_OUTPUT,
    E_TOOMANY,
    E_TYPE,
    PROGRESS_MAX,
    RESULT_MAX,
    STEP_MAX,
    UNIQUE_MODES,
    arity_error,
    error,
    number_error,
    optional_arity_error,
    variadic_arity_error,
)
from echomq.conformance.model.words import (
    MINIMUM,
    id_ok,
    int_arg,
    lane_ok,
    numkeys_of,
    priority_arg,
    raw,
)
from echomq.conformance.resp import Arg
from echomq.engine.transitions import NAMED_ROLES, Transition

# The single verbs that may end a job (done keeping a result, dead, or cancelled): they check its
# ended key.
ENDING = ("ack_result", "retry", "cancel")
KEY_TYPE = {"job": b"hash", "pending": b"zset", "active": b"zset", "delayed": b"zset",
            "dead": b"zset", "ring": b"list", "wake": b"list", "fence": b"string",
            "deadconf": b"hash", "waiting": b"zset", "dedupe": b"string"}


def shape_ok(transition: Transition, keys: list[bytes], args: list[bytes]) -> bool:
    """Step 1: the table's keys, then up to its optional ones; its fixed arguments, then up to
    its optional ones (a batch: at least the fixed ones)."""
    nkeys, fixed = len(transition.keys), len(transition.args)
    if not nkeys <= len(keys) <= nkeys + transition.optional_keys:
        return False
    if transition.items:
        return len(args) >= fixed
    return fixed <= len(args) <= fixed + len(transition.optional)


def shape_error(transition: Transition) -> bytes:
    """The EMQARITY reply of ``transition``'s kind."""
    verb, nkeys, fixed = transition.verb, len(transition.keys), len(transition.args)
    if transition.items:
        return variadic_arity_error(verb, nkeys, fixed)
    if transition.optional:
        return optional_arity_error(verb, nkeys, fixed, fixed + len(transition.optional))
    return arity_error(verb, nkeys, fixed)


def shape_failure(transition: Transition, keys: list[bytes], args: list[bytes]) -> bytes | None:
    """Step 1's error: the shape, then a bounded list's length (enqueue_many's jobs)."""
    if not shape_ok(transition, keys, args):
        return shape_error(transition)
    if transition.max_items and len(args) - len(transition.args) > MAX_JOBS * WIDTH:
        return many_error(transition.verb, MAX_JOBS)
    return None


def split_keys(words: list[bytes]) -> tuple[list[bytes], list[bytes]] | bytes:
    """Keys and arguments after numkeys, or the error EVALSHA gives for a bad numkeys."""
    numkeys = numkeys_of(words[0])
    if numkeys is None:
        return error(E_NOTINT)
    if numkeys > len(words) - 1:
        return error(E_TOOMANY)
    if numkeys < 0:
        return error(E_NEGATIVE)
    return words[1:1 + numkeys], words[1 + numkeys:]


# The arguments of any bytes up to a cap, and the error of one over it (EMQSIZE).
SIZED: dict[str, tuple[int, bytes]] = {"result": (RESULT_MAX, E_RESULT),
                                       "progress": (PROGRESS_MAX, E_PROGRESS),
                                       "output": (STEP_MAX, E_STEP_OUTPUT)}


def gate_failure(transition: Transition, args: list[bytes]) -> bytes | None:
    """Step 2 of a single verb: its id (EMQKIND), then a step's name (EMQLANE)."""
    if transition.args[0] == "id" and not id_ok(args[0]):
        return error(E_KIND)
    if "step" in transition.args and not lane_ok(args[transition.args.index("step")]):
        return error(E_STEP_NAME)
    return None


class Validation(Records):
    """A call's arguments checked, before anything is written."""

    def validate(self, transition: Transition, argv: Sequence[Arg]) -> Call | bytes:
        """The parsed call, or the error reply the first failing step gives."""
        words = [raw(arg) for arg in argv]
        split = split_keys(words)
        if isinstance(split, bytes):
            return split
        keys, args = split
        failure = shape_failure(transition, keys, args)
        if failure is not None:
            return failure
        keys, extra = split_optional(transition, keys)
        if transition.items:
            return self._validate_batch(transition, keys, args, extra)
        job_id = args[0] if transition.args[0] == "id" else b""
        gate = gate_failure(transition, args)
        if gate is not None:
            return gate
        call = self._keyed(transition, keys, args, extra, job_id)
        if call is None:
            return error(E_KEYS)
        fixed = len(transition.args)
        failure = (self._numbers(call, transition.args, args[:fixed])
                   or self._optional(call, transition.optional, args[fixed:]))
        if failure is not None:
            return failure
        checked = self._typed(transition, call)
        if isinstance(checked, bytes) or self._derived_ok(transition, checked, job_id):
            return checked
        return error(E_TYPE)

    def _derived_ok(self, transition: Transition, call: Call, job_id: bytes) -> bool:
        """Step 6 of a single verb: the ended key of one that may end a job, the holder's row
        of enqueue_unique."""
        if transition.name in ENDING:
            return self.list_or_none(call.base + b"ended:" + job_id)
        return transition.name != "enqueue_unique" or self._holder_ok(call)

    def _keyed(self, transition: Transition, keys: list[bytes], args: list[bytes],
               extra: list[bytes], job_id: bytes) -> Call | None:
        """Step 3: the call with its base and its optional keys, or None (EMQKEYS)."""
        base = self._base(transition, keys, job_id)
        optional = None if base is None else optional_keys(transition, base, extra)
        if base is None or optional is None:
            return None
        record, events = optional
        return Call(keys, args, base, record=record, events=events)

    def _optional(self, call: Call, names: Sequence[str], words: Sequence[bytes]) -> bytes | None:
        """The optional arguments given, after the fixed ones (one left off reads as 0): the
        priority, then a deadline, an integer as the fixed ones are."""
        for name in names:
            call.numbers[name] = 0
        for name, word in zip(names, words, strict=False):
            if name != "priority":
                failure = self._number(call, name, word)
                if failure is not None:
                    return failure
                continue
            value = priority_arg(word)
            if value is None:
                return error(E_PRIORITY)
            call.numbers[name] = value
        return None

    def _numbers(self, call: Call, names: Sequence[str], words: Sequence[bytes]) -> bytes | None:
        """The first number error among the fixed arguments, in order; None when all parse."""
        for name, word in zip(names, words, strict=True):
            if name == "mode":  # enqueue_unique's mode, in its place among the numbers
                failure = None if word in UNIQUE_MODES else error(E_MODE)
            else:
                failure = self._number(call, name, word) or self._policy(name, word)
            if failure is not None:
                return failure
        return None

    def _validate_after(self, transition: Transition, keys: list[bytes], args: list[bytes],
                        extra: list[bytes]) -> Call | bytes:
        """after: the id, the keys, now and seal, each parent's id, then the types."""
        if not id_ok(args[0]):
            return error(E_KIND)
        call = self._keyed(transition, keys, args, extra, args[0])
        if call is None:
            return error(E_KEYS)
        fixed = len(transition.args)
        failure = self._numbers(call, transition.args, args[:fixed])
        if failure is not None:
            return failure
        if not all(id_ok(parent) for parent in args[fixed:]):
            return error(E_KIND)
        return self._typed(transition, call)

    def _validate_batch(self, transition: Transition, keys: list[bytes],
                        args: list[bytes], extra: list[bytes]) -> Call | bytes:
        """settle and extend_many: keys, fixed numbers, items, types, then every item's row."""
        if transition.name == "after":
            return self._validate_after(transition, keys, args, extra)
        if transition.name == "enqueue_many":
            return self._validate_many(transition, keys, args, extra)
        fixed = len(transition.args)
        call = self._keyed(transition, keys, args, extra, b"")
        if call is None:
            return error(E_KEYS)
        base = call.base
        failure = self._numbers(call, transition.args, args[:fixed])
        if failure is not None:
            return failure
        items = (parse_items if transition.name == "settle" else parse_pairs)(args[fixed:])
        if isinstance(items, bytes):
            return items
        call.items = items
        checked = self._typed(transition, call)
        if isinstance(checked, bytes):
            return checked
        if any(self.kind(base + b"job:" + item.id) not in (b"none", b"hash")
               or not self.release_lane_ok(base, item)
               or ((item.op in (b"done", b"retry") or self.flagged(base + b"job:" + item.id))
                   and not self.list_or_none(base + b"ended:" + item.id))
               or (item.op != b"extend"
                   and not self.lane_bookkeeping_ok(base, base + b"job:" + item.id))
               for item in items):
            return error(E_TYPE)
        return checked

    def _validate_many(self, transition: Transition, keys: list[bytes], args: list[bytes],
                       extra: list[bytes]) -> Call | bytes:
        """enqueue_many: the keys, now, each job whole, the types, then every job's row (absent
        or a hash), in list order."""
        call = self._keyed(transition, keys, args, extra, b"")
        if call is None:
            return error(E_KEYS)
        failure = self._numbers(call, transition.args, args[:1])
        if failure is not None:
            return failure
        jobs = parse_jobs(args[1:])
        if isinstance(jobs, bytes):
            return jobs
        call.jobs = jobs
        checked = self._typed(transition, call)
        if isinstance(checked, bytes):
            return checked
        if any(self.kind(call.base + b"job:" + job.id) not in (b"none", b"hash") for job in jobs):
            return error(E_TYPE)
        return checked

    def _holder_ok(self, call: Call) -> bool:
        """Step 6 of enqueue_unique (dedupe, debounce): the row of the id its dedupe key names,
        absent or a hash."""
        dedupe = call.keys[4]
        if call.args[3] == b"throttle" or self.kind(dedupe) != b"string":
            return True
        held = self.keys[dedupe].data
        return not id_ok(held) or self.kind(call.base + b"job:" + held) in (b"none", b"hash")

    def release_lane_ok(self, base: bytes, item: Item) -> bool:
        """The lane keys a release item's job would go back to are of their types (or it has
        none)."""
        row = base + b"job:" + item.id
        if item.op != b"release" or self.kind(row) != b"hash":
            return True
        lane = self.hget(row, b"lane")
        return lane is None or self.lane_keys_ok(base, lane)

    def _typed(self, transition: Transition, call: Call) -> Call | bytes:
        """Step 5: the declared keys' types, the record's, then the events key's."""
        for role, key in zip(transition.keys, call.keys, strict=True):
            if self.kind(key) not in (b"none", KEY_TYPE[role]):
                return error(E_TYPE)
        failure = self._optional_types(call) or self.record_checked(transition, call)
        if failure is not None:
            return failure
        if call.recorded is not None:
            call.numbers["last_fence"] = 0  # a call that finds its record leases nothing
        elif transition.name == "settle" and (call.numbers["count"] == 0
                                              or call.base + b"paused" in self.keys):
            call.numbers["count"] = 0  # paused: a settle claims nothing, its counter unread
            call.numbers["last_fence"] = 0  # a settle that claims nothing never reads it
        elif "fence" in transition.keys:
            counter = self.fence_counter(call.keys[transition.keys.index("fence")])
            if counter is None:
                return error(E_FENCE)
            call.numbers["last_fence"] = counter
        return call

    def _optional_types(self, call: Call) -> bytes | None:
        """The record's type, then the events key's: each absent or of its type."""
        for key, kind in ((call.record, b"string"), (call.events, b"stream")):
            if key is not None and self.kind(key) not in (b"none", kind):
                return error(E_TYPE)
        return None

    @staticmethod
    def _base(transition: Transition, keys: list[bytes], job_id: bytes) -> bytes | None:
        suffixes = [b"job:" + job_id if role == "job" else role.encode()
                    for role in transition.keys]
        first, suffix = keys[0], suffixes[0]
        if not first.endswith(suffix):
            return None
        base = first[:len(first) - len(suffix)]
        for role, key, end in zip(transition.keys[1:], keys[1:], suffixes[1:], strict=True):
            if role in NAMED_ROLES:  # base + its prefix + a name of the lane gate
                head = base + NAMED_ROLES[role].encode()
                if not key.startswith(head) or not lane_ok(key[len(head):]):
                    return None
            elif key != base + end:
                return None
        return base

    @staticmethod
    def _policy(name: str, word: bytes) -> bytes | None:
        """enqueue_after's policy: exactly fail, ignore or continue."""
        if name == "policy" and word not in (b"fail", b"ignore", b"continue"):
            return error(E_POLICY)
        return None

    @staticmethod
    def _number(call: Call, name: str, word: bytes) -> bytes | None:
        if name in SIZED:
            cap, message = SIZED[name]
            return error(message) if len(word) > cap else None
        if name == "now":
            if word == b"*":
                raise ValueError("the model runs on an explicit clock only")
            value = int_arg(word, 0)
            if value is None:
                return error(E_NOW)
        elif name in MINIMUM:
            value = int_arg(word, MINIMUM[name])
            if value is None:
                return number_error(name, MINIMUM[name])
        else:
            return None
        call.numbers[name] = value
        return None
