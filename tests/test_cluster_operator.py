"""The operator's view on a cluster: ``admin.stats`` (one queue and every queue), the dead jobs'
listing, requeue and purge, the live workers, the dashboard's read routes and one CLI command,
through ``redis.cluster.RedisCluster`` on three primaries, with one queue's slot on each node,
on both wires. See docs/CLUSTER.md, "Operating a cluster"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from redis.cluster import RedisCluster
from redis.crc import key_slot
from starlette.testclient import TestClient

from echomq import Queue, Verdict
from echomq.cli.main import main
from echomq.consumer.presence import Announcer
from echomq.consumer.roster import live_workers
from echomq.embedded import EmbeddedValkey
from echomq.ops import admin
from echomq.ops.dashboard import create_app
from echomq.queue.registry import DISCOVERED_KEY, REGISTRY_KEY
from tests.cluster import three_primaries
from tests.reliability.servers import owner

NOW = 1_700_000_000_000
SITE = "http://127.0.0.1:8042"


def spread_names() -> list[str]:
    """Three queue names whose slots fall on the three nodes' thirds of the slots."""
    found: dict[int, str] = {}
    for index in range(100):
        name = f"ops{index}"
        found.setdefault(int(key_slot(f"emq:{{{name}}}:".encode())) * 3 // 16384, name)
    return [found[third] for third in range(3)]


NAMES = spread_names()


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[EmbeddedValkey]]:
    with three_primaries() as made:
        yield made


