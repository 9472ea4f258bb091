"""What the operator's commands show: jobs in hand as at the workers' last beat (not prefetched
leases), workers per queue, pauses, the oldest waiting job of lanes too, a queue of 10k lanes in
a short summary and a bounded number of round trips, job times a person reads, requeue of every
dead job (filtered), aligned lane tables."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner

from echomq import Queue, Verdict
from echomq.cli.main import main
from echomq.consumer.presence import WORKER_PREFIX, WORKERS_KEY, Announcer
from echomq.embedded import EmbeddedValkey
from echomq.ops import admin
from tests.command_line import cli
from tests.test_cli import assert_one_error, echomq

NOW = 1_700_000_000_000

HOUR_MS = 3_600_000


def server_now(conn: redis.Redis) -> int:
    return admin.server_time_ms(conn)


def write_record(conn: redis.Redis, queue: str, **fields: object) -> None:
    key = f"{WORKER_PREFIX}box:1:1"
    conn.hset(key, mapping={"host": "box", "pid": 1, "queue": queue, "queues": json.dumps([queue]),
                            "wire": 5, "done": 0, "failed": 0, **fields})  # type: ignore[dict-item]
    conn.pexpire(key, 60_000)
    conn.sadd(WORKERS_KEY, key)


def test_a_job_seen_at_the_last_beat_shows_how_long_it_had_run_then(
        valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    now = server_now(conn)
    beat = now - 5_000  # five seconds ago a 1 ms job was in hand; it has long ended
    write_record(conn, "mail", started_ms=now - 60_000, job="JOB:quick", job_since_ms=beat - 1,
                 beat_ms=beat, running=1)
    row = next(line for line in cli(valkey, "workers").splitlines() if "JOB:quick" in line)
    cells = [cell.strip() for cell in row.split("│")]
    assert "1 ms" in cells and "5.0 s" not in cells, row  # had run 1 ms, not "running 5 s"
    assert "5.0 s ago" in cells
    (found,) = json.loads(cli(valkey, "workers", "--json"))
    assert found["running"] == 1


def test_prefetched_leases_are_active_but_not_running(valkey: EmbeddedValkey,
                                                      conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    for n in range(5):
        queue.enqueue(f"JOB:{n}", b"")
    leased = [queue.claim() for _ in range(5)]  # five leases, as a prefetching worker holds
    announcer = Announcer(conn, "mail", 5)
    announcer.began(leased[0])  # one of them runs
    assert announcer.beat()
    try:
        (stats,) = json.loads(cli(valkey, "stats", "--json"))
        assert (stats["active"], stats["running"], stats["workers"]) == (5, 1, 1)
    finally:
        announcer.stop()


def test_a_queue_with_waiting_jobs_and_no_worker_stands_out(valkey: EmbeddedValkey,
                                                            conn: redis.Redis) -> None:
    Queue(conn, "orphaned").enqueue("JOB:1", b"")
    row = next(line for line in cli(valkey, "stats").splitlines() if "orphaned" in line)
    assert row.rstrip(" │").endswith("none"), row


def test_stats_shows_a_pause_and_the_oldest_lane_job(valkey: EmbeddedValkey,
                                                     conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:old", b"", lane="acme", now=server_now(conn) - 3 * HOUR_MS)
    queue.enqueue("JOB:new", b"", lane="zed")
    queue.pause()
    queue.pause("zed")
    (stats,) = json.loads(cli(valkey, "stats", "--json"))
    assert stats["paused"] is True and stats["paused_lanes"] == ["zed"]
    assert stats["oldest_pending_age_ms"] >= 3 * HOUR_MS
    table = cli(valkey, "stats", "mail")
    assert "queue, 1 lane" in table and "3 h 0 min" in table, table


@pytest.fixture
def wide(conn: redis.Redis) -> Iterator[int]:
    """Queue ``wide`` with 10,000 lanes, lane ``t<n>`` holding ``n % 7 + 1`` jobs."""
    lanes = 10_000
    queue = Queue(conn, "wide")
    for n in range(lanes):
        for k in range(n % 7 + 1 if n < 50 else 1):
            queue.enqueue(f"JOB:{n}.{k}", b"", lane=f"t{n}")
    yield lanes


def commands(conn: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(stat["calls"])
            for name, stat in conn.info("commandstats").items()}


def lane_rows(output: str) -> list[tuple[str, int]]:
    """The (lane, depth) rows of a ``stats QUEUE`` lane table."""
    return [(found[1], int(found[2])) for found in re.finditer(r"│ (t\d+)\s+│\s+(\d+) │", output)]


def test_stats_of_10k_lanes_is_a_short_summary_in_few_round_trips(
        valkey: EmbeddedValkey, conn: redis.Redis, wide: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sends: list[int] = []
    original = redis.connection.Connection.send_packed_command

    def counted(self: redis.connection.Connection, command: object, check_health: bool = True
                ) -> None:
        sends.append(1)
        original(self, command, check_health)  # type: ignore[arg-type]

    before = commands(conn)
    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counted)
    result = CliRunner().invoke(main, ["stats", "wide"], env={"ECHOMQ_URL": valkey.url},
                                catch_exceptions=False)
    monkeypatch.undo()
    after = commands(conn)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) < 30, result.output
    assert "10000 holding 10147 jobs" in result.output and "9990 more lanes" in result.output
    assert lane_rows(result.output)[:2] == [("t13", 7), ("t20", 7)]  # deepest, then by name
    assert len(sends) <= 12, len(sends)  # round trips, whatever the number of lanes
    used = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    assert used["llen"] == wide and used["lindex"] == wide and used["hget"] <= wide
    # and the lane's prioritised part: its size and its head (a lane is a list and a zset)
    assert wide <= used["zcard"] <= wide + 10 and used["zrange"] <= wide + 10
    assert sum(used.values()) - 5 * wide < 30, used
    page = cli(valkey, "stats", "wide", "--lanes", "3", "--lanes-from", "1")
    assert lane_rows(page) == [("t20", 7), ("t27", 7), ("t34", 7)] and "9996 more" in page


def test_inspect_shows_times_in_utc_and_relative_to_now(valkey: EmbeddedValkey,
                                                        conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    at = server_now(conn) - 2 * HOUR_MS
    queue.enqueue("JOB:1", b"x", now=at)
    shown = cli(valkey, "inspect", "mail", "JOB:1")
    assert str(at) not in shown, shown
    assert "UTC (2 h 0 min ago)" in shown and "enqueued " in shown
    assert json.loads(cli(valkey, "inspect", "mail", "JOB:1", "--json"))["score"] == at


def kill(queue: Queue, job_id: str, error: str, lane: str | None = None) -> None:
    queue.enqueue(job_id, b"", lane=lane)
    job = queue.claim_lane() if lane else queue.claim()
    assert job is not None and job.id == job_id
    assert queue.retry(job, error=error, max_attempts=1) is Verdict.DEAD


def test_dead_list_is_a_line_a_job_newest_first_and_json_keeps_each_error_whole(
        valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    trace = '\n  File "tasks.py", line 3, in send\n    raise ValueError(f"bad {n}")'
    for n in range(3):  # died a millisecond apart, by an explicit clock
        queue.enqueue(f"JOB:d{n}", ENVELOPES["send_mail"], now=NOW)
        job = queue.claim(now=NOW)
        assert job is not None
        assert queue.retry(job, error=f"ValueError: bad {n}{trace}", max_attempts=1,
                           now=NOW + n) is Verdict.DEAD
    output = cli(valkey, "dead", "list", "mail")
    rows = [line for line in output.splitlines() if "JOB:" in line]
    assert [row.split()[1] for row in rows] == ["JOB:d2", "JOB:d1", "JOB:d0"]
    assert [row.split("│")[-2].strip() for row in rows] == [
        "ValueError: bad 2", "ValueError: bad 1", "ValueError: bad 0"]
    assert "File" not in output and "\\n" not in output
    assert len(output.splitlines()) == 1 + 3 + len(rows) + 1 + 1  # kept, the table, the note
    newest = cli(valkey, "dead", "list", "mail", "--limit", "2")
    assert [line.split()[1] for line in newest.splitlines() if "JOB:" in line] == [
        "JOB:d2", "JOB:d1"]
    listed = json.loads(cli(valkey, "dead", "list", "mail", "--json"))
    assert [(j["id"], j["error"]) for j in listed] == [
        (f"JOB:d{n}", f"ValueError: bad {n}{trace}") for n in (2, 1, 0)]


def test_dead_requeue_all_and_its_filters(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    kill(queue, "JOB:a", "KeyError: 'x'")
    kill(queue, "JOB:b", "TimeoutError: smtp")
    kill(queue, "JOB:c", "TimeoutError: smtp", lane="acme")
    kill(queue, "JOB:d", "KeyError: 'y'")
    assert cli(valkey, "dead", "requeue", "mail", "--all", "--error", "Timeout",
               "--lane", "acme") == "REQUEUED JOB:c\n"
    assert cli(valkey, "dead", "requeue", "mail", "--all", "--error", "KeyError") == (
        "REQUEUED JOB:a\nREQUEUED JOB:d\n")
    assert json.loads(cli(valkey, "dead", "requeue", "mail", "--all", "--json")) == {
        "JOB:b": True}
    assert conn.zcard(queue.key("dead")) == 0
    assert cli(valkey, "dead", "requeue", "mail", "--all") == "requeued 0\n"
    for args in (["mail"], ["mail", "JOB:a", "--all"], ["mail", "JOB:a", "--error", "x"]):
        assert_one_error(echomq("dead", "requeue", *args, url=valkey.url), 2)


def test_lanes_prints_an_aligned_table(valkey: EmbeddedValkey, conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    queue.enqueue("JOB:1", b"", lane="a")
    queue.enqueue("JOB:2", b"", lane="a-much-longer-group-name")
    lines = [line for line in cli(valkey, "lanes", "mail").splitlines() if line[:1] in "│┃"]
    assert len(lines) == 3 and len({len(line) for line in lines}) == 1, lines
    assert len({re.sub(r"[^│┃]", " ", line).replace("┃", "│") for line in lines}) == 1, lines


# A task's payload in each form a worker reads: this release's envelope in JSON and in
# MessagePack (an array), and the earlier release's (a map of every field).
ENVELOPES = {
    "send_mail": b'["send_mail",[]]',
    "build_report": b"\x92\xacbuild_report\x90",
    "earlier": json.dumps({"task": "send_mail", "args": [], "kwargs": {}, "headers": {},
                           "enqueued_ms": 0}).encode(),
}


def test_dead_jobs_show_their_task_and_requeue_by_it(valkey: EmbeddedValkey,
                                                     conn: redis.Redis) -> None:
    queue = Queue(conn, "mail")
    # Each death a millisecond apart, by an explicit clock (dead jobs list in the order they
    # died, newest first; two in one millisecond would list by id), all before the raw job's, on
    # the server's.
    for n, (job_id, form) in enumerate((("JOB:m1", "send_mail"), ("JOB:r1", "build_report"),
                                        ("JOB:m2", "earlier"))):
        queue.enqueue(job_id, ENVELOPES[form])
        job = queue.claim()
        assert job is not None
        assert queue.retry(job, error="OSError: down", max_attempts=1,
                           now=1_700_000_000_000 + n) is Verdict.DEAD
    kill(queue, "JOB:raw", "ValueError: not a task")
    listed = json.loads(cli(valkey, "dead", "list", "mail", "--json"))
    assert [(j["id"], j["task"]) for j in listed] == [  # newest death first
        ("JOB:raw", None), ("JOB:m2", "send_mail"), ("JOB:r1", "build_report"),
        ("JOB:m1", "send_mail")]
    row = next(line for line in cli(valkey, "dead", "list", "mail").splitlines()
               if "JOB:r1" in line)
    assert "build_report" in row
    assert cli(valkey, "dead", "requeue", "mail", "--all", "--task", "send_mail") == (
        "REQUEUED JOB:m1\nREQUEUED JOB:m2\n")
    assert_one_error(echomq("dead", "requeue", "mail", "JOB:r1", "--task", "x",
                            url=valkey.url), 2)
