"""Claim records (docs/PROTOCOL.md, "Claim records"): the record a call declares after its keys,
its name, its value parsed, whether a call finds it, the leases it answers, and its writing."""

from __future__ import annotations

import re

from echomq.conformance.model.call import Call
from echomq.conformance.model.replies import E_TYPE, bulk, error, integer
from echomq.conformance.model.state import State, Value
from echomq.conformance.model.words import dec, id_ok, int_arg, int_field
from echomq.engine.transitions import Transition

_LANE = re.compile(rb"[A-Za-z0-9._:-]{1,200}\Z")


def split_optional(transition: Transition,
                   keys: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The call's own keys, and the keys it declares after them (its record, its events key)."""
    return keys[:len(transition.keys)], keys[len(transition.keys):]


def optional_keys(transition: Transition, base: bytes,
                  extra: list[bytes]) -> tuple[bytes | None, bytes | None] | None:
    """The keys after the call's own, in order: its claim record (a transition taking one; any
    key but the events key is taken for it), then the events key, exactly base + events. The
    record and the events key (None when not declared), or None when a key is neither."""
    events_key = base + b"events"
    rest = list(extra)
    record = events = None
    if transition.record and rest and rest[0] != events_key:
        record = rest.pop(0)
        if not record_name_ok(base, record):
            return None
    if transition.events and rest and rest[0] == events_key:
        events = rest.pop(0)
    return None if rest else (record, events)


def record_name_ok(base: bytes, key: bytes) -> bool:
    """A claim record's name: base + claim: + a claim id of the lane rule."""
    prefix = base + b"claim:"
    return key.startswith(prefix) and _LANE.match(key[len(prefix):]) is not None


def parse_record(value: bytes) -> list[tuple[bytes, int]]:
    """The '<id> <fence>' pairs of a record's value; none when it is not such a list."""
    words = value.split(b" ")
    pairs = [(words[i], int_arg(words[i + 1], 1)) for i in range(0, len(words) - 1, 2)]
    if len(words) % 2 or any(not id_ok(job_id) or fence is None for job_id, fence in pairs):
        return []
    return [(job_id, fence) for job_id, fence in pairs if fence is not None]


class Records(State):
    """A claim record's reading and writing."""

    def record_checked(self, transition: Transition, call: Call) -> bytes | None:
        """The claim record's type, then (claim, or settle claiming) whether the call finds it
        (its leases then ``call.recorded``) and the type of each recorded row: the error, or
        None."""
        if call.record is None or call.record not in self.keys:
            return None
        if self.kind(call.record) != b"string":
            return error(E_TYPE)
        if transition.name == "settle" and call.numbers["count"] == 0:
            return None
        call.recorded = parse_record(self.keys[call.record].data)
        if any(self.kind(call.base + b"job:" + job_id) not in (b"none", b"hash")
               for job_id, _fence in call.recorded):
            return error(E_TYPE)
        return None

    def held(self, call: Call, active: bytes) -> list[bytes]:
        """The recorded leases still held, each as a claim replies it."""
        jobs = []
        for job_id, fence in call.recorded or ():
            row = call.base + b"job:" + job_id
            if self.is_current(active, row, job_id, fence):
                attempt = int_field(self.hget(row, b"a"), 0)
                jobs.append(b"*4\r\n" + bulk(job_id) + bulk(self.hget(row, b"p") or b"")
                            + integer(attempt) + integer(fence))
        return jobs

    def write_record(self, call: Call, leases: list[tuple[bytes, int]]) -> None:
        """The leases just made, recorded (expiring) when the call declares a record."""
        if call.record is not None and leases:
            value = b" ".join(job_id + b" " + dec(fence) for job_id, fence in leases)
            self.keys[call.record] = Value(b"string", value, expires=True)
