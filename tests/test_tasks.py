"""The App against a real server: enqueue admits what the worker side decodes, checks and runs,
and each outcome becomes the directive the consumer settles the job with."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from echomq import App, ArgumentError, Backoff, Job, Queue, RetryAfter, Verdict
from echomq.consumer.directives import Done, Reject, RetryIn
from echomq.queue.ids import JobIds
from echomq.tasks.envelope import (
    UNKEPT_RESULT,
    Envelope,
    decode_result,
    encode,
)
from echomq.tasks.hooks import RunRecord
from tests.task_functions import add


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Recorder:
    """Hooks that note every enqueue and attempt, and add a header at enqueue."""

    def __init__(self) -> None:
        self.enqueued: list[tuple[str, str]] = []
        self.ran: list[tuple[str, str, str, dict[str, str], str, str | None]] = []
        self.enqueue_times: list[int | None] = []

    @contextmanager
    def enqueuing(self, queue: str, task: str, headers: dict[str, str]) -> Iterator[None]:
        headers["trace"] = f"{queue}/{task}"
        yield
        self.enqueued.append((queue, task))

    @contextmanager
    def running(self, queue: str, task: str, job: Job, headers: Mapping[str, str],
                enqueued_ms: int | None) -> Iterator[RunRecord]:
        record = RunRecord()
        self.enqueue_times.append(enqueued_ms)
        try:
            yield record
        finally:
            self.ran.append((queue, task, job.id, dict(headers), record.outcome, record.error))


@pytest.fixture
def conn(library_conn: Any) -> Any:
    """Every test here runs on a redis-py client and on a valkey-py one."""
    return library_conn


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def hooks() -> Recorder:
    return Recorder()


async def fail_async(kind: str) -> None:
    raise ValueError(f"bad {kind}")


@pytest.fixture
def app(conn: redis.Redis, wire: int, hooks: Recorder) -> App:
    app = App(conn, "default", wire=wire, hooks=hooks, max_attempts=3,
              backoff=Backoff(first_ms=100, factor=2, max_ms=10_000, jitter=0.5),
              draw=lambda: 0.5)

    app.task(name="add", keep_result=True)(add)

    @app.task(name="shift", keep_result=True)
    def shift(point: Point, when: datetime.datetime, *, by: int = 1) -> Point:
        assert isinstance(when, datetime.datetime)
        return Point(point.x + by, point.y + by)

    @app.task(name="forget", keep_result=False)
    def forget(a: int) -> int:
        return a

    @app.task
    def plain(a: int) -> int:
        return a * 2

    @app.task(name="fail", no_retry=(LookupError,))
    def fail(kind: str) -> None:
        if kind == "lookup":
            raise KeyError("no such thing")
        if kind == "later":
            raise RetryAfter(2.5)
        raise ValueError(f"bad {kind}")

    app.task(name="fail_async")(fail_async)
    @app.task(name="slow_add", keep_result=True)
    async def slow_add(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    return app


def claimed(queue: Queue) -> Job:
    job = queue.claim(lease_ms=30_000)
    assert job is not None
    return job


def run_next(app: App, queue: Queue | None = None) -> tuple[Job, Any]:
    job = claimed(queue or app.queue)
    return job, app.handler(job)


# enqueue ----------------------------------------------------------------------------------------

def test_enqueue_admits_an_envelope_naming_the_task(app: App) -> None:
    handle = app.tasks["add"].enqueue(2, b=3)
    assert handle.verdict is Verdict.ENQUEUED and handle.id.startswith("JOB:")
    job = claimed(app.queue)
    assert job.id == handle.id
    # no enqueue time (the id made here tells it), no queue (the task's own); the hook's header
    assert job.payload == b'["add",[2],{"b":3},0,"",null,{"trace":"default/add"}]'


def test_a_small_call_keeps_its_row_in_the_compact_encoding(conn: redis.Redis,
                                                            wire: int) -> None:
    app = App(conn, "default", wire=wire)
    app.task(name="add")(add)
    for serializer in ("json", "msgpack"):
        app.serializer = serializer
        handle = app.tasks["add"].enqueue(1, 2)
        row = app.queue.key("job", handle.id)
        payload = conn.hget(row, "p")
        assert payload == {"json": b'["add",[1,2]]', "msgpack": b"\x92\xa3add\x92\x01\x02"}[
            serializer]
        assert conn.object("encoding", row) in (b"listpack", "listpack")


# Envelopes as the earlier release wrote them (tests/test_tasks_codec.py has them byte for
# byte): ``add(2, 3)`` with a kwargs of its own, a header and the enqueue time in the payload.
EARLIER = {
    "json": b'{"task":"add","args":[2],"kwargs":{"b":3},"headers":{"trace":"x"},'
            b'"enqueued_ms":1700000000000,"queue":"default"}',
    "msgpack": b"\x86\xa4task\xa3add\xa4args\x91\x02\xa6kwargs\x81\xa1b\x03\xa7headers"
               b"\x81\xa5trace\xa1x\xabenqueued_ms\xcf\x00\x00\x01\x8b\xcf\xe5h\x00\xa5queue"
               b"\xa7default",
}


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_a_job_the_earlier_release_enqueued_runs(app: App, hooks: Recorder,
                                                 serializer: str) -> None:
    app.queue.enqueue("JOB:earlier", EARLIER[serializer])
    _, directive = run_next(app)
    assert isinstance(directive, Done) and directive.result is not None
    assert decode_result(directive.result).value == 5
    assert hooks.ran == [("default", "add", "JOB:earlier", {"trace": "x"}, "succeeded", None)]
    assert hooks.enqueue_times == [1_700_000_000_000]


def test_a_job_without_its_enqueue_time_takes_its_ids(app: App, hooks: Recorder) -> None:
    made = JobIds(clock=lambda: 1_700_000_000_042_000_000, randbits=lambda bits: 7)()
    app.queue.enqueue(made, b'["add",[2,3]]')
    app.queue.enqueue("JOB:order-1", b'["add",[2,3]]')
    for _ in range(2):
        _, directive = run_next(app)
        assert isinstance(directive, Done)
    assert [ran[:3] for ran in hooks.ran] == [("default", "add", made),
                                              ("default", "add", "JOB:order-1")]
    assert hooks.enqueue_times == [1_700_000_000_042, None]


def test_a_call_sent_to_another_queue_names_it(app: App, hooks: Recorder) -> None:
    handle = app.tasks["add"].with_options(queue="other").enqueue(2, 3)
    job, directive = run_next(app, app.queue_named("other"))
    assert isinstance(directive, Done)
    assert job.payload == b'["add",[2,3],{},0,"other",null,{"trace":"other/add"}]'
    assert hooks.ran == [("other", "add", handle.id, {"trace": "other/add"}, "succeeded", None)]


def test_a_job_id_makes_enqueue_idempotent(app: App) -> None:
    add = app.tasks["add"].with_options(job_id="JOB:order-1")
    assert add.enqueue(1, 2).verdict is Verdict.ENQUEUED
    assert add.enqueue(1, 2).verdict is Verdict.DUPLICATE
    assert app.queue.counts()["pending"] == 1


@pytest.mark.parametrize(("args", "kwargs"), [((1,), {}), ((1, 2, 3), {}), ((1,), {"c": 2})])
def test_arguments_that_do_not_fit_the_signature_are_refused_before_sending(
        app: App, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        app.tasks["add"].enqueue(*args, **kwargs)
    assert app.queue.counts()["pending"] == 0


def test_an_argument_the_serializer_cannot_carry_is_refused_before_sending(app: App) -> None:
    with pytest.raises(TypeError):
        app.tasks["forget"].enqueue(object())
    assert app.queue.counts()["pending"] == 0


@pytest.mark.parametrize("argument", ["\ud800", [[], 2**70]], ids=["surrogate", "huge int"])
def test_an_argument_msgpack_cannot_write_is_a_type_error_before_sending(
        conn: redis.Redis, wire: int, argument: Any) -> None:
    packed = App(conn, "default", wire=wire, serializer="msgpack")
    forget = packed.task(name="forget")(lambda a: a)
    with pytest.raises(TypeError, match="msgpack cannot encode it"):
        forget.enqueue(argument)
    assert packed.queue.counts()["pending"] == 0


def test_options_pick_the_queue_and_are_kept_apart_from_arguments(app: App) -> None:
    handle = app.tasks["add"].with_options(queue="high").enqueue(1, 2)
    assert handle.queue is app.queues["high"] and app.queue.counts()["pending"] == 0
    _, directive = run_next(app, app.queues["high"])
    assert decode_result(directive.result).value == 3


def test_a_lane_option_enqueues_into_the_lane(conn: redis.Redis, hooks: Recorder) -> None:
    app = App(conn, wire=5)

    app.task(name="add")(add).with_options(lane="tenant-a").enqueue(1, 2)
    job = app.queue.claim_lane(lease_ms=30_000)
    assert job is not None and job.lane == "tenant-a"
    directive = app.handler(job)
    assert isinstance(directive, Done) and decode_result(directive.result).value == 3


def test_a_priority_goes_with_each_job_of_the_task(app: App,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``@app.task(priority=)`` is the default of the task's jobs, ``with_options(priority=)``
    one job's; each reaches ``Queue.enqueue``."""
    sent: list[int] = []
    enqueue = app.queue.enqueue

    def spy(*args: Any, priority: int = 0, **kwargs: Any) -> Verdict:
        sent.append(priority)
        return enqueue(*args, priority=priority, **kwargs)

    monkeypatch.setattr(app.queue, "enqueue", spy)
    urgent = app.task(name="urgent", priority=7)(add)
    urgent.enqueue(1, 2)
    urgent.with_options(job_id="JOB:u1").enqueue(1, 2)
    urgent.with_options(priority=0).enqueue(1, 2)
    app.tasks["add"].with_options(priority=-3).enqueue(1, 2)
    app.tasks["add"].enqueue(1, 2)
    assert sent == [7, 7, 0, -3, 0]


