"""The default wire (auto) on a cluster one of whose primaries has no trafikey: a queue takes its
answer from the node of its slot, so a queue there runs scripts while one on a node with the
module runs native commands; a sharded queue over every node decides once, for scripts. Every
job is admitted and run once either way. See docs/GUIDE.md, "Choosing the executor"."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis.cluster

from echomq import Queue, Verdict, Wire
from echomq.embedded import EmbeddedValkey
from tests.cluster import three_primaries
from tests.reliability.servers import owner

BARE = 2  # the index of the primary started without trafikey


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[EmbeddedValkey]]:
    with three_primaries(bare=BARE) as made:
        yield made


@pytest.fixture
def rc(nodes: list[EmbeddedValkey]) -> Iterator[redis.cluster.RedisCluster]:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=nodes[0].port)
    client.flushall()
    for node in nodes:
        node.client().config_resetstat()
    yield client
    client.close()


def queue_on(rc: redis.cluster.RedisCluster, nodes: list[EmbeddedValkey],
             node: EmbeddedValkey) -> str:
    """A queue name whose slot ``node`` serves."""
    return next(name for name in (f"q{n}" for n in range(1000))
                if owner(nodes, rc.keyslot(f"emq:{{{name}}}:pending")) is node)


def native_calls(node: EmbeddedValkey) -> dict[str, int]:
    stats = node.client().info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()
            if (name == "cmdstat_evalsha" or name.startswith("cmdstat_emq.")) and row["calls"]}


def test_each_queue_runs_what_the_node_of_its_slot_runs(
        nodes: list[EmbeddedValkey], rc: redis.cluster.RedisCluster) -> None:
    with_module, bare = nodes[0], nodes[BARE]
    native = Queue(rc, queue_on(rc, nodes, with_module), check_policy=False)
    scripted = Queue(rc, queue_on(rc, nodes, bare), check_policy=False)
    for queue in (native, scripted):
        assert queue.enqueue("JOB:1", b"x") is Verdict.ENQUEUED
        job = queue.claim()
        assert job is not None and queue.ack(job) is Verdict.ACKED
        assert queue.outcome("JOB:1").state == "done"
    assert native.executor.chosen is Wire.NATIVE
    assert scripted.executor.chosen is Wire.SCRIPTS
    assert native_calls(with_module) == {"emq.enqueue": 1, "emq.claim": 1, "emq.ack": 1}
    assert native_calls(bare) == {"evalsha": 3 + 2}  # the claim's and ack's first met NOSCRIPT


def test_a_sharded_queue_over_every_node_decides_once_for_scripts(
        nodes: list[EmbeddedValkey], rc: redis.cluster.RedisCluster,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    queue = Queue(rc, "spread", shards=6, check_policy=False)
    homes = {owner(nodes, rc.keyslot(shard.key("pending"))).port for shard in queue.shard_queues}
    assert homes == {node.port for node in nodes}
    ids = [f"JOB:{n}" for n in range(60)]
    assert queue.enqueue_many([(job_id, b"x") for job_id in ids]) == [Verdict.ENQUEUED] * 60
    claimed = []
    while (job := queue.claim()) is not None:
        claimed.append(job.id)
        assert queue.ack(job) is Verdict.ACKED
    assert sorted(claimed) == sorted(ids)
    assert queue.executor.chosen is Wire.SCRIPTS
    said = [(record.levelno, record.getMessage()) for record in caplog.records
            if record.name == "echomq" and "wire auto" in record.getMessage()]
    scripts = "queue spread: wire auto runs each transition as its Lua script (the server does " \
              "not know EMQ.ENQUEUE_MANY: trafikey is not loaded there)"
    # the first shard sent to may lie on a node with the module: native, until a bare one says
    assert said in ([(logging.INFO, scripts)],
                    [(logging.INFO, said[0][1]), (logging.WARNING, scripts)])
    assert "native EMQ.* command" in said[0][1] or len(said) == 1
