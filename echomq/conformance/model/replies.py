"""The replies the model sends, as raw RESP: statuses, errors (the table's texts), integers,
bulk strings, arrays, the null of each protocol."""

from __future__ import annotations

from collections.abc import Sequence

from echomq.conformance.model.words import INT_MAX, dec

E_KIND = b"EMQKIND job id must be JOB:<rest> with <rest> 1 to 200 bytes of A-Z a-z 0-9 . _ : -"
E_KEYS = b"EMQKEYS keys must be one queue's keys in the documented order"
E_TYPE = b"WRONGTYPE Operation against a key holding the wrong kind of value"
E_NOW = b"EMQNUM now must be * or an integer from 0 to 999999999999999"
E_FENCE = b"EMQFENCE the fence counter must hold an integer from 0 to 999999999999998"
E_RESULT = b"EMQSIZE result must be at most 524288 bytes"
RESULT_MAX = 524288
E_PROGRESS = b"EMQSIZE progress must be at most 65536 bytes"
E_PRIORITY = b"EMQNUM priority must be an integer from -100 to 100"
E_POLICY = b"EMQPOLICY policy must be fail, ignore or continue"
PROGRESS_MAX = 65536
E_STEP_NAME = b"EMQLANE step must be 1 to 200 bytes of A-Z a-z 0-9 . _ : -"
E_STEP_OUTPUT = b"EMQSIZE output must be at most 262144 bytes"
E_STEPS_TOTAL = b"EMQSIZE a job's steps must be at most 1048576 bytes in all"
STEP_MAX, STEPS_MAX = 262_144, 1_048_576
E_NOTINT = b"ERR value is not an integer or out of range"
E_NEGATIVE = b"ERR Number of keys can't be negative"
E_TOOMANY = b"ERR Number of keys can't be greater than number of args"
E_MODE = b"EMQMODE mode must be dedupe, debounce or throttle"
UNIQUE_MODES = (b"dedupe", b"debounce", b"throttle")


def status(text: str) -> bytes:
    return b"+" + text.encode() + b"\r\n"


def error(message: bytes) -> bytes:
    return b"-" + message + b"\r\n"


def integer(value: int) -> bytes:
    return b":" + dec(value) + b"\r\n"


def bulk(value: bytes) -> bytes:
    return b"$" + dec(len(value)) + b"\r\n" + value + b"\r\n"


def null(protocol: int) -> bytes:
    return b"_\r\n" if protocol == 3 else b"$-1\r\n"


def arity_error(verb: str, nkeys: int, nargs: int) -> bytes:
    return error(f"EMQARITY EMQ.{verb} takes {nkeys} keys and {nargs} arguments".encode())


def number_error(name: str, minimum: int) -> bytes:
    return error(f"EMQNUM {name} must be an integer from {minimum} to {INT_MAX}".encode())


def variadic_arity_error(verb: str, nkeys: int, nargs: int) -> bytes:
    return error(f"EMQARITY EMQ.{verb} takes {nkeys} keys and at least {nargs} arguments".encode())


def optional_arity_error(verb: str, nkeys: int, nargs: int, nmax: int) -> bytes:
    return error(f"EMQARITY EMQ.{verb} takes {nkeys} keys and {nargs} or {nmax} arguments"
                 .encode())


def item_error(n: int, shape: str) -> bytes:
    return error(f"EMQITEM item {n} must be {shape}".encode())


def array(elements: Sequence[bytes]) -> bytes:
    return b"*" + dec(len(elements)) + b"\r\n" + b"".join(elements)