def test_a_higher_priority_task_runs_first(app: App) -> None:
    app.tasks["add"].enqueue(1, 1)
    urgent = app.tasks["add"].with_options(priority=10).enqueue(2, 2)
    assert claimed(app.queue).id == urgent.id


@pytest.mark.parametrize("bad", [101, -101, True, 2.5])
def test_a_bad_priority_is_refused_when_it_is_given(app: App, bad: Any) -> None:
    with pytest.raises(ArgumentError, match="priority must be an integer from -100 to 100"):
        app.tasks["add"].with_options(priority=bad)
    with pytest.raises(ArgumentError, match="priority must be an integer from -100 to 100"):
        app.task(name="never", priority=bad)(add)
    assert "never" not in app.tasks


def test_at_needs_an_aware_time_and_excludes_a_delay(app: App) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        app.tasks["add"].with_options(at=datetime.datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="not both"):
        app.tasks["add"].with_options(delay_ms=5, at=datetime.datetime.now(datetime.UTC))


def test_a_task_name_is_registered_once(app: App) -> None:
    with pytest.raises(ValueError, match="already registered"):
        app.task(name="add")(lambda: None)


def test_a_task_called_directly_runs_here(app: App) -> None:
    assert app.tasks["add"](2, 3) == 5
    assert app.queue.counts()["pending"] == 0


