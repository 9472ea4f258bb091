"""A sharded queue (``Queue(conn, name, shards=6)``) on a Valkey Cluster of three primaries
(``three_primaries``), two shards on each: while one primary is down (killed, no replica, within
the node timeout, so the others still serve their slots), a spread consumer serves the shards of
the nodes up at their pace, the failing shards resting from its claims
(``echomq.consumer.spread``) instead of backing off the whole consumer; and ``echomq worker
--queue <name> --url <one node>`` reads the count of shards from the server, runs jobs of every
shard and stops cleanly on SIGTERM. Under failover with replicas:
tests/reliability/test_cluster_failover.py. See docs/CLUSTER.md."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest
from redis.cluster import RedisCluster, key_slot

from echomq import Consumer, Job, Queue
from tests.cluster import three_primaries
from tests.reliability.flow import slot_of
from tests.reliability.servers import owner
from tests.test_consumer import running, wait_until
from tests.test_worker import Workers

SHARDS = 6
JOBS = 120  # on the shards of the nodes up, once one is down
# They all run within this (each job runs at once: only the rounds take time). Without the
# rest of a failing shard they take about 30 s (a round a second, 4 jobs a round); the bound
# stays under the cluster's node timeout (15 s), after which the whole cluster is down.
AT_PACE_S = 8.0


def ids_on(queue: Queue, shards: set[int], count: int, stem: str) -> list[str]:
    """``count`` ids that ``queue`` routes to one of ``shards``."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        job_id = f"JOB:{stem}{n}"
        n += 1
        if queue.shard_of(job_id) in shards:
            found.append(job_id)
    return found


@pytest.mark.parametrize("wire", [5, 6])
def test_a_spread_consumer_serves_the_shards_of_the_nodes_up_at_pace_while_one_is_down(
        wire: int) -> None:
    """Without the rest, every round met the down node's error and the whole consumer backed
    off (0.1 s doubling to 1 s), serving the other shards a round a second."""
    with three_primaries() as nodes:
        rc = RedisCluster(host="127.0.0.1", port=nodes[1].port)
        queue = Queue(rc, "down", shards=SHARDS, wire=wire)
        homes = [owner(nodes, slot_of(shard)) for shard in queue.shard_queues]
        assert Counter(node.port for node in homes) == {node.port: 2 for node in nodes}
        up = {k for k, node in enumerate(homes) if node is not nodes[0]}
        acked: list[str] = []
        lock = threading.Lock()

        def noted(job: Job) -> None:
            with lock:
                acked.append(job.id)

        consumer = Consumer(queue, lambda job: None, on_ack=noted, prefetch=4, announce=False)
        try:
            with running(consumer, stop_within=10.0):
                # Every shard served once first, so each node has every call's script.
                first = [ids_on(queue, {k}, 1, f"first{k}-")[0] for k in range(SHARDS)]
                queue.enqueue_many([(job_id, b"x") for job_id in first])
                assert wait_until(lambda: len(acked) == SHARDS, 10)
                nodes[0].kill()
                later = ids_on(queue, up, JOBS, "later")
                queue.enqueue_many([(job_id, b"x") for job_id in later])
                assert wait_until(lambda: len(acked) == SHARDS + JOBS, AT_PACE_S), \
                    f"{len(acked) - SHARDS} of {JOBS} acked within {AT_PACE_S} s"
        finally:
            rc.close()
    assert sorted(acked) == sorted(first + later)


