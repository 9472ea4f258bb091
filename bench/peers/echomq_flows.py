"""The App ``echomq worker bench.peers.echomq_flows:app`` serves in the workflows phase: its
server and wire come from the environment (BENCH_FLOWS_URL, BENCH_FLOWS_WIRE)."""

import os

import redis

from bench.workflows import make_app

app, noop, collect = make_app(redis.Redis.from_url(os.environ["BENCH_FLOWS_URL"]),
                              int(os.environ["BENCH_FLOWS_WIRE"]))