# the worker side ---------------------------------------------------------------------------------

def test_a_task_that_keeps_its_result_is_done_with_it(app: App) -> None:
    app.tasks["add"].enqueue(2, 3)
    _, directive = run_next(app)
    assert isinstance(directive, Done) and decode_result(directive.result).value == 5


def test_a_task_keeps_its_result_unless_it_opts_out(app: App) -> None:
    plain = next(task for task in app.tasks.values() if task.name.endswith(".plain"))
    plain.enqueue(4)
    _, directive = run_next(app)
    assert isinstance(directive, Done) and decode_result(directive.result).value == 8


def test_a_task_that_does_not_keep_its_result_is_done_with_the_empty_marker(app: App) -> None:
    app.tasks["forget"].enqueue(2)
    assert run_next(app)[1] == Done(UNKEPT_RESULT) == Done(b"")
    app.tasks["forget"].enqueue(3)
    assert asyncio.run(app.async_handler(claimed(app.queue))) == Done(b"")


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_arguments_arrive_as_their_annotated_types(conn: redis.Redis, app: App,
                                                   serializer: str) -> None:
    producer = App(conn, wire=app.wire, serializer=serializer)
    producer.task(name="shift")(app.tasks["shift"].function)
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    producer.tasks["shift"].enqueue(Point(1, 2), when, by=10)
    _, directive = run_next(app)
    assert decode_result(directive.result).value == {"x": 11, "y": 12}


