"""The protocol's number bounds and its error table: every error reply byte for byte and the
exception each code raises in Python. Part of the protocol table (echomq.engine.transitions,
which re-exports every name here); the generator writes native/emq_errors.h from it, and
tests/test_error_table.py checks the scripts' texts and docs/PROTOCOL.md's table against it."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The most bytes a result an ack keeps may hold (EMQSIZE above it, on both executors and in the
# client before sending): a tombstone stays small enough to keep for a whole retention window.
MAX_RESULT_BYTES = 512 * 1024
# The most bytes a job's progress may hold (EMQSIZE above it, likewise): the last one reported
# is one field of the row, overwritten by the next.
MAX_PROGRESS_BYTES = 64 * 1024
# The most bytes one recorded step's output may hold, and all of a job's steps together (EMQSIZE
# above either, on both executors and in the client before sending): the steps are fields of the
# job's row, read whole once an attempt, so a row stays small enough to read in one reply.
MAX_STEP_BYTES = 256 * 1024
MAX_JOB_STEPS_BYTES = 1024 * 1024
# The largest integer argument: 15 digits. A queue's fence counter stays below it (EMQFENCE).
INT_MAX = 999_999_999_999_999
FENCE_MAX = INT_MAX - 1
# A job's priority: higher is claimed first, 0 when none is given. The pending score of a job of
# priority p admitted at t is min(t, TIME_CAP) - p * PRIORITY_BAND: each priority owns a band of
# PRIORITY_BAND scores, and times past TIME_CAP (the year 3084) are clamped inside the band.
PRIORITY_MIN, PRIORITY_MAX = -100, 100
PRIORITY_BAND = 2**45
TIME_CAP = PRIORITY_BAND - 1


@dataclass(frozen=True)
class ErrorCode:
    """An error code: the first word of an error reply, and the exception the client raises for
    it (``echomq.engine.errors.<name>``, or for a code the server itself gives, the client library's
    ``redis.exceptions.<name>``)."""

    code: str
    exception: str
    meaning: str

    @property
    def ours(self) -> bool:
        """Whether the code is echomq's own (mapped to an ``echomq.engine.errors`` class)."""
        return self.code.startswith("EMQ")


ERROR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode("EMQARITY", "ArgumentError", "wrong number of keys or arguments"),
    ErrorCode("EMQITEM", "ItemError", "an element of the list after the fixed arguments is bad"),
    ErrorCode("EMQKIND", "KindError", "a job id fails the kind gate"),
    ErrorCode("EMQLANE", "LaneError", "a group or a step's name fails the lane gate"),
    ErrorCode("EMQKEYS", "ArgumentError", "a key has the wrong suffix or another queue's base"),
    ErrorCode("EMQNUM", "ArgumentError", "a bad integer, now or knob argument"),
    ErrorCode("EMQSIZE", "ArgumentError", "a result, a progress or a step too long to keep"),
    ErrorCode("EMQFENCE", "FenceError", "the queue's fence counter cannot number another lease"),
    ErrorCode("EMQPOLICY", "ArgumentError", "a policy that is not fail, ignore or continue"),
    ErrorCode("WRONGTYPE", "ResponseError", "a key of the wrong type"),
    ErrorCode("NOPERM", "NoPermissionError", "the caller's ACL denies a derived key"),
    ErrorCode("TRYAGAIN", "TryAgainError", "a derived key's slot is moving between cluster nodes"),
    ErrorCode("ERR", "ResponseError", "a bad numkeys, refused as EVALSHA refuses it"),
    ErrorCode("EMQMODE", "ArgumentError", "enqueue_unique's mode is not one of its modes"),
)
# The type a placeholder of an error text takes in C (the scripts' format is %s or %d).
ERROR_FIELDS: dict[str, str] = {"verb": "const char *", "nkeys": "int", "nargs": "int",
                                "n": "long long", "shape": "const char *",
                                "name": "const char *", "min": "long long", "nmax": "int"}


