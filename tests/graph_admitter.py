"""``python -m tests.graph_admitter <url> <wire> <steps> <children> [aio]``: admits a chord of
``children`` (``bench.admission.chord_graph``) on queue ``staged`` and stops dead before its
step ``steps + 1``: it prints ``sent <steps>`` once that many steps of the admission got their
replies, then blocks until it is killed (tests/test_staged_admission.py SIGKILLs it there)."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import redis
import redis.asyncio as aioredis

from bench.admission import chord_graph
from echomq import Queue, aio
from echomq.engine import program

perform = program.Atomic.perform


def stopping_after(steps: int) -> Any:
    """``Atomic.perform`` that performs ``steps`` transactions, then says so and blocks."""
    done = [0]

    def performed(self: program.Atomic, in_aio: bool) -> Any:
        if done[0] == steps:
            print(f"sent {steps}", flush=True)
            threading.Event().wait()
        done[0] += 1
        return perform(self, in_aio)

    return performed


def main(url: str, wire: str, steps: str, children: str, shell: str = "blocking") -> None:
    # the scripts loaded first, so that no step is sent twice for a NOSCRIPT
    Queue(redis.Redis.from_url(url), "warm", wire=int(wire)).enqueue_graph(chord_graph(1))
    program.Atomic.perform = stopping_after(int(steps))  # type: ignore[method-assign]
    graph = chord_graph(int(children))
    if shell == "aio":
        async def admit() -> None:
            queue = aio.Queue(aioredis.Redis.from_url(url), "staged", wire=int(wire))
            await queue.enqueue_graph(graph)
        asyncio.run(admit())
    else:
        Queue(redis.Redis.from_url(url), "staged", wire=int(wire)).enqueue_graph(graph)
    print("admitted", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
