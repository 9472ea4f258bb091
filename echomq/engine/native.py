"""The native side seen from Python: the trafikey module's path, and the protocol's pure C core
(id gate, integer rule) bound with cffi, so the client refuses what the server would refuse."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from echomq._core import ffi, lib
from echomq.engine.errors import ArgumentError, KindError, LaneError
from echomq.engine.transitions import ERRORS, INT_MAX

KIND_ERROR = ERRORS["KIND"].text
LANE_ERROR = ERRORS["LANE"].text
STEP_NAME_ERROR = ERRORS["STEP_NAME"].text


def module_path() -> str:
    """The path of trafikey.so: in a source checkout the build in native/ (the freshest one, as
    `make -C native` leaves it), else the copy built into the installed package."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / "native" / "trafikey.so", package / "trafikey.so"):
        if candidate.is_file():
            return os.fspath(candidate)
    raise FileNotFoundError(
        "trafikey.so is not built: run `pip install .` (or `make -C native`) with a C compiler"
    )


# The kind gate itself, for a loop over many ids (``echomq.engine.produce``): (bytes, length).
id_gate = lib.emq_id_ok


def id_ok(job_id: str | bytes) -> bool:
    """The kind gate: ``JOB:<rest>``, rest 1-200 bytes of ``[A-Za-z0-9._:-]``."""
    raw = job_id.encode() if isinstance(job_id, str) else job_id
    return bool(lib.emq_id_ok(raw, len(raw)))


def checked_id(job_id: str) -> str:
    """``job_id`` if it passes the kind gate; KindError with the server's words otherwise."""
    if not id_ok(job_id):
        raise KindError(KIND_ERROR)
    return job_id


def checked_lane(group: str) -> str:
    """``group`` if it is a lane name (1-200 bytes of ``[A-Za-z0-9._:-]``); LaneError if not."""
    raw = group.encode()
    if not lib.emq_lane_ok(raw, len(raw)):
        raise LaneError(LANE_ERROR)
    return group


def checked_step_name(name: str) -> str:
    """``name`` if it may name a durable step (the lane rule); LaneError with the server's
    words if not, before anything is sent."""
    raw = name.encode() if isinstance(name, str) else b""
    if not isinstance(name, str) or not lib.emq_lane_ok(raw, len(raw)):
        raise LaneError(STEP_NAME_ERROR)
    return name


def checked_claim_id(claim_id: str) -> str:
    """``claim_id`` if it may name a claim record (the lane rule: 1-200 bytes of
    ``[A-Za-z0-9._:-]``); ArgumentError if not, before anything is sent."""
    raw = claim_id.encode() if isinstance(claim_id, str) else b""
    if not raw or not lib.emq_lane_ok(raw, len(raw)):
        raise ArgumentError("claim_id must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -")
    return claim_id


def checked_int(name: str, value: int, minimum: int) -> str:
    """``value`` as the decimal argument the protocol takes; ArgumentError if out of range.

    A plain int from ``minimum`` to INT_MAX is its own decimal, which the C rule always accepts:
    it is returned without the call into C (this runs for every item of every batch)."""
    if type(value) is int and minimum <= value <= INT_MAX and minimum >= 0:
        return str(value)
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else ""
    raw = text.encode()
    out = ffi.new("long long *")
    if not lib.emq_parse_int(raw, len(raw), minimum, out):
        raise ArgumentError(ERRORS["NUMBER"].format(name=name, min=minimum))
    return text


def checked_priority(value: int) -> str:
    """``value`` as the priority argument the protocol takes (an integer from -100 to 100);
    ArgumentError with the server's words otherwise, before anything is sent."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else ""
    raw = text.encode()
    out = ffi.new("long long *")
    if not lib.emq_parse_priority(raw, len(raw), out):
        raise ArgumentError(ERRORS["PRIORITY"].text)
    return text


# The clock of every transition sent without a ``now`` of its own: None for the server's (``*``).
# The pytest plugin ``echomq.testing`` sets a test's clock here for the length of the test.
_clock: Callable[[], int] | None = None


def use_clock(clock: Callable[[], int] | None) -> Callable[[], int] | None:
    """From now on, read ``clock()`` (ms) for every transition this process sends without a
    ``now`` of its own (None: the server's clock again); the clock it replaces."""
    global _clock
    replaced, _clock = _clock, clock
    return replaced


def checked_now(now: int | None) -> str:
    """``*`` (the server's clock) for None, else ``now`` as a checked millisecond timestamp;
    None reads the clock ``use_clock`` set, if any, instead of the server's."""
    if now is None:
        if _clock is None:
            return "*"
        now = _clock()
    try:
        return checked_int("now", now, 0)
    except ArgumentError:
        raise ArgumentError(ERRORS["NOW"].text) from None
