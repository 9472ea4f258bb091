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
from hypothesis import given
from hypothesis import strategies as st

from echomq.engine.calls import Job
from echomq.tasks.envelope import (
    Envelope,
    PayloadError,
    Result,
    checked_serializer,
    decode_envelope,
    decode_result,
    encode,
)
from echomq.tasks.hooks import AllHooks, NoHooks, RunRecord, combined
from echomq.tasks.retry import Backoff, RetryAfter, RetryPolicy
from echomq.tasks.signature import ArgumentsRejected, Signature

SERIALIZERS = ["json", "msgpack"]


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
    assert (payload[:1] == b"{") == (serializer == "json")


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
