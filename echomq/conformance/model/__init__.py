"""A third executor, in plain Python, over a model keyspace: the oracle of the property tests
and of the conformance runner's random sequence.

``Model.call(transition, argv)`` validates ``argv`` (numkeys onwards) in the order
docs/PROTOCOL.md gives, applies the transition to its keyspace and returns the raw RESP reply the
server must send. ``Model.render()`` gives the keyspace in the shape ``normalise`` gives a
harness snapshot, so tests compare the model with both servers' databases key by key.

By concern: ``words`` (the arguments as the server reads them), ``replies`` (raw RESP and the
error texts), ``call`` (a validated call, a batch's items), ``state`` (the keyspace, the setup
commands, the readers and writers every transition shares), ``records`` (claim records),
``validation``, ``flat`` (the single verbs), ``batch`` (settle, extend_many), ``lane_slots``
(a lane group's slots and rate windows), ``movers``
(recover, promote, requeue), ``cancel`` and ``dispatch`` (the model, which runs a call).
"""

from __future__ import annotations

from echomq.conformance.model.call import (
    PAIR,
    SETTLE_ITEM,
    Call,
    Item,
    Move,
    parse_items,
    parse_pairs,
)
from echomq.conformance.model.dispatch import Model
from echomq.conformance.model.movers import LOST
from echomq.conformance.model.records import (
    optional_keys,
    parse_record,
    record_name_ok,
    split_optional,
)
from echomq.conformance.model.replies import (
    E_FENCE,
    E_KEYS,
    E_KIND,
    E_MODE,
    E_NEGATIVE,
    E_NOTINT,
    E_NOW,
    E_PRIORITY,
    E_RESULT,
    E_TOOMANY,
    E_TYPE,
    RESULT_MAX,
    arity_error,
    array,
    bulk,
    error,
    integer,
    item_error,
    null,
    number_error,
    optional_arity_error,
    status,
    variadic_arity_error,
)
from echomq.conformance.model.state import (
    LANE_BOOKKEEPING,
    PARKED_FULL,
    REOPENING,
    WAKE_CAP,
    Value,
    normalise,
    render_value,
)
from echomq.conformance.model.validation import ENDING, KEY_TYPE, split_keys
from echomq.conformance.model.words import (
    FENCE_MAX,
    INT_MAX,
    LLONG_MAX,
    MINIMUM,
    dec,
    id_ok,
    int_arg,
    int_field,
    numkeys_of,
    raw,
)

__all__ = [
    "ENDING",
    "E_FENCE",
    "E_KEYS",
    "E_KIND",
    "E_MODE",
    "E_NEGATIVE",
    "E_NOTINT",
    "E_NOW",
    "E_PRIORITY",
    "E_RESULT",
    "E_TOOMANY",
    "E_TYPE",
    "FENCE_MAX",
    "INT_MAX",
    "KEY_TYPE",
    "LANE_BOOKKEEPING",
    "LLONG_MAX",
    "LOST",
    "MINIMUM",
    "PAIR",
    "PARKED_FULL",
    "REOPENING",
    "RESULT_MAX",
    "SETTLE_ITEM",
    "WAKE_CAP",
    "Call",
    "Item",
    "Model",
    "Move",
    "Value",
    "arity_error",
    "array",
    "bulk",
    "dec",
    "error",
    "id_ok",
    "int_arg",
    "int_field",
    "integer",
    "item_error",
    "normalise",
    "null",
    "number_error",
    "numkeys_of",
    "optional_arity_error",
    "optional_keys",
    "parse_items",
    "parse_pairs",
    "parse_record",
    "raw",
    "record_name_ok",
    "render_value",
    "split_keys",
    "split_optional",
    "status",
    "variadic_arity_error",
]