@pytest.mark.parametrize(("mode", "target"), [
    (("--concurrency", "1"), "tests.worker_apps:record"),
    (("--async-concurrency", "2"), "tests.worker_apps:async_record"),
], ids=["threads", "asyncio"])
def test_the_worker_serves_a_sharded_queue_of_a_cluster_reading_its_shards_from_the_server(
        tmp_path: Any, mode: tuple[str, str], target: str) -> None:
    """``echomq worker --queue <name> --url <one node>``, no count of shards given: the worker
    (threads, or an asyncio consumer on the asyncio cluster client) opens the queue as the
    server records it (six shards) and runs the jobs of every shard (its handler notes each
    payload, the job's shard, in ``test:order`` through the node named); SIGTERM stops it with
    exit code 0."""
    with three_primaries() as nodes:
        rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
        url_node = owner(nodes, int(key_slot(b"test:order")))
        queue = Queue(rc, "cliq", shards=SHARDS, wire=5)
        jobs = [(job_id, str(k).encode()) for k in range(SHARDS)
                for job_id in ids_on(queue, {k}, 3, f"s{k}-")]
        queue.enqueue_many(jobs)
        order = url_node.client()
        supervisor = Workers(url_node, tmp_path / "workers.log", "cliq", *mode,
                             handler=target, url=url_node.url, on_ack=None)
        try:
            assert wait_until(lambda: order.llen("test:order") == len(jobs), 30), \
                supervisor.log()
            ran = Counter(order.lrange("test:order", 0, -1))
            assert ran == {str(k).encode(): 3 for k in range(SHARDS)}
            assert wait_until(lambda: queue.counts()["active"] == 0, 10)
            assert supervisor.terminate(within=10) == 0
        finally:
            supervisor.close()
            order.close()
            rc.close()
        assert "ERROR" not in supervisor.log(), supervisor.log()
        assert "Traceback" not in supervisor.log(), supervisor.log()



def cluster_client_class(library: str, in_asyncio: bool) -> Any:
    import redis.asyncio.cluster
    import valkey.asyncio.cluster
    import valkey.cluster

    return {("redis", False): RedisCluster, ("redis", True): redis.asyncio.cluster.RedisCluster,
            ("valkey", False): valkey.cluster.ValkeyCluster,
            ("valkey", True): valkey.asyncio.cluster.ValkeyCluster}[(library, in_asyncio)]


@pytest.mark.parametrize("in_asyncio", [False, True], ids=["sync", "asyncio"])
@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_a_spread_consumer_runs_every_shards_jobs_through_either_librarys_cluster_client(
        library: str, in_asyncio: bool) -> None:
    """redis-py's and valkey-py's cluster clients, blocking and asyncio: a spread consumer's
    rounds (``echomq.engine.scatter``: its outcomes of several shards, its reads before a park)
    reach each node through the client's own per-node clients, which the two libraries name
    apart (``get_redis_connection``, ``get_valkey_connection``)."""
    from echomq import aio

    kind = cluster_client_class(library, in_asyncio)
    ids = [f"JOB:{n}" for n in range(60)]
    acked: list[str] = []
    with three_primaries() as nodes:
        producer = RedisCluster(host="127.0.0.1", port=nodes[0].port)
        queue = Queue(producer, "libs", shards=SHARDS, wire=6)
        assert {queue.shard_of(job_id) for job_id in ids} == set(range(SHARDS))
        queue.enqueue_many([(job_id, b"x") for job_id in ids])
        if in_asyncio:
            async def serve() -> None:
                client = kind(host="127.0.0.1", port=nodes[0].port)
                consumer = aio.Consumer(aio.Queue(client, "libs", shards=SHARDS, wire=6),
                                        lambda job: None, prefetch=8, announce=False,
                                        on_ack=lambda job: acked.append(job.id))
                served = asyncio.ensure_future(consumer.run())
                await asyncio.to_thread(wait_until, lambda: len(acked) == len(ids), 10)
                consumer.stop()
                await served
                await client.aclose()

            asyncio.run(serve())
        else:
            client = kind(host="127.0.0.1", port=nodes[0].port)
            consumer = Consumer(Queue(client, "libs", shards=SHARDS, wire=6), lambda job: None,
                                prefetch=8, announce=False,
                                on_ack=lambda job: acked.append(job.id))
            with running(consumer, stop_within=10.0):
                wait_until(lambda: len(acked) == len(ids), 10)
            client.close()
        producer.close()
    assert sorted(acked) == sorted(ids), f"{len(acked)} of {len(ids)} acked"
