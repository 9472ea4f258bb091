"""What a producer is told before anything is sent: arguments that do not fit a task's type
hints (by the worker's own conversion rules, ``msgspec.convert``), and options a call does not
take; and how a verdict prints."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import math
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from echomq import App, Job, Verdict
from echomq.consumer.directives import Done, Reject
from echomq.tasks.envelope import Serializer, call_envelope, decode_envelope, encode

WHEN = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture(params=["json", "msgpack"])
def app(conn: redis.Redis, request: pytest.FixtureRequest) -> Iterator[App]:
    app = App(conn, "images", serializer=request.param, check_policy=False)

    @app.task(name="resize")
    def resize(width: int, height: int = 0) -> str:
        return f"{width}x{height}"

    @app.task(name="stamp")
    def stamp(when: datetime.datetime, *sizes: int, label: str = "", **tags: float) -> None:
        return None

    yield app
    asyncio.run(app.aclose())


def pending(app: App) -> int:
    return int(app.queue.counts()["pending"])


@pytest.mark.parametrize(("value", "passed"), [
    ("two", "str"), (decimal.Decimal(2), "Decimal"), (WHEN, "datetime"), (2.0, "float"),
    (True, "bool"), (None, "NoneType")])
def test_a_value_that_does_not_fit_an_int_is_refused_naming_its_own_type(
        app: App, value: Any, passed: str) -> None:
    resize = app.tasks["resize"]
    said = f"resize: argument 'width' must be int, not {passed}"
    with pytest.raises(TypeError) as raised:
        resize.enqueue(value)
    assert str(raised.value) == said
    with pytest.raises(TypeError) as raised:
        resize.enqueue(1, height=value)  # by keyword: the slower path names it the same way
    assert str(raised.value) == said.replace("'width'", "'height'")
    with pytest.raises(TypeError, match=f"not {passed}$"):
        resize.enqueue_many([(1,), (value,)])  # the batch's every call, before any is sent
    with pytest.raises(TypeError, match=f"not {passed}$"):
        asyncio.run(resize.aenqueue(value))
    with pytest.raises(TypeError, match=f"not {passed}$"):
        app.periodic("* * * * *", args=[value])(resize)
    assert pending(app) == 0 and app.scheduler.entries == []


def test_variadic_and_keyword_parameters_are_checked_by_their_hints(app: App) -> None:
    stamp = app.tasks["stamp"]
    with pytest.raises(TypeError, match=r"argument 'sizes' must be tuple\[int, \.\.\.\], not "
                       r"tuple \(Expected `int`, got `str` - at `\$\[1\]`\)"):
        stamp.enqueue(WHEN, 1, "2")
    with pytest.raises(TypeError, match=r"argument 'tags' must be dict\[str, float\], not dict "
                       r"\(Expected `float`, got `str` - at `\$\[\.\.\.\]`\)"):
        stamp.enqueue(WHEN, size="big")
    with pytest.raises(TypeError, match=r"argument 'label' must be str, not int$"):
        stamp.enqueue(WHEN, label=3)
    with pytest.raises(TypeError, match="missing a required argument: 'when'"):
        stamp.enqueue()
    assert pending(app) == 0
    stamp.enqueue(WHEN, 1, 2, label="x", size=1.5, weight=2)
    assert pending(app) == 1


def stamp_at(when: datetime.datetime, size: int = 0) -> None:
    return None


def test_a_date_as_text_fits_where_the_worker_would_parse_it(conn: redis.Redis) -> None:
    """JSON sends a datetime as text, and the worker parses text into one: a call giving the
    text is taken, and sent as given. MessagePack sends datetimes as they are, and the worker
    parses no text: the same call is refused here, as the worker would refuse it."""
    text = App(conn, "text", serializer="json", check_policy=False)
    text.task(name="stamp")(stamp_at).enqueue("2030-01-01T00:00:00Z", size=2)
    job = text.queue.claim(lease_ms=30_000)
    assert job is not None
    envelope = decode_envelope(job.payload)
    assert (envelope.args, envelope.kwargs) == (["2030-01-01T00:00:00Z"], {"size": 2})
    packed = App(conn, "packed", serializer="msgpack", check_policy=False)
    with pytest.raises(TypeError, match=r"^stamp: argument 'when' must be datetime, not str$"):
        packed.task(name="stamp")(stamp_at).enqueue("2030-01-01T00:00:00Z")
    assert pending(packed) == 0


def scale(factor: float) -> float:
    return factor * 2


# Values given for a float, by a label (a NaN is not equal to itself), and those both sides take:
# a Decimal travels as its text, and JSON carries a NaN or an infinity as null.
FLOATS = {"Decimal": decimal.Decimal("1.5"), "nan": math.nan, "inf": math.inf, "float": 1.5,
          "int": 2, "bool": True, "str": "1.5", "None": None}
FITS = {"json": {"float", "int"}, "msgpack": {"float", "int", "nan", "inf"}}


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_enqueue_refuses_exactly_what_the_worker_would(conn: redis.Redis,
                                                       serializer: Serializer) -> None:
    app = App(conn, "floats", serializer=serializer, check_policy=False)
    task = app.task(name="scale")(scale)
    enqueued, run = set(), set()
    for label, value in FLOATS.items():
        with contextlib.suppress(TypeError):
            task.enqueue(value)
            enqueued.add(label)
        payload = encode(call_envelope("scale", [value], {}, {}, id_made=True, queue="floats",
                                       own_queue="floats"), serializer)
        directive = app.handler(Job("JOB:sent", payload, 1))  # as another producer wrote it
        assert isinstance(directive, Done | Reject)
        if isinstance(directive, Done):
            run.add(label)
    assert enqueued == run == FITS[serializer]
    assert pending(app) == len(FITS[serializer])


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_a_decimal_for_a_float_is_refused_at_enqueue_saying_how_it_travels(
        conn: redis.Redis, serializer: Serializer) -> None:
    app = App(conn, "floats", serializer=serializer, check_policy=False)
    task = app.task(name="scale")(scale)
    with pytest.raises(TypeError) as raised:
        task.enqueue(decimal.Decimal("1.5"))
    assert str(raised.value) == (f"scale: argument 'factor' must be float, not Decimal "
                                 f"({serializer} carries it as str)")
    with pytest.raises(TypeError, match=r"^scale: argument 'factor' must be float, not Decimal "):
        task.enqueue_many([(1.5,), (decimal.Decimal("1.5"),)])
    assert pending(app) == 0
    payload = encode(call_envelope("scale", [decimal.Decimal("1.5")], {}, {}, id_made=True,
                                   queue="floats", own_queue="floats"),
                     serializer)
    assert app.handler(Job("JOB:sent", payload, 1)) == Reject(
        "scale: argument 'factor': Expected `float`, got `str`")


def test_an_unknown_option_names_itself_and_the_options_there_are(app: App) -> None:
    resize = app.tasks["resize"]
    with pytest.raises(TypeError) as raised:
        resize.with_options(delay=5)
    said = str(raised.value)
    assert said.startswith("with_options() takes no option 'delay'; did you mean 'delay_ms'? "
                           "(its options: after, at, debounce, debounce_ms, dedupe, ")
    assert "unique_options" not in said
    with pytest.raises(TypeError, match=r"^task\(\) takes no option 'retries' \(its options: "
                       r"backoff, debounce, debounce_ms, dedupe, dedupe_ms, keep_result, "
                       r"max_attempts, name, no_retry, priority, queue, throttle, throttle_ms\)$"):
        app.task(name="other", retries=3)(lambda: None)  # type: ignore[call-overload]
    assert "other" not in app.tasks


def test_a_verdict_prints_as_the_server_words_it(app: App) -> None:
    verdict = app.tasks["resize"].enqueue(1).verdict
    assert verdict is Verdict.ENQUEUED
    assert (str(verdict), f"{verdict}", repr(verdict)) == (
        "ENQUEUED", "ENQUEUED", "<Verdict.ENQUEUED: 'ENQUEUED'>")