@pytest.fixture(params=[5, 6])
def wire(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def rc(nodes: list[EmbeddedValkey]) -> Iterator[RedisCluster]:
    client = RedisCluster(host="127.0.0.1", port=nodes[0].port)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    try:
        yield client
    finally:
        client.flushall(target_nodes=RedisCluster.PRIMARIES)
        client.close()


def fill(rc: RedisCluster, wire: int) -> dict[str, Queue]:
    """Per queue: two pending jobs admitted at NOW, one delayed, one active, two dead."""
    queues = {name: Queue(rc, name, wire=wire) for name in NAMES}
    for name, queue in queues.items():
        for index in range(2):
            queue.enqueue(f"JOB:{name}:dead{index}", b"x", now=NOW)
            job = queue.claim(now=NOW)
            assert job is not None
            assert queue.retry(job, error="ValueError: bad", max_attempts=1,
                               now=NOW) is Verdict.DEAD
        queue.enqueue(f"JOB:{name}:active", b"x", now=NOW)
        assert queue.claim(now=NOW) is not None
        queue.enqueue(f"JOB:{name}:p0", b"x", now=NOW)
        queue.enqueue(f"JOB:{name}:p1", b"x", now=NOW + 1)
        queue.enqueue(f"JOB:{name}:later", b"x", delay_ms=3_600_000, now=NOW)
    return queues


def test_the_queues_lie_on_three_nodes(nodes: list[EmbeddedValkey]) -> None:
    holders = {owner(nodes, int(key_slot(f"emq:{{{name}}}:".encode()))).port for name in NAMES}
    assert len(holders) == 3


def test_stats_of_every_queue(rc: RedisCluster, wire: int) -> None:
    fill(rc, wire)
    rc.delete(DISCOVERED_KEY, REGISTRY_KEY)  # queues made before the registry
    assert admin.queue_names(rc) == sorted(NAMES)
    for name in NAMES:
        found = admin.stats(rc, name)
        assert (found.pending, found.active, found.delayed, found.dead) == (2, 1, 1, 2)
        assert found.oldest_pending_age_ms is not None
        assert found.oldest_pending_age_ms == found.server_time_ms - NOW


def test_dead_list_requeue_and_purge(rc: RedisCluster, wire: int) -> None:
    fill(rc, wire)
    for name in NAMES:
        dead = admin.dead_jobs(rc, name)
        assert [job.id for job in dead] == [f"JOB:{name}:dead0", f"JOB:{name}:dead1"]
        assert all(job.attempts == 1 and "ValueError" in job.error for job in dead)
        assert admin.requeue(rc, name, f"JOB:{name}:dead0")
        assert admin.purge(rc, name) == 1
        assert admin.dead_jobs(rc, name) == []
        assert admin.stats(rc, name).pending == 3


def test_live_workers(nodes: list[EmbeddedValkey], rc: RedisCluster, wire: int) -> None:
    announcers = [Announcer(rc, name, wire) for name in NAMES]
    for announcer in announcers:
        assert announcer.beat()
    try:
        assert sorted(worker.queue for worker in live_workers(rc)) == sorted(NAMES)
        result = CliRunner().invoke(main, ["workers", "--json", "--url", url_of(nodes)])
        assert result.exit_code == 0, result.output
        assert sorted(w["queue"] for w in json.loads(result.output)) == sorted(NAMES)
    finally:
        for announcer in announcers:
            announcer.stop()


def url_of(nodes: list[EmbeddedValkey]) -> str:
    """The URL of one node, not the one the test's client was made with."""
    return f"redis://127.0.0.1:{nodes[1].port}"


def test_the_dashboards_queue_list_and_a_queues_pages(rc: RedisCluster, wire: int) -> None:
    fill(rc, wire)
    with TestClient(create_app(rc), base_url=SITE) as client:
        listed = client.get("/api/queues")
        assert listed.status_code == 200, listed.text
        rows = {row["name"]: row for row in queues_of(listed.json())}
        assert sorted(rows) == sorted(NAMES)
        assert all((row["pending"], row["dead"]) == (2, 2) for row in rows.values())
        for name in NAMES:
            dead = client.get(f"/api/queues/{name}/dead")
            assert dead.status_code == 200, dead.text
            assert [job["id"] for job in dead.json()] == [f"JOB:{name}:dead0",
                                                          f"JOB:{name}:dead1"]
            job = client.get(f"/api/queues/{name}/jobs/JOB:{name}:p0")
            assert job.status_code == 200 and job.json()["state"] == "pending"
            assert client.get(f"/api/queues/{name}/lanes").status_code == 200
        assert client.get("/api/workers").status_code == 200


def queues_of(reply: Any) -> list[dict[str, Any]]:
    return list(reply["queues"] if isinstance(reply, dict) else reply)


def test_the_cli_finds_a_cluster_from_one_nodes_url(nodes: list[EmbeddedValkey],
                                                   rc: RedisCluster, wire: int) -> None:
    fill(rc, wire)
    result = CliRunner().invoke(main, ["stats", "--json", "--url", url_of(nodes)])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert sorted(rows) == sorted(NAMES)
    assert all((row["pending"], row["active"], row["dead"]) == (2, 1, 2) for row in rows.values())


def test_an_admission_stands_while_the_registrys_node_is_down() -> None:
    """The registry of queues (``emq:queues``, written at a queue's first admission) lies on
    another node than the queue, and that node is down: each enqueue still answers its verdict
    (the job is admitted; the registry's write waits for a later admission), and the jobs are
    there."""
    with three_primaries() as made:
        for node in made:
            client = node.client()
            client.config_set("cluster-require-full-coverage", "no")
            client.close()
        registry = owner(made, int(key_slot(REGISTRY_KEY.encode())))
        entry = next(node for node in made if node is not registry)
        name = next(name for name in (f"reg{n}" for n in range(10_000))
                    if owner(made, int(key_slot(f"emq:{{{name}}}:".encode()))) is entry)
        rc = RedisCluster(host="127.0.0.1", port=entry.port)
        try:
            registry.stop()
            queue = Queue(rc, name, wire=6)
            assert queue.enqueue("JOB:1", b"x") is Verdict.ENQUEUED
            assert queue.enqueue("JOB:2", b"x") is Verdict.ENQUEUED
            assert queue.counts()["pending"] == 2
        finally:
            rc.close()
