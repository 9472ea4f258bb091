"""The task layer's pure parts: the envelope codec, arguments checked against type hints, the
retry policy's delays, and several hooks run as one. No server."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
from hypothesis import given, strategies as st

from echomq.engine.calls import Job
from echomq.queue.ids import JobIds
from echomq.tasks.envelope import (
    Envelope,
    PayloadError,
    Result,
    call_envelope,
    checked_serializer,
    decode_envelope,
    decode_result,
    encode,
    enqueue_time,
    is_json,
    now_ms,
)
from echomq.tasks.hooks import AllHooks, NoHooks, RunRecord, combined
from echomq.tasks.retry import Backoff, RetryAfter, RetryPolicy
from echomq.tasks.signature import ArgumentsRejected, Signature

SERIALIZERS = ["json", "msgpack"]
# A default id made at 2023-11-14T22:13:20.042Z
DEFAULT_SHAPED = JobIds(clock=lambda: 1_700_000_000_042_000_000, randbits=lambda bits: 7)()


def envelope(**overrides: Any) -> Envelope:
    fields: dict[str, Any] = {"task": "add", "args": [2, 3], "kwargs": {"c": 1},
                              "headers": {"trace": "x"}, "enqueued_ms": 1_700_000_000_000,
                              "queue": "default"}
    return Envelope(**{**fields, **overrides})


# the envelope ---------------------------------------------------------------------------------

@pytest.mark.parametrize("serializer", SERIALIZERS)
def test_an_envelope_round_trips_and_its_first_byte_names_its_serializer(serializer: Any) -> None:
    payload = encode(envelope(), serializer)
    assert decode_envelope(payload) == envelope()
    assert (payload[:1] == b"[") == (serializer == "json")
    assert is_json(payload) == (serializer == "json")


# The envelope's payload: an array, the fields at its end that hold their defaults left off.
SHORTENED = [
    ({}, b'["app.add",[1,2]]', b"\x92\xa7app.add\x92\x01\x02"),
    ({"kwargs": {"c": 1}}, b'["app.add",[1,2],{"c":1}]',
     b"\x93\xa7app.add\x92\x01\x02\x81\xa1c\x01"),
    ({"enqueued_ms": 1_700_000_000_000}, b'["app.add",[1,2],{},1700000000000]',
     b"\x94\xa7app.add\x92\x01\x02\x80\xcf\x00\x00\x01\x8b\xcf\xe5h\x00"),
    ({"queue": "other"}, b'["app.add",[1,2],{},0,"other"]',
     b"\x95\xa7app.add\x92\x01\x02\x80\x00\xa5other"),
    ({"parents": "JOB:p"}, b'["app.add",[1,2],{},0,"","JOB:p"]',
     b"\x96\xa7app.add\x92\x01\x02\x80\x00\xa0\xa5JOB:p"),
    ({"headers": {"t": "x"}}, b'["app.add",[1,2],{},0,"",null,{"t":"x"}]',
     b"\x97\xa7app.add\x92\x01\x02\x80\x00\xa0\xc0\x81\xa1t\xa1x"),
]


@pytest.mark.parametrize(("fields", "json", "msgpack"), SHORTENED)
def test_an_envelope_leaves_off_the_fields_at_its_end_that_hold_their_defaults(
        fields: dict[str, Any], json: bytes, msgpack: bytes) -> None:
    sent = Envelope(task="app.add", args=[1, 2], **fields)
    assert encode(sent, "json") == json
    assert encode(sent, "msgpack") == msgpack
    assert decode_envelope(json) == decode_envelope(msgpack) == sent


def test_fields_past_those_a_worker_knows_are_ignored() -> None:
    later = b'["app.add",[1,2],{},0,"",null,{},"a later field"]'
    assert decode_envelope(later) == Envelope(task="app.add", args=[1, 2])


# Envelopes as the earlier release wrote them (a map of every field, empty ones included), byte
# for byte: a worker of this release reads them as they were sent.
EARLIER = {
    "json": b'{"task":"add","args":[2,3],"kwargs":{"c":1},"headers":{"trace":"x"},'
            b'"enqueued_ms":1700000000000,"queue":"default"}',
    "msgpack": b"\x86\xa4task\xa3add\xa4args\x92\x02\x03\xa6kwargs\x81\xa1c\x01\xa7headers"
               b"\x81\xa5trace\xa1x\xabenqueued_ms\xcf\x00\x00\x01\x8b\xcf\xe5h\x00\xa5queue"
               b"\xa7default",
}
EARLIER_CHILD = {
    "json": b'{"task":"add","args":[2,3],"kwargs":{},"headers":{},"enqueued_ms":1700000000000,'
            b'"queue":"default","parents":"JOB:p"}',
    "msgpack": b"\x87\xa4task\xa3add\xa4args\x92\x02\x03\xa6kwargs\x80\xa7headers\x80"
               b"\xabenqueued_ms\xcf\x00\x00\x01\x8b\xcf\xe5h\x00\xa5queue\xa7default"
               b"\xa7parents\xa5JOB:p",
}


@pytest.mark.parametrize("serializer", SERIALIZERS)
def test_an_envelope_the_earlier_release_wrote_is_read_whole(serializer: str) -> None:
    assert decode_envelope(EARLIER[serializer]) == envelope()
    assert decode_envelope(EARLIER_CHILD[serializer]) == envelope(
        kwargs={}, headers={}, parents="JOB:p")
    assert is_json(EARLIER[serializer]) == (serializer == "json")


def test_a_call_envelope_holds_nothing_its_job_tells() -> None:
    sent = call_envelope("app.add", [1, 2], {}, {}, id_made=True, queue="default",
                         own_queue="default")
    assert encode(sent, "json") == b'["app.add",[1,2]]'
    assert encode(sent, "msgpack") == b"\x92\xa7app.add\x92\x01\x02"


@pytest.mark.parametrize("job_id", [
    "JOB:order-1",  # the caller's id: no time in it
    DEFAULT_SHAPED,  # a default id the caller made, maybe long before
])
def test_a_call_envelope_carries_its_enqueue_time_when_the_caller_named_its_job(
        job_id: str) -> None:
    before = now_ms()
    sent = call_envelope("app.add", [1], {}, {}, id_made=False, queue="other",
                         own_queue="default")
    assert before <= sent.enqueued_ms <= now_ms()
    assert sent.queue == "other"
    assert enqueue_time(sent, job_id) == sent.enqueued_ms


def test_the_enqueue_time_is_the_carried_one_else_the_default_ids() -> None:
    assert enqueue_time(Envelope(task="t", args=[]), DEFAULT_SHAPED) == 1_700_000_000_042
    assert enqueue_time(Envelope(task="t", args=[]), "JOB:order-1") is None
    assert enqueue_time(decode_envelope(EARLIER["json"]), DEFAULT_SHAPED) == 1_700_000_000_000


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


@given(args=st.lists(json_values, max_size=4), kwargs=st.dictionaries(st.text(), json_values,
                                                                       max_size=4),
       serializer=st.sampled_from(SERIALIZERS))
def test_any_plain_arguments_round_trip_in_either_serializer(
        args: list[Any], kwargs: dict[str, Any], serializer: Any) -> None:
    sent = envelope(args=args, kwargs=kwargs)
    assert decode_envelope(encode(sent, serializer)) == sent


@pytest.mark.parametrize("payload", [b"", b"hello", b"{not json", b"[1, 2]", b'{"task": 1}',
                                     b"\x85\xa4task", b'{"task": "t", "args": []}'])
def test_a_payload_that_is_no_envelope_is_a_clear_error(payload: bytes) -> None:
    with pytest.raises(PayloadError, match="not a task envelope"):
        decode_envelope(payload)


@pytest.mark.parametrize("serializer", SERIALIZERS)
def test_a_result_is_a_map_too(serializer: Any) -> None:
    payload = encode(Result(5), serializer)
    assert (payload[:1] == b"{") == (serializer == "json")
    assert decode_result(payload).value == 5


def test_an_argument_the_serializer_cannot_carry_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        encode(envelope(args=[object()]), "json")


def self_holding() -> list[Any]:
    held: list[Any] = []
    held.append(held)
    return held


UNENCODABLE = [("a lone surrogate", "\ud800", SERIALIZERS),
               ("a list that holds itself", self_holding(), SERIALIZERS),
               ("an integer past 64 bits", 2**70, ["msgpack"])]


@pytest.mark.parametrize(("value", "serializer"), [
    pytest.param(value, serializer, id=f"{what}-{serializer}")
    for what, value, serializers in UNENCODABLE for serializer in serializers])
def test_any_value_the_serializer_cannot_write_is_a_type_error(value: Any,
                                                               serializer: Any) -> None:
    with pytest.raises(TypeError, match=f"{serializer} cannot encode it"):
        encode(envelope(args=[value]), serializer)
    with pytest.raises(TypeError, match=f"{serializer} cannot encode it"):
        encode(Result(value), serializer)


def test_an_unknown_serializer_is_refused() -> None:
    with pytest.raises(ValueError, match="json, msgpack"):
        checked_serializer("pickle")


# arguments against type hints -----------------------------------------------------------------

@dataclasses.dataclass
class Point:
    x: int
    y: int


def typed(count: int, when: datetime.datetime, blob: bytes, point: Point,
          *rest: float, flag: bool = False, **extra: str) -> int:
    return count


def untyped(a, b=2):  # type: ignore[no-untyped-def]
    return a


@pytest.mark.parametrize("serializer", SERIALIZERS)
def test_decoded_arguments_become_their_annotated_types(serializer: Any) -> None:
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    sent = envelope(args=[3, when, b"\x00\xff", Point(1, 2), 1.5, 2],
                    kwargs={"flag": True, "note": "n"})
    got = decode_envelope(encode(sent, serializer))
    args, kwargs = Signature(typed).convert(got.args, got.kwargs, from_json=serializer == "json")
    assert args == [3, when, b"\x00\xff", Point(1, 2), 1.5, 2.0]
    assert kwargs == {"flag": True, "note": "n"}


@pytest.mark.parametrize(("args", "kwargs", "named"), [
    (["3", "2026-01-02T00:00:00Z", "", {"x": 1, "y": 2}], {}, "'count'"),
    ([3, "yesterday", "", {"x": 1, "y": 2}], {}, "'when'"),
    ([3, "2026-01-02T00:00:00Z", "", {"x": 1}], {}, "'point'"),
    ([3, "2026-01-02T00:00:00Z", "", {"x": 1, "y": 2}, "a"], {}, "'rest'"),
    ([3, "2026-01-02T00:00:00Z", "", {"x": 1, "y": 2}], {"other": 5}, "'extra'"),
    ([3], {}, "missing a required argument"),
    ([3, "2026-01-02T00:00:00Z", "", {"x": 1, "y": 2}], {"count": 1}, "multiple values"),
])
def test_arguments_that_cannot_fit_are_rejected_naming_the_parameter(
        args: list[Any], kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ArgumentsRejected, match=named):
        Signature(typed).convert(args, kwargs, from_json=True)


def test_unannotated_parameters_take_anything_but_arity_still_counts() -> None:
    signature = Signature(untyped)
    assert signature.convert([{"a": 1}], {}, from_json=True) == ([{"a": 1}], {})
    with pytest.raises(ArgumentsRejected):
        signature.convert([1, 2, 3], {}, from_json=True)


def test_bind_checks_arity_at_enqueue_without_converting() -> None:
    Signature(typed).bind(["not an int", None, None, None], {})
    with pytest.raises(TypeError):
        Signature(typed).bind([1], {"nope": 2})


def test_a_kept_result_becomes_the_return_annotation() -> None:
    def when() -> datetime.datetime:
        raise NotImplementedError

    value = msgspec.json.decode(msgspec.json.encode(datetime.datetime(2026, 1, 1)))
    assert Signature(when).converted_result(value, from_json=True) == datetime.datetime(2026, 1, 1)


# the retry policy -----------------------------------------------------------------------------

def test_the_back_off_doubles_from_its_first_delay_up_to_its_cap() -> None:
    backoff = Backoff(first_ms=100, factor=2, max_ms=1_000, jitter=0)
    assert [backoff.delay_ms(attempt) for attempt in range(1, 7)] == [
        100, 200, 400, 800, 1_000, 1_000]
    assert backoff.delay_ms(10_000) == 1_000  # no overflow far out


def test_jitter_lowers_a_delay_by_at_most_its_share() -> None:
    backoff = Backoff(first_ms=1_000, factor=2, max_ms=60_000, jitter=0.25)
    assert backoff.delay_ms(2, lambda: 0.0) == 2_000
    assert backoff.delay_ms(2, lambda: 0.999999) == 1_500
    assert backoff.delay_ms(2, lambda: 0.5) == 1_750


@given(attempt=st.integers(1, 200), draw=st.floats(0, 1, exclude_max=True),
       jitter=st.floats(0, 1))
def test_a_delay_stays_within_its_jittered_window(attempt: int, draw: float,
                                                  jitter: float) -> None:
    backoff = Backoff(first_ms=50, factor=3, max_ms=10_000, jitter=jitter)
    ceiling = min(10_000, 50 * 3 ** min(attempt - 1, 64))
    assert ceiling * (1 - jitter) - 1 <= backoff.delay_ms(attempt, lambda: draw) <= ceiling


def test_retry_after_asks_for_its_own_delay() -> None:
    policy = RetryPolicy(backoff=Backoff(first_ms=100, jitter=0))
    assert policy.delay_ms(RetryAfter(2.5), 1) == 2_500
    assert policy.delay_ms(ValueError(), 1) == 100


def test_no_retry_exceptions_and_subclasses_do_not_retry() -> None:
    policy = RetryPolicy(no_retry=(LookupError,))
    assert not policy.retries(KeyError("k"))
    assert policy.retries(ValueError())


@pytest.mark.parametrize("make", [
    lambda: Backoff(first_ms=-1), lambda: Backoff(first_ms=10, max_ms=5),
    lambda: Backoff(factor=0.5), lambda: Backoff(jitter=1.5), lambda: RetryPolicy(max_attempts=0),
    lambda: RetryAfter(-1), lambda: RetryAfter(float("nan")),
])
def test_a_policy_that_makes_no_sense_is_refused(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


# hooks ------------------------------------------------------------------------------------------

class Recording:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self.records: list[RunRecord] = []

    @contextmanager
    def enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> Iterator[None]:
        self.log.append(f"{self.name} enqueue {queue} {task}")
        headers[self.name] = "on"
        yield
        self.log.append(f"{self.name} enqueued")

    @contextmanager
    def running(self, queue: str, task: str, job: Job, headers: Mapping[str, str],
                enqueued_ms: int | None) -> Iterator[RunRecord]:
        record = RunRecord()
        self.records.append(record)
        yield record
        self.log.append(f"{self.name} ran {record.outcome} {record.error}")


def test_several_hooks_nest_in_order_and_each_sees_the_outcome() -> None:
    log: list[str] = []
    first, second = Recording("a", log), Recording("b", log)
    hooks = combined([first, second])
    headers: dict[str, str] = {}
    with hooks.enqueuing("q", "add", headers):
        log.append("send")
    assert headers == {"a": "on", "b": "on"}
    with hooks.running("q", "add", Job("JOB:1", b"", 1), headers, 0) as record:
        record.outcome, record.error = "dead", "boom"
    assert log == ["a enqueue q add", "b enqueue q add", "send", "b enqueued", "a enqueued",
                   "b ran dead boom", "a ran dead boom"]


def test_no_hooks_and_one_hook_need_no_wrapper() -> None:
    assert isinstance(combined(()), NoHooks)
    single = Recording("a", [])
    assert combined([single]) is single and combined(single) is single
    assert isinstance(combined([single, single]), AllHooks)
    with NoHooks().running("q", "t", Job("JOB:1", b"", 1), {}, 0) as record:
        assert record == RunRecord()


def test_draws_in_a_window_are_fair() -> None:
    # the default draw is random.random: many delays spread over the jitter window
    backoff = Backoff(first_ms=1_000, jitter=0.5)
    delays = {backoff.delay_ms(1) for _ in itertools.repeat(None, 200)}
    assert min(delays) >= 500 and max(delays) <= 1_000 and len(delays) > 50


def defaults(a: int, b: datetime.date = datetime.date(2026, 1, 1), c=None):  # type: ignore[no-untyped-def]
    return a, b, c


@pytest.mark.parametrize(("args", "converted"), [
    ([1], [1]),
    ([1, "2026-02-03"], [1, datetime.date(2026, 2, 3)]),
    ([1, "2026-02-03", {"any": "thing"}], [1, datetime.date(2026, 2, 3), {"any": "thing"}]),
])
def test_positional_calls_convert_in_one_step_and_leave_defaults_to_the_function(
        args: list[Any], converted: list[Any]) -> None:
    assert Signature(defaults).convert(args, {}, from_json=True) == (converted, {})


@pytest.mark.parametrize(("args", "named"), [
    (["x"], "argument 'a'"), ([1, "someday"], "argument 'b'"), ([], "missing"),
    ([1, 2, 3, 4], "too many"),
])
def test_a_positional_call_that_cannot_fit_still_names_the_parameter(args: list[Any],
                                                                      named: str) -> None:
    with pytest.raises(ArgumentsRejected, match=named):
        Signature(defaults).convert(args, {}, from_json=True)
    if named in ("missing", "too many"):
        with pytest.raises(TypeError):
            Signature(defaults).bind(args, {})
