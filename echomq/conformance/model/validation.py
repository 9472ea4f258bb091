"""Validation in the order docs/PROTOCOL.md gives: numkeys, arity, the job id, the keys, the
numbers, a batch's items, the types, then the keys a transition derives (ended, lanes)."""

from __future__ import annotations

from collections.abc import Sequence

from echomq.conformance.model.call import Call, Item, parse_items, parse_pairs
from echomq.conformance.model.records import Records, record_name_ok, split_record
from echomq.conformance.model.replies import (
    E_FENCE,
    E_KEYS,
    E_KIND,
    E_NEGATIVE,
    E_NOTINT,
    E_NOW,
    E_PROGRESS,
    E_RESULT,
    E_TOOMANY,
    E_TYPE,
    PROGRESS_MAX,
    RESULT_MAX,
    arity_error,
    error,
    number_error,
    variadic_arity_error,
)
from echomq.conformance.model.words import MINIMUM, id_ok, int_arg, numkeys_of, raw
from echomq.conformance.resp import Arg
from echomq.engine.transitions import Transition

# The single verbs that may end a job (done keeping a result, dead, or cancelled): they check its
# ended key.
ENDING = ("ack_result", "retry", "cancel")
KEY_TYPE = {"job": b"hash", "pending": b"zset", "active": b"zset", "delayed": b"zset",
            "dead": b"zset", "ring": b"list", "wake": b"list", "fence": b"string",
            "deadconf": b"hash"}


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


class Validation(Records):
    """A call's arguments checked, before anything is written."""

    def validate(self, transition: Transition, argv: Sequence[Arg]) -> Call | bytes:
        """The parsed call, or the error reply the first failing step gives."""
        words = [raw(arg) for arg in argv]
        split = split_keys(words)
        if isinstance(split, bytes):
            return split
        keys, args = split
        keys, record = split_record(transition, keys)
        verb = transition.name.upper()
        if transition.items:
            return self._validate_batch(transition, keys, args, record)
        if len(keys) != len(transition.keys) or len(args) != len(transition.args):
            return arity_error(verb, len(transition.keys), len(transition.args))
        job_id = args[0] if transition.args[0] == "id" else b""
        if transition.args[0] == "id" and not id_ok(job_id):
            return error(E_KIND)
        base = self._base(transition, keys, job_id)
        if base is None or (record is not None and not record_name_ok(base, record)):
            return error(E_KEYS)
        call = Call(keys, args, base, record=record)
        failure = self._numbers(call, transition.args, args)
        if failure is not None:
            return failure
        checked = self._typed(transition, call)
        if transition.name in ENDING and not isinstance(checked, bytes) \
                and not self.list_or_none(base + b"ended:" + job_id):
            return error(E_TYPE)
        return checked

    def _numbers(self, call: Call, names: Sequence[str], words: Sequence[bytes]) -> bytes | None:
        """The first number error among the fixed arguments, in order; None when all parse."""
        for name, word in zip(names, words, strict=True):
            failure = self._number(call, name, word)
            if failure is not None:
                return failure
        return None

    def _validate_batch(self, transition: Transition, keys: list[bytes],
                        args: list[bytes], record: bytes | None) -> Call | bytes:
        """settle and extend_many: keys, fixed numbers, items, types, then every item's row."""
        fixed = len(transition.args)
        if len(keys) != len(transition.keys) or len(args) < fixed:
            return variadic_arity_error(transition.name.upper(), len(transition.keys), fixed)
        base = self._base(transition, keys, b"")
        if base is None or (record is not None and not record_name_ok(base, record)):
            return error(E_KEYS)
        call = Call(keys, args, base, record=record)
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
               or not self.list_or_none(self.release_lane(base, item))
               or ((item.op in (b"done", b"retry") or self.flagged(base + b"job:" + item.id))
                   and not self.list_or_none(base + b"ended:" + item.id))
               or (item.op != b"extend"
                   and not self.lane_bookkeeping_ok(base, base + b"job:" + item.id))
               for item in items):
            return error(E_TYPE)
        return checked

    def release_lane(self, base: bytes, item: Item) -> bytes:
        """The lane key a release item's job would go back to; b"" when it has none."""
        row = base + b"job:" + item.id
        if item.op != b"release" or self.kind(row) != b"hash":
            return b""
        lane = self.hget(row, b"lane")
        return b"" if lane is None else base + b"lane:" + lane

    def _typed(self, transition: Transition, call: Call) -> Call | bytes:
        for role, key in zip(transition.keys, call.keys, strict=True):
            if self.kind(key) not in (b"none", KEY_TYPE[role]):
                return error(E_TYPE)
        failure = self.record_checked(transition, call)
        if failure is not None:
            return failure
        if call.recorded is not None:
            call.numbers["last_fence"] = 0  # a call that finds its record leases nothing
        elif transition.name == "settle" and call.numbers["count"] == 0:
            call.numbers["last_fence"] = 0  # a settle that claims nothing never reads it
        elif "fence" in transition.keys:
            counter = self.fence_counter(call.keys[transition.keys.index("fence")])
            if counter is None:
                return error(E_FENCE)
            call.numbers["last_fence"] = counter
        return call

    @staticmethod
    def _base(transition: Transition, keys: list[bytes], job_id: bytes) -> bytes | None:
        suffixes = [b"job:" + job_id if role == "job" else role.encode()
                    for role in transition.keys]
        first, suffix = keys[0], suffixes[0]
        if not first.endswith(suffix):
            return None
        base = first[:len(first) - len(suffix)]
        if any(key != base + end for key, end in zip(keys[1:], suffixes[1:], strict=True)):
            return None
        return base

    @staticmethod
    def _number(call: Call, name: str, word: bytes) -> bytes | None:
        if name == "result":
            return error(E_RESULT) if len(word) > RESULT_MAX else None
        if name == "progress":
            return error(E_PROGRESS) if len(word) > PROGRESS_MAX else None
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
