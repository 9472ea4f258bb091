"""Workflows on a Valkey Cluster: a job's parents and the job itself admitted in one transaction
on the node of the queue's slot, for redis-py's and valkey-py's cluster clients, blocking and
asyncio, on both wires; then the join, run by the settle of the last parent there too."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from echomq import Ack, Queue, Verdict
from echomq.aio import Queue as AsyncQueue
from echomq.embedded import EmbeddedValkey
from echomq.queue.graphs import GraphJob
from tests.cluster import three_primaries
from tests.test_cluster_routing import CLIENTS


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[EmbeddedValkey]]:
    with three_primaries() as started:
        yield started


async def reply(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def flow(client: Any, name: str, wire: int, aio: bool) -> None:
    queue: Any = (AsyncQueue if aio else Queue)(client, name, wire=wire)
    verdicts = await reply(queue.enqueue_graph([
        GraphJob("JOB:a", b"a"), GraphJob("JOB:b", b"b"),
        GraphJob("JOB:join", b"j", after=("JOB:a", "JOB:b"))]))
    assert verdicts == [Verdict.ENQUEUED, Verdict.ENQUEUED, Verdict.WAITING]
    assert await reply(queue.enqueue_after("JOB:last", b"l", after=["JOB:join"])) \
        is Verdict.WAITING
    done = []
    while (job := await reply(queue.claim())) is not None:
        verdicts, _ = await reply(queue.settle([Ack(job, result=job.payload)]))
        assert verdicts == [Verdict.ACKED]
        done.append(job.id)
    assert done == ["JOB:a", "JOB:b", "JOB:join", "JOB:last"]
    assert await reply(queue.results(["JOB:a", "JOB:b", "JOB:join"])) == [b"a", b"b", b"j"]


async def run(nodes: list[EmbeddedValkey], library: str, aio: bool, wire: int) -> None:
    client = CLIENTS[library, aio](host="127.0.0.1", port=nodes[0].port)
    try:
        if aio:
            await client.initialize()
        for tag in ("one", "two", "three"):  # queues whose slots fall on different nodes
            await flow(client, f"flows-{tag}-{library}-{aio}-{wire}", wire, aio)
    finally:
        await reply(client.aclose() if aio else client.close())


@pytest.mark.parametrize("wire", [5, 6], ids=["wire5", "wire6"])
@pytest.mark.parametrize("aio", [False, True], ids=["blocking", "asyncio"])
@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_a_workflow_runs_on_a_cluster(nodes: list[EmbeddedValkey], library: str, aio: bool,
                                      wire: int) -> None:
    asyncio.run(run(nodes, library, aio, wire))
