"""The pytest plugin ``echomq.testing``: a user's project gets its fixtures by installing echomq
(a separate project, run in a subprocess, as a user runs it), and what each piece promises — the
test's clock in every transition, the run until idle, an App bound to the test's server and back.

The suite loads the plugin too (its entry point), so the tests below use its fixtures as a
user's tests do."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from echomq import App, Queue
from echomq.engine.native import checked_now
from echomq.tasks.retry import Backoff
from echomq.testing import Clock, DeadJobs, Worker, bound

pytest_plugins = ["pytester"]

SHOP = '''
import redis
import echomq

app = echomq.App(redis.Redis.from_url("redis://localhost:6379"))
seen = []


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(max_attempts=3)
def flaky(failures: int) -> str:
    if len(seen) < failures:
        seen.append("failed")
        raise ConnectionError("mail server down")
    return "sent"


@app.task(max_attempts=1)
def broken() -> None:
    raise ValueError("no such customer")


@app.periodic("0 * * * *")
def hourly() -> None:
    seen.append("hourly")
'''

TESTS = '''
import pytest
import shop
from echomq.testing import DeadJobs


def test_a_job_runs_and_keeps_its_result(echomq_worker):
    handle = shop.add.enqueue(2, 3)
    assert [ran.outcome for ran in echomq_worker.run_until_idle()] == ["done"]
    assert handle.result(timeout=1) == 5


def test_a_delayed_job_waits_for_the_clock(echomq_worker, echomq_clock):
    handle = shop.add.with_options(delay_ms=60_000).enqueue(1, 1)
    assert echomq_worker.run_until_idle() == []
    echomq_clock.advance(60)
    assert [ran.task for ran in echomq_worker.run_until_idle()] == ["shop.add"]
    assert handle.result(timeout=1) == 2


def test_retries_come_due_with_the_clock(echomq_worker, echomq_clock):
    shop.seen.clear()
    handle = shop.flaky.enqueue(2)
    outcomes = []
    for _ in range(3):
        outcomes += [ran.outcome for ran in echomq_worker.run_until_idle()]
        echomq_clock.advance(60)
    assert outcomes == ["retrying", "retrying", "done"]
    assert handle.result(timeout=1) == "sent"


def test_a_dead_job_is_raised(echomq_worker):
    shop.broken.enqueue()
    with pytest.raises(DeadJobs, match="no such customer"):
        echomq_worker.run_until_idle()


def test_a_cron_tick_comes_with_the_clock(echomq_worker, echomq_clock):
    shop.seen.clear()
    echomq_clock.advance(3600)
    assert [ran.task for ran in echomq_worker.run_until_idle()] == ["shop.hourly"]
    assert shop.seen == ["hourly"]


def test_each_test_starts_empty(echomq_app, echomq_conn):
    assert echomq_conn.dbsize() == 0
    assert echomq_app.conn is echomq_conn


def test_a_dead_job_fails_the_test_with_its_error(echomq_worker):
    shop.broken.enqueue()
    echomq_worker.run_until_idle()
'''


def test_a_users_project_runs_its_tasks_with_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(shop=SHOP, test_shop=TESTS)
    pytester.makeini("[pytest]\nechomq_app = shop:app\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=6, failed=1)
    result.stdout.fnmatch_lines(["*DeadJobs: 1 job(s) ended dead:*",
                                 "*- JOB:* (shop.broken, attempt 1):*",
                                 "*ValueError: no such customer*"])


def test_without_a_valkey_server_the_tests_skip_saying_why(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    missing = pytester.path / "no-such-valkey-server"
    monkeypatch.setenv("ECHOMQ_VALKEY_SERVER", str(missing))
    pytester.makepyfile(test_it="def test_it(echomq_worker):\n    raise AssertionError\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                           "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"*echomq.testing needs a valkey-server:*{missing}*"])


def test_the_clock_stamps_every_transition_sent_without_a_now(echomq_conn: Any,
                                                              echomq_clock: Clock) -> None:
    queue = Queue(echomq_conn, "q")
    queue.enqueue("JOB:later", b"x", delay_ms=60_000)
    assert echomq_conn.zscore("emq:{q}:delayed", "JOB:later") == echomq_clock.ms + 60_000
    echomq_clock.advance(59.999)
    assert queue.promote() == 0
    echomq_clock.advance(0.001)
    assert queue.promote() == 1
    job = queue.claim(lease_ms=30_000)
    assert job is not None and job.id == "JOB:later"
    assert echomq_conn.zscore("emq:{q}:active", "JOB:later") == echomq_clock.ms + 30_000


def test_the_server_clock_is_back_after_the_clock() -> None:
    with Clock(1_000) as clock:
        assert checked_now(None) == "1000"
        clock.advance(1.5)
        assert checked_now(None) == "2500"
    assert checked_now(None) == "*"
    with pytest.raises(ValueError, match="forward only"):
        clock.advance(-1)


def test_a_retry_runs_again_when_the_clock_reaches_its_backoff(
        echomq_app: App, echomq_worker: Worker, echomq_clock: Clock, echomq_conn: Any) -> None:
    failures: list[int] = []

    @echomq_app.task(backoff=Backoff(first_ms=1_000, jitter=0))
    def once(n: int) -> int:
        if not failures:
            failures.append(n)
            raise ConnectionError("down")
        return n

    handle = once.enqueue(7)
    (first,) = echomq_worker.run_until_idle()
    assert (first.outcome, first.attempt) == ("retrying", 1)
    assert "ConnectionError: down" in (first.error or "")
    delayed = f"emq:{{{echomq_app.queue.name}}}:delayed"
    assert echomq_conn.zscore(delayed, handle.id) == echomq_clock.ms + 1_000
    echomq_clock.advance(0.999)
    assert echomq_worker.run_until_idle() == []
    echomq_clock.advance(0.001)
    (second,) = echomq_worker.run_until_idle()
    assert (second.outcome, second.attempt, second.error) == ("done", 2, None)
    assert handle.result(timeout=1) == 7
    assert echomq_worker.ran == [first, second]


def test_dead_jobs_are_raised_with_their_ids_and_errors(echomq_app: App,
                                                        echomq_worker: Worker) -> None:
    @echomq_app.task(max_attempts=1)
    def refuse(reason: str) -> None:
        raise LookupError(reason)

    handle = refuse.enqueue("no such order")
    with pytest.raises(DeadJobs) as raised:
        echomq_worker.run_until_idle()
    (dead,) = raised.value.dead
    assert (dead.job_id, dead.outcome) == (handle.id, "dead")
    assert f"- {handle.id} ({refuse.name}, attempt 1):" in str(raised.value)
    assert "LookupError: no such order" in str(raised.value)
    assert echomq_app.queue.outcome(handle.id).state == "dead"
    assert echomq_worker.run_until_idle() == []


def test_bound_points_an_app_at_the_tests_server_and_back(echomq_conn: Any) -> None:
    elsewhere = redis.Redis(port=1)  # never connected to
    app = App(elsewhere, check_policy=False)

    @app.periodic("* * * * *", name="tick")
    @app.task(queue="mail")
    def tick() -> None: ...

    queue = app.queue
    with bound(app, echomq_conn):
        assert app.conn is echomq_conn and app.queue.conn is echomq_conn
        assert {name: q.conn for name, q in app.queues.items()} == {
            "default": echomq_conn, "mail": echomq_conn}
        assert [entry.queue.conn for entry in app.scheduler.entries] == [echomq_conn]
        handle = tick.enqueue()
        assert echomq_conn.exists(f"emq:{{mail}}:job:{handle.id}") == 1
    assert app.conn is elsewhere and app.queue is queue
    assert [entry.queue.conn for entry in app.scheduler.entries] == [elsewhere]
    assert all(q.conn is elsewhere for q in app.queues.values())
