"""The payload of a task job and of its kept result: msgspec Structs, JSON or MessagePack.

An envelope is an array, ``[task, args, kwargs, enqueued_ms, queue, parents, headers]``, each
field after ``args`` left off when it and every field after it hold their defaults (nothing,
0 or ""), so a small call stays small: ``add(1, 2)`` is ``["app.add",[1,2]]``. A job's row
holds the payload next to its id and its enqueue time, and a row whose values are all at most
64 bytes keeps the server's compact encoding of a hash (``hash-max-listpack-value``): about
half the memory of a row past it.

The earlier release wrote the envelope as a map of the same names; a worker reads that form
too. A result is a map. So the first byte tells everything apart with no marker of its own:
JSON starts an envelope with ``[`` and the earlier envelope and a result with ``{``;
MessagePack starts an array with 0x90-0x9F, 0xDC or 0xDD and a map with 0x80-0x8F, 0xDE or
0xDF, none of them ``[`` or ``{``. A worker therefore reads jobs from producers using either
serializer, and either form.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec

from echomq.queue.ids import created_ms

Serializer = Literal["json", "msgpack"]
SERIALIZERS: tuple[Serializer, ...] = ("json", "msgpack")


class Envelope(msgspec.Struct, array_like=True, kw_only=True, forbid_unknown_fields=False):
    """One call of a task: its name, its arguments as the caller passed them, when it was
    enqueued (client clock, ms; 0: its job's id tells, see ``enqueue_time``), the queue it was
    sent to (""; the task's own queue, where the worker looks when it is not named), for a job
    of a workflow given its parents' results where they come from (``parents``: a job id, or
    a list of such, nested as the workflow's groups are; None otherwise), and the headers hooks
    added at enqueue (a tracing context, say). Fields are keywords only: the order is the
    payload's, not a call's. A later field a release adds goes last, and a worker ignores
    fields past those it knows."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any] = {}
    enqueued_ms: int = 0
    queue: str = ""
    parents: Any = None
    headers: dict[str, str] = {}


class EarlierEnvelope(msgspec.Struct, forbid_unknown_fields=False):
    """The envelope as the earlier release wrote it, and still reads it: a map of the same
    names, every field but ``queue`` and ``parents`` present (empty ones too)."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    headers: dict[str, str]
    enqueued_ms: int
    queue: str = ""
    parents: Any = None

    def upgraded(self) -> Envelope:
        return Envelope(task=self.task, args=self.args, kwargs=self.kwargs,
                        enqueued_ms=self.enqueued_ms, queue=self.queue, parents=self.parents,
                        headers=self.headers)


# Each field's default, in payload order: a payload leaves off the fields at its end that hold
# theirs, down to ``task`` and ``args``, which it always holds.
_DEFAULTS: tuple[Any, ...] = (None, None, {}, 0, "", None, {})
_REQUIRED = 2


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
_UNTYPED_DECODERS: dict[str, msgspec.json.Decoder[Any] | msgspec.msgpack.Decoder[Any]] = {
    "json": msgspec.json.Decoder(), "msgpack": msgspec.msgpack.Decoder()}
_ENVELOPE_DECODERS = (msgspec.json.Decoder(Envelope), msgspec.msgpack.Decoder(Envelope))
_EARLIER_DECODERS = (msgspec.json.Decoder(EarlierEnvelope),
                     msgspec.msgpack.Decoder(EarlierEnvelope))
_RESULT_DECODERS = (msgspec.json.Decoder(Result), msgspec.msgpack.Decoder(Result))
# The first bytes of an array: JSON's, then MessagePack's (fixarray, array 16, array 32).
_ARRAY_STARTS = frozenset((0x5B, *range(0x90, 0xA0), 0xDC, 0xDD))


def now_ms() -> int:
    """The client's clock in ms, as an envelope's ``enqueued_ms`` is stamped."""
    return time.time_ns() // 1_000_000


def call_envelope(task: str, args: list[Any], kwargs: dict[str, Any], headers: dict[str, str],
                  *, id_made: bool, queue: str, own_queue: str, parents: Any = None) -> Envelope:
    """The envelope of one call of ``task`` sent to ``queue``, holding nothing its job already
    tells: no enqueue time when the enqueue made the job's id itself with ``new_job_id``
    (``id_made``), whose time is then the enqueue's; no queue when it is the task's own
    (``own_queue``)."""
    stamped = 0 if id_made else now_ms()
    return Envelope(task=task, args=args, kwargs=kwargs, enqueued_ms=stamped,
                    queue="" if queue == own_queue else queue, parents=parents,
                    headers=headers)


def id_time(job_id: str) -> int | None:
    """The time (ms) a default job id was made; None for any other id."""
    try:
        return created_ms(job_id)
    except ValueError:
        return None


def enqueue_time(envelope: Envelope, job_id: str) -> int | None:
    """When ``envelope``'s job was enqueued (client clock, ms): the time it carries, else its
    default id's; None when neither tells (a job id of the caller's and no time carried)."""
    return envelope.enqueued_ms or id_time(job_id)


def checked_serializer(name: str) -> Serializer:
    if name not in SERIALIZERS:
        raise ValueError(f"serializer must be one of {', '.join(SERIALIZERS)}, not {name!r}")
    return name


# What msgspec raises for a value it cannot write: a type it does not know (TypeError), a lone
# surrogate in a string (UnicodeEncodeError, a ValueError), a container that holds itself
# (RecursionError), an integer past 64 bits in MessagePack (OverflowError).
_CANNOT_ENCODE = (TypeError, ValueError, RecursionError, OverflowError, msgspec.EncodeError)


def encode(value: Envelope | Result, serializer: Serializer) -> bytes:
    """``value`` as payload bytes (an envelope without its trailing defaults); TypeError
    (before anything is sent) for an argument or a result the serializer cannot carry,
    whatever the reason."""
    return _written(_shortened(value) if isinstance(value, Envelope) else value, serializer)


def carried(value: Any, serializer: Serializer) -> Any:
    """``value`` as a worker reads it from a payload ``serializer`` wrote, before it converts
    it to a type hint: a ``Decimal`` as its text, a tuple as a list, a Struct as a map, and in
    JSON a ``datetime`` or bytes as text and a NaN as null. TypeError as ``encode``'s."""
    return _UNTYPED_DECODERS[serializer].decode(_written(value, serializer))


def _written(value: Any, serializer: Serializer) -> bytes:
    encoder = _JSON_ENCODER if serializer == "json" else _MSGPACK_ENCODER
    try:
        return encoder.encode(value)
    except _CANNOT_ENCODE as exc:
        raise TypeError(f"{serializer} cannot encode it: {type(exc).__name__}: {exc}") from None


def _shortened(envelope: Envelope) -> list[Any]:
    """``envelope``'s fields in payload order, those at the end that hold their defaults left
    off."""
    fields = list(msgspec.structs.astuple(envelope))
    while len(fields) > _REQUIRED and fields[-1] == _DEFAULTS[len(fields) - 1]:
        fields.pop()
    return fields


def is_json(payload: bytes) -> bool:
    return payload[:1] in (b"[", b"{")


def decode_envelope(payload: bytes) -> Envelope:
    """The envelope in ``payload``, whichever serializer wrote it, in this release's form or
    the earlier one's; PayloadError otherwise."""
    if payload[:1] and payload[0] in _ARRAY_STARTS:
        envelope: Envelope = _decode(payload, _ENVELOPE_DECODERS, "a task envelope")
        return envelope
    earlier: EarlierEnvelope = _decode(payload, _EARLIER_DECODERS, "a task envelope")
    return earlier.upgraded()


def decode_result(payload: bytes) -> Result:
    result: Result = _decode(payload, _RESULT_DECODERS, "a task result")
    return result


def _decode(payload: bytes, decoders: tuple[Any, Any], what: str) -> Any:
    decoder = decoders[0] if is_json(payload) else decoders[1]
    try:
        return decoder.decode(payload)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise PayloadError(f"the payload is not {what}: {exc}") from None
