"""Workflows end to end on both wires: chains, groups and chords admitted in one transaction and
run by a real Consumer on ``app.handler``; each job waiting on the server until its parents
ended, its parents' results given first, the failure policies, cancel reaching the jobs that
wait, and results read in pages."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from echomq import (
    App,
    Cancelled,
    Consumer,
    Queue,
    RetryIn,
    TaskFailed,
    Verdict,
    aio,
    chain,
    chord,
    group,
)
from echomq.queue.graphs import GraphJob
from echomq.queue.results import RESULTS_PAGE
from echomq.tasks.envelope import decode_envelope, now_ms
from echomq.tasks.workflow import WorkflowHandle


@pytest.fixture(params=[5, 6], ids=["wire5", "wire6"])
def app(request: pytest.FixtureRequest, conn: redis.Redis) -> Iterator[App]:
    app = App(conn, "flows", wire=request.param, max_attempts=1)
    runs: list[tuple[str, tuple[Any, ...]]] = []
    app.runs = runs  # type: ignore[attr-defined]

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        runs.append(("add", (a, b)))
        return a + b

    @app.task(name="total")
    def total(values: list[Any], extra: int = 0) -> int:
        runs.append(("total", (values, extra)))
        return sum(_flat(values)) + extra

    @app.task(name="seen")
    def seen(*values: Any) -> list[Any]:
        runs.append(("seen", values))
        return list(values)

    @app.task(name="boom")
    def boom(reason: str) -> None:
        raise RuntimeError(reason)

    @app.task(name="mailer", queue="elsewhere")
    def mailer(to: str) -> str:
        return f"sent to {to}"

    yield app


def _flat(values: Any) -> Iterator[int]:
    for value in values:
        if isinstance(value, list):
            yield from _flat(value)
        elif value is not None:
            yield value


def task(app: App, name: str) -> Any:
    return app.tasks[name]


def drain(app: App) -> int:
    """Run jobs until none is pending: a drain ends when a claim finds nothing, and the claim
    that carried the last ack of a job's parents was planned before that ack moved the job to
    pending (a running worker is woken by the token the move leaves), so drain again; and a
    consumer's last outcomes go out as it closes, which may move a dependent to pending after
    its last drain, so drain with a new consumer while the server still has jobs pending."""
    handled = 0
    while True:
        consumer = Consumer(app.queue, app.handler)
        try:
            ran = consumer.drain()
            while ran:
                handled += ran
                ran = consumer.drain()
        finally:
            consumer.close()
        if not app.queue.conn.zcard(app.queue.key("pending")):
            return handled


def ran(app: App, name: str) -> list[tuple[Any, ...]]:
    return [args for task_name, args in app.runs if task_name == name]  # type: ignore[attr-defined]


def test_a_chain_gives_each_task_the_result_of_the_one_before(app: App) -> None:
    add = task(app, "add")
    handle = chain(add.s(1, 2), add.s(10), add.s(100)).enqueue()
    assert isinstance(handle, WorkflowHandle)
    assert list(handle.verdicts.values()) == [Verdict.ENQUEUED, Verdict.WAITING,
                                              Verdict.WAITING]
    assert app.queue.counts()["pending"] == 1  # only the first can run
    assert drain(app) == 3
    assert handle.result(timeout=5) == 113
    assert ran(app, "add") == [(1, 2), (3, 10), (13, 100)]


def test_a_workflows_envelopes_hold_only_what_their_jobs_do_not_tell(app: App,
                                                                    conn: redis.Redis) -> None:
    add, mailer = task(app, "add"), task(app, "mailer")
    handle = chain(add.s(1, 2), add.s(3), mailer.si("ana")).enqueue()
    first, second, third = (conn.hget(app.queue.key("job", job_id), "p")
                            for job_id in handle.ids)
    # ids made here tell the enqueue time; a queue not the task's own is named
    assert first == b'["add",[1,2]]'
    assert second == f'["add",[3],{{}},0,"","{handle.ids[0]}"]'.encode()
    assert third == b'["mailer",["ana"],{},0,"flows"]'

    before = now_ms()
    named = chain(add.s(1, 2), add.s(3)).enqueue(workflow_id="wf-1")
    assert named.ids == ["JOB:wf-1.0", "JOB:wf-1.1"]
    envelopes = [decode_envelope(conn.hget(app.queue.key("job", job_id), "p"))
                 for job_id in named.ids]
    assert all(before <= envelope.enqueued_ms <= now_ms() for envelope in envelopes)
    assert drain(app) == 5
    assert (handle.result(timeout=5), named.result(timeout=5)) == ("sent to ana", 6)


def test_a_group_runs_side_by_side_and_its_result_is_the_list(app: App) -> None:
    add = task(app, "add")
    handle = group(add.s(n, n) for n in range(5)).enqueue()
    assert handle.id is None
    assert app.queue.counts()["pending"] == 5
    drain(app)
    assert handle.result(timeout=5) == [0, 2, 4, 6, 8]


def test_a_chord_runs_its_body_once_with_every_result_in_order(app: App) -> None:
    add, total = task(app, "add"), task(app, "total")
    handle = chord([add.s(n, 1) for n in range(20)], total.s(extra=1000)).enqueue()
    assert handle.id is not None and handle.verdicts[handle.id] is Verdict.WAITING
    assert app.queue.outcome(handle.id).state == "waiting"
    drain(app)
    assert handle.result(timeout=5) == sum(range(1, 21)) + 1000
    assert ran(app, "total") == [([n + 1 for n in range(20)], 1000)]


def test_a_group_followed_by_a_task_is_a_chord_and_a_task_then_a_group_fans_out(
        app: App) -> None:
    add, seen = task(app, "add"), task(app, "seen")
    handle = chain(add.s(1, 1), group(add.s(10), add.s(20)), seen.s("last")).enqueue()
    drain(app)
    assert handle.result(timeout=5) == [[12, 22], "last"]
    assert sorted(ran(app, "add")) == [(1, 1), (2, 10), (2, 20)]


def test_workflows_nest(app: App) -> None:
    add, total = task(app, "add"), task(app, "total")
    first = chord([add.s(1, 1), add.s(2, 2)], total.s())          # 6
    second = chord([add.s(10), add.s(20)], total.s())             # (6+10)+(6+20) = 42
    handle = group(chain(first, second), chord([group(add.s(0, 1), add.s(0, 2)), add.s(0, 3)],
                                               total.s())).enqueue()
    drain(app)
    assert handle.result(timeout=5) == [42, 6]


def test_an_immutable_signature_is_not_given_its_parents_result(app: App) -> None:
    add, seen = task(app, "add"), task(app, "seen")
    handle = chain(add.s(1, 2), seen.si("alone")).enqueue()
    drain(app)
    assert handle.result(timeout=5) == ["alone"]


def test_every_job_of_a_workflow_goes_to_its_one_queue(app: App) -> None:
    mailer, seen = task(app, "mailer"), task(app, "seen")
    handle = chain(seen.si("x"), mailer.si("ops@example.com")).enqueue()
    assert handle.queue.name == "flows"
    drain(app)
    assert handle.result(timeout=5) == "sent to ops@example.com"


def test_a_dead_child_fails_the_chord_body_with_its_error(app: App) -> None:
    add, boom, total = task(app, "add"), task(app, "boom"), task(app, "total")
    handle = chord([add.s(1, 1), boom.s("disk full"), add.s(2, 2)], total.s()).enqueue()
    drain(app)
    with pytest.raises(TaskFailed, match="disk full") as failed:
        handle.result(timeout=5)
    assert failed.value.job_id == handle.id
    assert ran(app, "total") == []
    assert app.queue.outcome(handle.id).state == "dead"


def test_a_dead_parent_fails_every_job_down_the_chain(app: App) -> None:
    add, boom = task(app, "add"), task(app, "boom")
    handle = chain(boom.s("no"), add.s(1), add.s(2)).enqueue()
    drain(app)
    states = [app.queue.outcome(job).state for job in handle.ids]
    assert states == ["dead", "dead", "dead"]
    assert ran(app, "add") == []


def test_policy_ignore_runs_the_body_with_none_for_a_dead_child(app: App) -> None:
    add, boom, seen = task(app, "add"), task(app, "boom"), task(app, "seen")
    handle = chord([add.s(1, 1), boom.s("x"), add.s(2, 2)], seen.s(), policy="ignore").enqueue()
    drain(app)
    assert handle.result(timeout=5) == [[2, None, 4]]


def test_policy_continue_runs_the_body_at_once_when_a_child_dies(app: App) -> None:
    boom, seen, add = task(app, "boom"), task(app, "seen"), task(app, "add")
    handle = chord([boom.s("first").set(job_id="JOB:0-boom"),
                    add.s(5, 5).set(job_id="JOB:1-add")], seen.s(), policy="continue").enqueue()
    job = app.queue.claim(lease_ms=30_000)  # ties in pending go by id: the boom first
    assert job is not None and job.id == "JOB:0-boom"
    directive = app.handler(job)
    assert isinstance(directive, RetryIn) and directive.max_attempts == 1  # its last attempt
    assert app.queue.retry(job, error=directive.error, max_attempts=1) is Verdict.DEAD
    assert app.queue.outcome(handle.ids[-1]).state == "pending"  # at once, not waiting
    drain(app)
    assert ran(app, "seen") in ([([None, None],)], [([None, 10],)])  # run once, never again


def test_cancelling_a_child_cancels_the_jobs_waiting_on_it(app: App) -> None:
    add, total = task(app, "add"), task(app, "total")
    handle = chord([add.s(1, 1), add.s(2, 2)], total.s()).enqueue()
    assert handle.handle(handle.ids[0]).cancel() is Verdict.CANCELLED
    drain(app)
    with pytest.raises(Cancelled):
        handle.result(timeout=5)
    assert ran(app, "total") == []


def test_a_chord_of_more_children_than_a_page_gets_every_result_in_order(app: App) -> None:
    add, total = task(app, "add"), task(app, "total")
    count = RESULTS_PAGE * 2 + 37
    handle = chord([add.s(n, 0) for n in range(count)], total.s()).enqueue()
    drain(app)
    assert handle.result(timeout=30) == sum(range(count))
    [(values, _)] = ran(app, "total")
    assert values == list(range(count))


def test_a_workflow_is_admitted_from_asyncio_and_awaited(app: App) -> None:
    add = task(app, "add")

    async def produce() -> WorkflowHandle:
        return await chain(add.s(2, 3), add.s(5)).aenqueue()

    handle = asyncio.run(produce())
    drain(app)

    async def result() -> Any:
        try:
            return await handle.aresult(timeout=5)
        finally:
            await app.aclose()

    assert asyncio.run(result()) == 10


def test_a_workflow_job_id_is_its_idempotency_key(app: App) -> None:
    add = task(app, "add")
    flow = chain(add.s(1, 1).set(job_id="JOB:first"), add.s(1).set(job_id="JOB:second"))
    first = flow.enqueue()
    again = flow.enqueue()
    assert list(first.verdicts.values()) == [Verdict.ENQUEUED, Verdict.WAITING]
    assert list(again.verdicts.values()) == [Verdict.DUPLICATE, Verdict.DUPLICATE]
    assert drain(app) == 2
    assert first.result(timeout=5) == 3


def test_arguments_that_do_not_fit_are_refused_before_anything_is_sent(app: App) -> None:
    add = task(app, "add")
    with pytest.raises(TypeError):
        chain(add.s(1, 2), add.s(1, 2)).enqueue()  # the second is given a result first: 3 args
    assert app.queue.counts()["pending"] == 0


def test_a_task_with_dedupe_debounce_or_throttle_is_refused_in_a_workflow(app: App) -> None:
    """A workflow's jobs are admitted together with no mode: a task's own mode, or a call's, is
    refused when its signature is made, not dropped; the hint it gives is what goes in."""
    @app.task(name="ship", dedupe=lambda order: f"order-{order}")
    def ship(order: int) -> int:
        return order

    @app.task(name="reindex", debounce="index", debounce_ms=5_000)
    def reindex(order: int) -> int:
        return order

    add = task(app, "add")
    refused = [lambda: ship.s(7), lambda: reindex.si(7),
               lambda: add.with_options(throttle="burst").s(1), lambda: ship.s(7).set(job_id="x")]
    for make in refused:
        with pytest.raises(ValueError, match=r"no dedupe, debounce or throttle.*=None\)\.s"):
            make()
    with pytest.raises(ValueError, match=r"with_options\(debounce=None\)"):
        reindex.s(7)
    flow = chain(add.s(1, 2), ship.with_options(dedupe=None).s(),
                 reindex.with_options(debounce=None).s())
    handle = flow.enqueue()
    assert drain(app) == 3
    assert handle.result(timeout=5) == 3


def test_a_running_worker_takes_each_next_step_as_its_parent_ends(app: App) -> None:
    """A worker that runs (parks when it finds nothing) is woken by the token a job's move to
    pending leaves: a chain of five goes through with no drain and no poll."""
    add = task(app, "add")
    consumer = Consumer(app.queue, app.handler)
    worker = threading.Thread(target=consumer.run)
    worker.start()
    try:
        handle = chain(add.s(0, 1), *(add.s(n) for n in range(2, 6))).enqueue()
        assert handle.result(timeout=30) == 15
    finally:
        consumer.stop()
        worker.join(timeout=30)
        consumer.close()
    assert not worker.is_alive()


def test_the_asyncio_consumer_gives_a_body_its_parents_results(app: App) -> None:
    """On ``app.async_handler`` the parents' results are read on the App's asyncio client."""
    add, total = task(app, "add"), task(app, "total")

    @app.task(name="atotal")
    async def atotal(values: list[int]) -> int:
        return sum(values) * 2

    handle = chain(chord([add.s(n, n) for n in range(4)], total.s()),
                   chord([add.s(1), add.s(2)], atotal.s())).enqueue()
    conn = app.conn

    async def serve() -> int:
        client = aioredis.Redis(port=conn.connection_pool.connection_kwargs["port"])
        consumer = aio.Consumer(aio.Queue(client, app.queue.name, wire=app.wire),
                                app.async_handler, concurrency=4)
        handled = 0
        try:
            while ran := await asyncio.wait_for(consumer.drain(), 30):
                handled += ran
            return handled
        finally:
            await client.aclose()
            await app.aclose()

    assert asyncio.run(serve()) == 8
    assert handle.result(timeout=5) == ((12 + 1) + (12 + 2)) * 2


def test_a_server_that_lost_its_scripts_gets_the_whole_transaction_again(
        conn: redis.Redis) -> None:
    """NOSCRIPT fails only its own call inside a transaction: the scripts are loaded and the
    whole transaction is sent again, each call keeping its first good reply."""
    queue = Queue(conn, "lost-scripts", wire=5)
    assert queue.enqueue("JOB:first", b"f") is Verdict.ENQUEUED  # enqueue's script is loaded
    conn.script_flush()
    verdicts = queue.enqueue_graph([GraphJob("JOB:p", b"p"),
                                    GraphJob("JOB:c", b"c", after=("JOB:p", "JOB:first"))])
    assert verdicts == [Verdict.ENQUEUED, Verdict.WAITING]
    assert queue.outcome("JOB:c").state == "waiting"
    assert conn.hget(queue.key("job", "JOB:p"), "next") == b"JOB:c"



def served(conn: redis.Redis, flows: App, shell: str, before: Any) -> None:
    """Drain ``flows``'s queue on a consumer of ``shell`` running ``before(job)`` ahead of the
    app's handler on each job."""
    if shell == "blocking":
        consumer = Consumer(flows.queue, lambda job: (before(job), flows.handler(job))[1])
        try:
            while consumer.drain():
                pass
        finally:
            consumer.close()
        return

    async def handler(job: Any) -> Any:
        before(job)
        return await flows.async_handler(job)

    async def serve() -> None:
        client = aioredis.Redis(port=conn.connection_pool.connection_kwargs["port"])
        consumer = aio.Consumer(aio.Queue(client, flows.queue.name, wire=flows.wire), handler)
        try:
            while await asyncio.wait_for(consumer.drain(), 30):
                pass
        finally:
            await client.aclose()
            await flows.aclose()
    asyncio.run(serve())


