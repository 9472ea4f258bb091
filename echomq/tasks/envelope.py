"""The payload of a task job and of its kept result: msgspec Structs, JSON or MessagePack.

Both are maps, so the first byte tells the serializer apart with no marker of its own: a JSON
envelope starts with ``{`` (0x7B), a MessagePack one with a map header (0x80-0x8F, 0xDE or 0xDF),
which never is ``{``. A worker therefore reads jobs from producers using either serializer.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec

Serializer = Literal["json", "msgpack"]
SERIALIZERS: tuple[Serializer, ...] = ("json", "msgpack")


class Envelope(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """One call of a task: its name, its arguments as the caller passed them, the headers hooks
    added at enqueue (tracing context, say), when it was enqueued (client clock, ms), the
    queue it was sent to (so the worker's hooks label the attempt with it), and, for a job of a
    workflow given its parents' results, where they come from (``parents``: a job id, or a list
    of such, nested as the workflow's groups are; absent otherwise, so a plain job's envelope
    is what it was)."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    headers: dict[str, str]
    enqueued_ms: int
    queue: str = ""
    parents: Any = None


class Result(msgspec.Struct):
    """A task's return value as kept with its job's tombstone: a map, so it is told apart by
    its first byte like an envelope."""

    value: Any


# What the ack of a task that keeps no result stores in its stead: no bytes, which no encoded
# Result is (each starts with a map's first byte). The ack still leaves the job's ended token.
UNKEPT_RESULT = b""


class PayloadError(ValueError):
    """A payload that is not an envelope (or a result) in either serializer."""


_JSON_ENCODER = msgspec.json.Encoder()
_MSGPACK_ENCODER = msgspec.msgpack.Encoder()
_ENVELOPE_DECODERS = (msgspec.json.Decoder(Envelope), msgspec.msgpack.Decoder(Envelope))
_RESULT_DECODERS = (msgspec.json.Decoder(Result), msgspec.msgpack.Decoder(Result))


def now_ms() -> int:
    """The client's clock in ms, as an envelope's ``enqueued_at`` is stamped."""
    return time.time_ns() // 1_000_000


def checked_serializer(name: str) -> Serializer:
    if name not in SERIALIZERS:
        raise ValueError(f"serializer must be one of {', '.join(SERIALIZERS)}, not {name!r}")
    return name


# What msgspec raises for a value it cannot write: a type it does not know (TypeError), a lone
# surrogate in a string (UnicodeEncodeError, a ValueError), a container that holds itself
# (RecursionError), an integer past 64 bits in MessagePack (OverflowError).
_CANNOT_ENCODE = (TypeError, ValueError, RecursionError, OverflowError, msgspec.EncodeError)


def encode(value: Envelope | Result, serializer: Serializer) -> bytes:
    """``value`` as payload bytes; TypeError (before anything is sent) for an argument or a
    result the serializer cannot carry, whatever the reason."""
    encoder = _JSON_ENCODER if serializer == "json" else _MSGPACK_ENCODER
    try:
        return encoder.encode(value)
    except _CANNOT_ENCODE as exc:
        raise TypeError(f"{serializer} cannot encode it: {type(exc).__name__}: {exc}") from None


def is_json(payload: bytes) -> bool:
    return payload[:1] == b"{"


def decode_envelope(payload: bytes) -> Envelope:
    """The envelope in ``payload``, whichever serializer wrote it; PayloadError otherwise."""
    envelope: Envelope = _decode(payload, _ENVELOPE_DECODERS, "a task envelope")
    return envelope


def decode_result(payload: bytes) -> Result:
    result: Result = _decode(payload, _RESULT_DECODERS, "a task result")
    return result


def _decode(payload: bytes, decoders: tuple[Any, Any], what: str) -> Any:
    decoder = decoders[0] if is_json(payload) else decoders[1]
    try:
        return decoder.decode(payload)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise PayloadError(f"the payload is not {what}: {exc}") from None