def test_arguments_that_cannot_fit_go_dead_at_once_naming_the_parameter(
        app: App, hooks: Recorder) -> None:
    # A job another producer wrote (enqueue itself refuses these arguments, tests/
    # test_enqueue_checks.py): the worker checks them again as it converts them.
    app.queue.enqueue("JOB:typo", encode(Envelope(task="add", args=["two", 3], queue="default"),
                                         "json"))
    _, directive = run_next(app)
    assert isinstance(directive, Reject)
    assert directive.error == "add: argument 'a': Expected `int`, got `str`"
    assert hooks.ran[-1][2] == "JOB:typo" and hooks.ran[-1][4] == "dead"


@pytest.mark.parametrize(("payload", "said"), [
    (b"plain bytes", "not a task envelope"),
    (encode(Envelope(task="nope", args=[], queue="default"), "json"), "no task named 'nope'"),
])
def test_a_job_that_is_no_call_of_a_known_task_is_rejected(app: App, hooks: Recorder,
                                                           payload: bytes, said: str) -> None:
    app.queue.enqueue("JOB:stray", payload)
    _, directive = run_next(app)
    assert isinstance(directive, Reject) and said in directive.error
    queue = "<unknown>" if payload == b"plain bytes" else "default"  # the envelope names it
    assert hooks.ran == [(queue, "<unknown>", "JOB:stray", {}, "dead", directive.error)]


def test_an_error_retries_after_the_back_off_with_its_traceback(app: App,
                                                                 hooks: Recorder) -> None:
    app.tasks["fail"].enqueue("input")
    _, directive = run_next(app)
    assert directive == RetryIn(75, directive.error, 3)  # 100 ms, less half its jitter share
    head, trace = directive.error.split("\n", 1)
    assert head == "ValueError: bad input" and "raise ValueError" in trace
    assert trace.splitlines()[0].endswith(", in fail")  # from the task's own frame on
    assert hooks.ran[-1][4:] == ("retried", directive.error)


@pytest.mark.parametrize("handler", ["handler", "async_handler"])
@pytest.mark.parametrize("task", ["fail", "fail_async"])
def test_the_stored_traceback_starts_at_the_tasks_own_frame(app: App, handler: str,
                                                            task: str) -> None:
    """Whether the task is plain or async, run by the blocking handler or the asyncio one (in
    a thread, on an event loop): no frame of the worker's comes before the task's."""
    app.tasks[task].enqueue("input")
    job = claimed(app.queue)
    run = getattr(app, handler)
    directive = run(job) if handler == "handler" else asyncio.run(run(job))
    head, first, *_ = directive.error.splitlines()
    assert head == "ValueError: bad input"
    assert first.startswith(f'  File "{__file__}"') and first.endswith(f", in {task}")