@pytest.mark.parametrize("shell", ["blocking", "aio"])
def test_a_job_whose_parents_result_was_dropped_goes_dead_naming_it_never_retried(
        conn: redis.Redis, shell: str, app: App) -> None:
    """A parent acked on a server over its maxmemory keeps its outcome, not its result
    (``result_dropped``: docs/PROTOCOL.md "Results under memory pressure"): the job given its
    result goes dead at its first attempt, saying which parent and why, and never runs."""
    flows = App(conn, "dropped", wire=app.wire, max_attempts=3)
    runs: list[int] = []

    @flows.task(name="add")
    def add(a: int, b: int) -> int:
        runs.append(a)
        return a + b

    handle = chain(add.s(1, 2), add.s(10)).enqueue()
    parent, child = handle.ids
    row = flows.queue.key("job", parent)

    def dropping(job: Any) -> None:
        if job.id == child:  # what an ack over maxmemory leaves: the outcome, no result
            assert conn.hdel(row, "result") == 1
            conn.hset(row, "result_dropped", "memory")

    served(conn, flows, shell, dropping)
    outcome = flows.queue.outcome(child)
    assert outcome.state == "dead" and outcome.attempts == 1  # not retried: 3 were allowed
    assert outcome.error == (f"parent {parent} is done, but its result was dropped (memory): "
                             "the server was over its maxmemory when the job was acked")
    assert runs == [1]  # the child's function never ran
    with pytest.raises(TaskFailed, match="result was dropped"):
        handle.result(timeout=5)
