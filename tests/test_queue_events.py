"""Reading a queue's events: the decoder on every reply shape (XRANGE, XREAD under RESP2 and
RESP3, redis-py and valkey-py), ``Queue.events`` on a stream filled by hand (resuming from an id,
``$``, counts, blocking in slices under the socket timeout), on both Queues, and bad input
refused before anything is sent."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from echomq import ArgumentError, Event, EventKind, Queue
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.engine.clients import async_twin
from echomq.engine.events import decode_entries, event_of
from echomq.engine.transitions import EVENT_KINDS
from tests.conftest import CLIENT_LIBRARIES, client_of
from tests.test_queue import commands_sent

NOW = 1_700_000_000_000


@pytest.fixture(params=[(library, protocol) for library in CLIENT_LIBRARIES
                        for protocol in (2, 3)],
                ids=[f"{library}-resp{protocol}" for library in CLIENT_LIBRARIES
                     for protocol in (2, 3)])
def conn(request: pytest.FixtureRequest, valkey: EmbeddedValkey) -> Iterator[Any]:
    """Every test here runs on redis-py and valkey-py, each speaking RESP2 and RESP3."""
    library, protocol = request.param
    client = client_of(valkey, library, protocol=protocol)
    client.flushall()
    yield client
    client.flushall()
    client.close()


@pytest.fixture
def queue(conn: Any) -> Queue:
    return Queue(conn, "emails", check_policy=False)


def fill(queue: Queue, n: int, start_ms: int = NOW) -> list[str]:
    """``n`` enqueued events of jobs J0..J<n-1>, one ms apart."""
    ids = []
    for i in range(n):
        added = queue.conn.xadd(queue.key("events"),
                                {"kind": "enqueued", "job": f"J{i}", "attempt": "0",
                                 "at": str(start_ms + i)}, id=f"{start_ms + i}-0")
        ids.append(added.decode() if isinstance(added, bytes) else added)
    return ids


# the decoder -------------------------------------------------------------------------------

def test_event_kinds_are_the_protocol_table_s() -> None:
    assert tuple(EventKind) == EVENT_KINDS
    assert EventKind.DONE == "done"


def test_every_reply_shape_decodes_to_the_same_events(queue: Queue) -> None:
    key = queue.key("events")
    queue.conn.xadd(key, {"kind": "claimed", "job": "J1", "attempt": "1", "at": str(NOW),
                          "fence": "7", "lane": "acme"}, id=f"{NOW}-0")
    queue.conn.xadd(key, {"kind": "done", "job": "J1", "attempt": "1", "fence": "7"},
                    id=f"{NOW + 5}-0")
    expected = [Event(f"{NOW}-0", "claimed", "J1", 1, NOW, fence=7, lane="acme"),
                Event(f"{NOW + 5}-0", "done", "J1", 1, NOW + 5, fence=7)]
    replies = [
        queue.conn.xrange(key, "-", "+"),
        queue.conn.xread({key: "0-0"}, count=10),
        queue.conn.xread({key: "0-0"}, count=10, block=1),
        queue.conn.execute_command("XRANGE", key, "-", "+"),
        queue.conn.execute_command("XREAD", "COUNT", "10", "STREAMS", key, "0-0"),
    ]
    for reply in replies:
        assert decode_entries(reply) == expected, reply
    assert decode_entries(queue.conn.xread({key: f"{NOW + 5}-0"}, count=10)) == []


def test_raw_shapes_decode_without_a_client_library() -> None:
    fields = [b"kind", b"retried", b"job", b"J", b"attempt", b"2", b"at", b"10", b"due", b"20"]
    event = Event("10-3", "retried", "J", 2, 10, due_ms=20)
    assert decode_entries([[b"10-3", fields]]) == [event]  # XRANGE
    assert decode_entries([[b"{emq:q}events", [[b"10-3", fields]]]]) == [event]  # XREAD, RESP2
    assert decode_entries({b"{emq:q}events": [[b"10-3", fields]]}) == [event]  # XREAD, RESP3
    assert decode_entries(None) == decode_entries([]) == decode_entries({}) == []


def test_a_newer_server_s_kind_and_fields_never_break_a_reader() -> None:
    event = event_of("5-0", {"kind": "teleported", "job": "J", "attempt": "x", "colour": "red",
                             "priority": "-3", "fence": ""})
    assert event == Event("5-0", "teleported", "J", 0, 5, priority=-3)
    assert event_of(b"9-1", {}) == Event("9-1", "", "", 0, 9)


# Queue.events on a stream filled by hand ---------------------------------------------------

def test_events_reads_oldest_first_and_resumes_after_an_id(queue: Queue) -> None:
    ids = fill(queue, 5)
    first = queue.events(count=2)
    assert [event.id for event in first] == ids[:2]
    assert [(e.kind, e.job_id, e.attempt, e.at_ms) for e in first] == [
        (EventKind.ENQUEUED, "J0", 0, NOW), (EventKind.ENQUEUED, "J1", 0, NOW + 1)]
    rest = queue.events(since=first[-1].id)
    assert [event.id for event in rest] == ids[2:]
    assert queue.events(since=ids[-1]) == []
    assert [e.id for e in queue.events(since=str(NOW + 2))] == ids[3:]  # '<ms>' is '<ms>-0'


def test_a_queue_without_a_stream_reads_no_events(queue: Queue) -> None:
    assert queue.events() == []
    assert queue.events(block_ms=20) == []


def test_since_now_with_no_block_is_nothing_and_sends_nothing(queue: Queue) -> None:
    fill(queue, 2)
    before = commands_sent(queue.conn)
    assert queue.events(since="$") == []
    assert commands_sent(queue.conn) == before


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"since": "abc"}, "since must be"), ({"since": "1-"}, "since must be"),
    ({"since": "(5-0"}, "since must be"), ({"count": 0}, "count"), ({"block_ms": -1}, "block_ms"),
])
def test_bad_reads_are_refused_before_sending(queue: Queue, kwargs: dict[str, Any],
                                              words: str) -> None:
    before = commands_sent(queue.conn)
    with pytest.raises(ArgumentError, match=words):
        queue.events(**kwargs)
    assert commands_sent(queue.conn) == before


def blocked_readers(conn: Any) -> int:
    return int(conn.info("clients")["blocked_clients"])


def append_once_blocked(server: EmbeddedValkey, queue: Queue, job: str) -> threading.Thread:
    """A thread that appends an event for ``job`` once a reader blocks on the server."""
    def run() -> None:
        other = server.client()
        while blocked_readers(other) == 0:
            threading.Event().wait(0.005)
        other.xadd(queue.key("events"), {"kind": "enqueued", "job": job, "attempt": "0"})
        other.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_blocking_read_returns_what_is_appended_while_it_waits(
        queue: Queue, valkey: EmbeddedValkey) -> None:
    old = fill(queue, 2)
    writer = append_once_blocked(valkey, queue, "LATE")
    found = queue.events(since=old[-1], block_ms=60_000)
    writer.join()
    assert [event.job_id for event in found] == ["LATE"]


def test_since_now_blocks_past_what_is_there(queue: Queue, valkey: EmbeddedValkey) -> None:
    fill(queue, 3)
    writer = append_once_blocked(valkey, queue, "NEW")
    found = queue.events(since="$", block_ms=60_000)
    writer.join()
    assert [event.job_id for event in found] == ["NEW"]


def test_a_long_block_is_sliced_under_the_socket_timeout(valkey: EmbeddedValkey,
                                                          library: str) -> None:
    """A block longer than the socket timeout does not trip it: each XREAD blocks less."""
    conn = client_of(valkey, library, socket_timeout=0.3)
    try:
        conn.flushall()
        queue = Queue(conn, "emails", check_policy=False)
        conn.config_resetstat()
        assert queue.events(block_ms=900) == []
        reads = int(conn.info("commandstats")["cmdstat_xread"]["calls"])
        assert reads >= 2  # at most 0.3 s a slice (less a margin): 0.9 s takes several
    finally:
        conn.close()


def test_the_asyncio_queue_reads_the_same_events(queue: Queue, conn: Any) -> None:
    ids = fill(queue, 3)

    async def main() -> tuple[list[Event], list[Event]]:
        client = async_twin(conn)
        try:
            twin = AsyncQueue(client, "emails", check_policy=False)
            return await twin.events(since=ids[0]), await twin.events(since=ids[-1],
                                                                      block_ms=20)
        finally:
            await client.aclose()

    resumed, none = asyncio.run(main())
    assert resumed == queue.events(since=ids[0]) and [e.id for e in resumed] == ids[1:]
    assert none == []


def test_the_latest_events_are_the_newest_oldest_first(queue: Queue) -> None:
    ids = fill(queue, 5)
    assert [event.id for event in queue.latest_events(2)] == ids[3:]
    assert [event.id for event in queue.latest_events()] == ids
    assert Queue(queue.conn, "other", check_policy=False).latest_events() == []


def test_follow_yields_each_event_as_it_comes_on_both_queues(
        queue: Queue, conn: Any, valkey: EmbeddedValkey) -> None:
    ids = fill(queue, 2)
    followed = queue.follow(since=ids[0], block_ms=60_000)
    assert next(followed).id == ids[1]
    writer = append_once_blocked(valkey, queue, "NEXT")
    assert next(followed).job_id == "NEXT"
    writer.join()
    from_now = queue.follow(since="$", block_ms=60_000)
    writer = append_once_blocked(valkey, queue, "AFTER")
    assert next(from_now).job_id == "AFTER"
    writer.join()

    async def main() -> list[str]:
        client = async_twin(conn)
        try:
            twin = AsyncQueue(client, "emails", check_policy=False)
            seen = []
            async for event in twin.follow(block_ms=20):
                seen.append(event.job_id)
                if len(seen) == 4:
                    break
            return seen
        finally:
            await client.aclose()

    assert asyncio.run(main()) == ["J0", "J1", "NEXT", "AFTER"]