def test_the_back_off_grows_with_each_attempt_and_the_last_is_dead(app: App,
                                                                   hooks: Recorder) -> None:
    task = app.tasks["fail"]
    delays = []
    for attempt in (1, 2, 3):
        directive = task.failed(ValueError("x"), attempt)
        assert isinstance(directive, RetryIn) and directive.max_attempts == 3
        delays.append(directive.delay_ms)
    assert delays == [75, 150, 300]
    app.tasks["fail"].enqueue("input")
    job = claimed(app.queue)
    app.handler(Job(job.id, job.payload, 3, job.lane, job.fence))
    assert hooks.ran[-1][4] == "dead"


def test_retry_after_asks_for_its_own_delay(app: App) -> None:
    app.tasks["fail"].enqueue("later")
    _, directive = run_next(app)
    assert isinstance(directive, RetryIn) and directive.delay_ms == 2_500
    assert directive.error.startswith("RetryAfter: retry asked for in 2.5 s")


def test_an_error_the_task_says_never_to_retry_goes_dead(app: App) -> None:
    app.tasks["fail"].enqueue("lookup")
    _, directive = run_next(app)
    assert isinstance(directive, Reject)
    assert directive.error.startswith("KeyError: 'no such thing'")


def test_a_result_that_cannot_be_kept_is_rejected(app: App) -> None:
    @app.task(name="opaque", keep_result=True)
    def opaque() -> object:
        return object()

    opaque.enqueue()
    _, directive = run_next(app)
    assert isinstance(directive, Reject) and "cannot be kept" in directive.error


def test_an_async_task_runs_to_the_end_under_the_plain_handler(app: App) -> None:
    app.tasks["slow_add"].enqueue(4, 5)
    app.tasks["slow_add"].enqueue(6, 7)
    results = [decode_result(run_next(app)[1].result).value for _ in range(2)]
    assert results == [9, 13]


def test_the_async_handler_awaits_async_tasks_and_threads_plain_ones(app: App) -> None:
    app.tasks["slow_add"].enqueue(4, 5)
    app.tasks["add"].enqueue(1, 1)
    app.tasks["fail"].enqueue("lookup")

    async def run_all() -> list[Any]:
        jobs = [claimed(app.queue) for _ in range(3)]
        return list(await asyncio.gather(*(app.async_handler(job) for job in jobs)))

    done_async, done_plain, rejected = asyncio.run(run_all())
    assert decode_result(done_async.result).value == 9
    assert decode_result(done_plain.result).value == 2
    assert isinstance(rejected, Reject)


def test_headers_hooks_add_at_enqueue_reach_the_attempt(app: App, hooks: Recorder) -> None:
    handle = app.tasks["add"].with_options(queue="high").enqueue(1, 2)
    run_next(app, app.queues["high"])
    assert hooks.enqueued == [("high", "add")]
    assert hooks.ran == [("high", "add", handle.id, {"trace": "high/add"}, "succeeded", None)]


def test_a_stopping_exception_is_recorded_as_retried_and_propagates(app: App,
                                                                    hooks: Recorder) -> None:
    @app.task(name="interrupted")
    def interrupted() -> None:
        raise KeyboardInterrupt

    interrupted.enqueue()
    job = claimed(app.queue)
    with pytest.raises(KeyboardInterrupt):
        app.handler(job)
    assert hooks.ran[-1][4] == "retried"
    assert hooks.ran[-1][5] is not None and hooks.ran[-1][5].startswith("KeyboardInterrupt")


def test_a_task_max_attempts_is_its_own_and_must_be_positive(app: App) -> None:
    assert app.task(name="once", max_attempts=1)(lambda: None).policy.max_attempts == 1
    assert app.tasks["add"].policy.max_attempts == 3  # the app's
    with pytest.raises(ValueError, match="max_attempts"):
        app.task(name="never", max_attempts=0)(lambda: None)