@dataclass(frozen=True)
class ErrorText:
    """An error reply, byte for byte, without its leading ``-``: fixed, or a template whose
    ``{field}`` placeholders (``ERROR_FIELDS``) the call fills. ``executors``: which write it
    (``both``, ``scripts`` only, or ``native`` only: numkeys, which EVALSHA parses itself).
    C: ``EMQ_ERR_<NAME>`` for a fixed text, ``EMQ_FMT_<NAME>`` for a template; Lua: ``E_<NAME>``."""

    name: str
    text: str
    executors: str = "both"

    @property
    def code(self) -> str:
        return self.text.split(" ", 1)[0]

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(re.findall(r"\{(\w+)\}", self.text))

    def format(self, **fields: object) -> str:
        """The reply for these fields (a fixed text is itself)."""
        return self.text.format(**fields)

    def printf(self, c: bool = False) -> str:
        """The text as a format of C's printf (``c``: each field as its C type gives it) or of
        Lua's string.format (strings %s, integers %d)."""
        def spec(match: re.Match[str]) -> str:
            kind = ERROR_FIELDS[match[1]]
            if kind == "const char *":
                return "%s"
            return "%lld" if c and kind == "long long" else "%d"
        return re.sub(r"\{(\w+)\}", spec, self.text.replace("%", "%%"))


ERROR_TEXTS: tuple[ErrorText, ...] = (
    ErrorText("ARITY", "EMQARITY EMQ.{verb} takes {nkeys} keys and {nargs} arguments"),
    ErrorText("VARIADIC_ARITY",
              "EMQARITY EMQ.{verb} takes {nkeys} keys and at least {nargs} arguments"),
    ErrorText("OPTIONAL_ARITY",
              "EMQARITY EMQ.{verb} takes {nkeys} keys and {nargs} or {nmax} arguments"),
    ErrorText("MANY", "EMQARITY EMQ.{verb} takes at most {nmax} items"),
    ErrorText("ITEM", "EMQITEM item {n} must be {shape}"),
    ErrorText("KIND", "EMQKIND job id must be JOB:<rest> with <rest> 1 to 200 bytes of "
                      "A-Z a-z 0-9 . _ : -"),
    ErrorText("LANE", "EMQLANE lane must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -"),
    ErrorText("KEYS", "EMQKEYS keys must be one queue's keys in the documented order"),
    ErrorText("NUMBER", "EMQNUM {name} must be an integer from {min} to " + str(INT_MAX)),
    ErrorText("NOW", f"EMQNUM now must be * or an integer from 0 to {INT_MAX}"),
    ErrorText("KNOB", "EMQNUM {name} must be = (keep), - (clear) or an integer from 1 to "
                      + str(INT_MAX), "scripts"),
    ErrorText("PAUSED", "EMQNUM paused must be 1 (pause) or 0 (resume)", "scripts"),
    ErrorText("PRIORITY", f"EMQNUM priority must be an integer from {PRIORITY_MIN} to "
                          f"{PRIORITY_MAX}"),
    ErrorText("RESULT", f"EMQSIZE result must be at most {MAX_RESULT_BYTES} bytes"),
    ErrorText("PROGRESS", f"EMQSIZE progress must be at most {MAX_PROGRESS_BYTES} bytes"),
    ErrorText("STEP_NAME", "EMQLANE step must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -"),
    ErrorText("STEP_OUTPUT", f"EMQSIZE output must be at most {MAX_STEP_BYTES} bytes"),
    ErrorText("STEPS_TOTAL", f"EMQSIZE a job's steps must be at most {MAX_JOB_STEPS_BYTES} bytes "
                             "in all"),
    ErrorText("POLICY", "EMQPOLICY policy must be fail, ignore or continue"),
    ErrorText("TYPE", "WRONGTYPE Operation against a key holding the wrong kind of value"),
    ErrorText("FENCE", f"EMQFENCE the fence counter must hold an integer from 0 to {FENCE_MAX}"),
    ErrorText("PERM", "NOPERM No permissions to access a key"),
    ErrorText("MOVING", "TRYAGAIN a job's keys are moving between cluster nodes; try again"),
    ErrorText("NUMKEYS_INT", "ERR value is not an integer or out of range", "native"),
    ErrorText("NUMKEYS_NEG", "ERR Number of keys can't be negative", "native"),
    ErrorText("NUMKEYS_BIG", "ERR Number of keys can't be greater than number of args", "native"),
    ErrorText("MODE", "EMQMODE mode must be dedupe, debounce or throttle"),
)
ERRORS: dict[str, ErrorText] = {error.name: error for error in ERROR_TEXTS}
